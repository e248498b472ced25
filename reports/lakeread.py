"""Reading the marts for the report: columns by name, rows as dicts, tolerant of models not built yet.

Columns are read by name where they exist (``rows``), so a model that gains or renames a column
degrades one cell, not the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import duckdb

_COLUMNS: dict[int, dict[tuple[str, str], list[str]]] = {}  # per connection; each catalog query costs ~50 ms
# Per connection: results read once for the whole report. A query on the lake costs 50-100 ms, so one
# lookup per flagged job per table made a 500-job report take minutes (bench/report.py).
_MEMO: dict[int, dict[Any, Any]] = {}


def forget(con: duckdb.DuckDBPyConnection) -> None:
    """Drop what is known of ``con``'s tables (a fresh look after a build, or when it closes)."""
    _COLUMNS.pop(id(con), None)
    _MEMO.pop(id(con), None)


def memo(con: duckdb.DuckDBPyConnection, key: Any, read: Callable[[], Any]) -> Any:
    """``read()`` once per connection and ``key``."""
    cache = _MEMO.setdefault(id(con), {})
    if key not in cache:
        cache[key] = read()
    return cache[key]


def columns(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[str]:
    if id(con) not in _COLUMNS:
        by: dict[tuple[str, str], list[str]] = {}
        for s, t, c in con.execute(
                "SELECT table_schema, table_name, column_name FROM information_schema.columns "
                "WHERE table_catalog = 'lake' ORDER BY table_schema, table_name, ordinal_position").fetchall():
            by.setdefault((s, t), []).append(c)
        _COLUMNS[id(con)] = by
    return _COLUMNS[id(con)].get((schema, table), [])


def rows(con: duckdb.DuckDBPyConnection, schema: str, table: str, where: str = "", order: str = "",
         params: list[Any] | None = None, limit: int | None = None) -> tuple[list[str], list[dict[str, Any]]] | None:
    """All columns of ``schema.table`` as dicts, or None if the model is not built."""
    cols = columns(con, schema, table)
    if not cols:
        return None
    sql = f'SELECT * FROM {schema}."{table}"' + (f" WHERE {where}" if where else "") + \
        (f" ORDER BY {order}" if order else "") + (f" LIMIT {int(limit)}" if limit else "")
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return names, [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def one(con: duckdb.DuckDBPyConnection, schema: str, table: str, finding: dict[str, Any]) -> dict[str, Any]:
    """The model's row for the finding's job (empty when none or not built); the table is read once."""
    def read() -> dict[tuple[Any, Any, Any], dict[str, Any]]:
        got = rows(con, schema, table)
        by: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
        for r in got[1] if got else []:
            by.setdefault((r.get("cluster"), r.get("namespace"), r.get("job")), r)
        return by
    return memo(con, ("one", schema, table), read).get(
        (finding.get("cluster"), finding.get("namespace"), finding.get("job")), {})


def as_json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def first(row: dict[str, Any], *names: str) -> Any:
    for n in names:
        if row.get(n) is not None:
            return row[n]
    return None


def as_dt(v: Any) -> datetime | None:
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    if isinstance(v, str) and v:
        try:
            d = datetime.fromisoformat(v.replace("Z", "+00:00"))
            return d if d.tzinfo else d.replace(tzinfo=UTC)
        except ValueError:
            return None
    return None
