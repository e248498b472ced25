"""Read-only SQL over the lake for analysts (``gangscope sql``).

Every statement is parsed with sqlglot (DuckDB dialect) and with DuckDB's own parser, and anything
that is not clearly one read is refused before it reaches the lake; functions are allowed by list (a
table function can read host files, run SQL text or rewrite the lake's files). Underneath, the
connection attaches the lake READ_ONLY, turns off file system access outside the lake's folder and
locks the configuration; that alone does not stop writes inside the lake's folder (``COPY ... TO``
there, ``lake.merge_adjacent_files()``), which is why the allow-list is the lock that matters.
DuckLake lets this connection read while the pipeline writes in another process.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from gangscope.config import Settings
from gangscope.errors import UserError
from reports.terminal import terminal_safe

log = logging.getLogger(__name__)
logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its "falling back to a Command" notes are not the user's news

FORMATS = ("table", "csv", "json", "parquet")

# Statement types that only read. Everything else is refused.
_READ_TYPES: tuple[type[exp.Expression], ...] = (
    exp.Select, exp.SetOperation, exp.Values, exp.Describe, exp.Show, exp.Summarize, exp.Pivot,
    exp.Subquery,
)
# Node types that write or change state, refused wherever they appear (e.g. nested in a CTE).
_WRITE_NODES: tuple[type[exp.Expression], ...] = (
    exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Alter, exp.Copy, exp.Attach,
    exp.Detach, exp.Install, exp.Set, exp.Use, exp.Command, exp.Into, exp.TruncateTable, exp.Pragma,
)
# PRAGMAs that only report something (not database_list: it shows the catalog's connection string).
_READ_PRAGMAS = frozenset({
    "version", "table_info", "show_tables", "show_tables_expanded", "show_databases",
    "database_size", "storage_info", "functions", "collations", "platform", "user_agent", "metadata_info",
    "show",
})
# Functions are allowed by list, not refused by list: a table function must be one of these (DuckDB's table
# functions read files, attach catalogs, run SQL the parser never saw, or maintain the lake); a scalar or
# aggregate must be one of DuckDB's own built-in ones, less those that read the environment or settings.
_TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "explode", "json_each", "json_tree", "repeat", "summary",
    "duckdb_tables", "duckdb_columns", "duckdb_views", "duckdb_schemas", "duckdb_types", "duckdb_functions",
    "duckdb_keywords", "duckdb_constraints", "duckdb_indexes", "duckdb_sequences", "duckdb_dependencies",
    "pragma_table_info", "pragma_show", "pragma_version", "pragma_platform", "pragma_collations",
    "ducklake_snapshots", "ducklake_table_info", "ducklake_table_changes", "ducklake_table_insertions",
    "ducklake_table_deletions", "ducklake_list_files", "ducklake_current_snapshot",
    "ducklake_last_committed_snapshot",
})
# ``lake.<name>()``: the lake's own read-only views of its history.
_LAKE_FUNCTIONS = frozenset({"snapshots", "table_info", "current_snapshot", "last_committed_snapshot",
                             "table_changes", "table_insertions", "table_deletions"})
_REFUSED_SCALARS = frozenset({"getenv", "current_setting", "write_log", "set_variable", "sleep_ms", "pg_sleep",
                              "current_query", "parse_duckdb_log_message", "checkpoint", "force_checkpoint",
                              "query", "query_table"})


@functools.cache
def _duckdb_functions() -> tuple[frozenset[str], frozenset[str]]:
    """(table functions, other functions) built into DuckDB (a bare in-memory connection: no extensions)."""
    con = duckdb.connect()
    try:
        rows = con.execute("SELECT DISTINCT function_type, lower(function_name) FROM duckdb_functions()").fetchall()
    finally:
        con.close()
    tables = frozenset(n for t, n in rows if t in ("table", "table_macro"))
    return tables, frozenset(n for t, n in rows if t in ("scalar", "aggregate", "macro", "window"))


class WriteRefused(UserError):
    """The statement is not clearly a read; the message says why."""


def _check_functions(tree: exp.Expression) -> None:
    """Refuse any function not on the allow-lists above (wherever it appears: FROM, a CTE, a subquery)."""
    tables, others = _duckdb_functions()
    for node in tree.find_all(exp.Func):
        name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
        parent = node.parent
        qualifier = None
        if isinstance(parent, exp.Table) and parent.this is node and parent.args.get("db") is not None:
            qualifier = parent.args["db"].name.lower()
        elif isinstance(parent, exp.Dot) and parent.expression is node:
            qualifier = parent.this.sql().lower()
        if qualifier is not None:
            if qualifier == "lake" and name in _LAKE_FUNCTIONS:
                continue
            raise WriteRefused(f"refused: function {qualifier}.{name}() is not allowed in read-only SQL")
        if name in _TABLE_FUNCTIONS:
            continue
        if name in tables or name in _REFUSED_SCALARS or name.startswith(("ducklake_", "sqlite_", "postgres_")):
            raise WriteRefused(f"refused: function {name}() is not allowed in read-only SQL (it reads files, "
                               "settings or the catalog, or changes the lake)")
        if isinstance(node, exp.Anonymous) and name not in others:
            raise WriteRefused(f"refused: function {name}() is not one of DuckDB's built-in functions")


def _check_tree(tree: exp.Expression, text: str) -> None:
    kind = (text.split() or ["?"])[0].upper().strip("(")
    if isinstance(tree, exp.Pragma):
        name = tree.this.name.lower() if isinstance(tree.this, exp.Expression) else str(tree.this).lower()
        if name.split("(")[0] in _READ_PRAGMAS:
            return
        raise WriteRefused(f"refused: PRAGMA {name} may change settings; gangscope sql is read-only")
    if isinstance(tree, exp.Command):
        keyword = str(tree.this).upper()
        rest = tree.expression.name if isinstance(tree.expression, exp.Expression) else str(tree.expression or "")
        if keyword == "EXPLAIN":
            # EXPLAIN ANALYZE runs the statement, so what it explains must itself be a read.
            inner = rest.strip()
            if inner.upper().startswith("ANALYZE"):
                inner = inner[len("ANALYZE"):]
            check_read_only(inner)
            return
        if keyword == "SHOW":
            try:
                exp.to_table(rest.strip(), dialect="duckdb")
            except Exception:
                raise WriteRefused(f"refused: could not read SHOW {rest.strip()!r} as a table name") from None
            return
        raise WriteRefused(f"refused: {keyword} is not a read statement; gangscope sql is read-only")
    if not isinstance(tree, _READ_TYPES):
        raise WriteRefused(f"refused: {kind} is not a read statement; gangscope sql is read-only "
                           "(allowed: SELECT, WITH, VALUES, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN, read-only PRAGMA)")
    for node in tree.walk():
        if isinstance(node, _WRITE_NODES) and node is not tree:
            raise WriteRefused(f"refused: the statement contains {type(node).__name__.upper()}, which writes")
        if isinstance(node, exp.Select) and node.args.get("into") is not None:
            raise WriteRefused("refused: SELECT ... INTO writes a table")
    _check_functions(tree)


def check_read_only(sql: str) -> None:
    """Raise :class:`WriteRefused` unless ``sql`` is exactly one statement that only reads."""
    if not sql.strip():
        raise WriteRefused("refused: empty statement")
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except sqlglot.errors.SqlglotError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise WriteRefused(f"refused: could not parse the statement, so it cannot be shown to be a read ({first})") \
            from None
    if len(statements) != 1:
        raise WriteRefused(f"refused: {len(statements)} statements; run one read statement at a time")
    _check_tree(statements[0], sql)
    # DuckDB's own parser must agree: one statement, of a reading type (comments or quoting the two parsers
    # read differently cannot smuggle a second statement past the check above).
    con = duckdb.connect()
    try:
        found = con.extract_statements(sql)
    except duckdb.Error as e:
        raise WriteRefused(f"refused: DuckDB cannot parse the statement ({str(e).splitlines()[0]})") from None
    finally:
        con.close()
    if len(found) != 1:
        raise WriteRefused(f"refused: {len(found)} statements; run one read statement at a time")
    if found[0].type not in (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN):
        raise WriteRefused(f"refused: {found[0].type.name} is not a read statement; gangscope sql is read-only")


def connect_read_only(settings: Settings, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """The lake, READ_ONLY, with file system access limited to its data files and the configuration locked;
    ``threads`` caps DuckDB's threads (the live page reads on one, beside the pipeline and the builds)."""
    from pipeline import lake

    lake.require(settings)
    try:
        con = lake.connect(settings, read_only=True, create=False)
    except duckdb.Error as e:
        raise UserError(f"cannot open the lake read-only: {str(e).splitlines()[0]}") from None
    # Only the lake's own Parquet files stay readable; nothing else on disk is, and nothing is writable
    # outside the READ_ONLY lake (``COPY ... TO`` fails even if the parser missed it).
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    con.execute("SET allowed_directories = ?", [[lake.data_path(settings)]])  # a directory or an s3:// prefix
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def run_query(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Check and run one read statement; returns (column names, rows)."""
    check_read_only(sql)
    try:
        cur = con.execute(sql)
    except duckdb.Error as e:
        raise UserError(str(e).splitlines()[0]) from None
    cols = [d[0] for d in cur.description or []]
    return cols, cur.fetchall()


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def format_table(cols: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int = 60) -> str:
    cells = [[terminal_safe(_cell(v))[:max_width] for v in r] for r in rows]
    widths = [max([len(terminal_safe(c))] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths, strict=True)).rstrip()  # noqa: E731
    out = [line([terminal_safe(c) for c in cols]), line(["-" * w for w in widths])] + [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def write_result(cols: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, out: Path | None,
                 con: duckdb.DuckDBPyConnection | None = None, sql: str | None = None) -> str | None:
    """Render rows as ``fmt``; write to ``out`` if given (parquet needs ``out``), else return the text."""
    if fmt == "parquet":
        if out is None:
            raise UserError("--format parquet needs --out FILE")
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)}) if rows else \
            pa.table({c: pa.array([], pa.null()) for c in cols})
        pq.write_table(table, out)
        return None
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        w.writerows([["" if v is None else _jsonable(v) for v in r] for r in rows])
        text = buf.getvalue()
    elif fmt == "json":
        text = json.dumps([{c: _jsonable(v) for c, v in zip(cols, r, strict=True)} for r in rows], indent=1) + "\n"
    elif fmt == "table":
        text = format_table(cols, rows) + "\n"
    else:
        raise UserError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    if out is not None:
        out.write_text(text)
        return None
    return text


def run_once(settings: Settings, sql: str, fmt: str = "table", out: Path | None = None) -> int:
    check_read_only(sql)  # refuse before touching the lake
    con = connect_read_only(settings)
    try:
        cols, rows = run_query(con, sql)
    finally:
        con.close()
    text = write_result(cols, rows, fmt, out)
    if text is not None:
        sys.stdout.write(text)
    return 0


HELP = """Read-only SQL over the lake. End a statement with ';'. Tables: raw.*, staging.*, intermediate.*, marts.*
(e.g. SHOW ALL TABLES; DESCRIBE marts.findings; SELECT * FROM marts.jobs;). .quit or Ctrl-D leaves."""


def shell(settings: Settings) -> int:
    """Interactive loop with readline history in ``<data>/sql_history``."""
    try:
        import readline
    except ImportError:  # pragma: no cover - non-GNU platforms
        readline = None  # type: ignore[assignment]
    history = settings.data / "sql_history"
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.read_history_file(history)
        readline.set_history_length(2000)
    con = connect_read_only(settings)
    print(HELP)
    buf: list[str] = []
    try:
        while True:
            try:
                line = input("gangscope> " if not buf else "      ...> ")
            except EOFError:
                print()
                break
            except KeyboardInterrupt:
                print()
                buf = []
                continue
            if not buf and line.strip() in (".quit", ".exit", "\\q", "quit", "exit"):
                break
            if not buf and line.strip() in (".help", "help", "\\?"):
                print(HELP)
                continue
            buf.append(line)
            text = "\n".join(buf).strip()
            if not text:
                buf = []
                continue
            if not text.endswith(";"):
                continue
            buf = []
            try:
                cols, rows = run_query(con, text.rstrip(";"))
                print(format_table(cols, rows))
            except UserError as e:
                print(str(e))
    finally:
        con.close()
        if readline is not None:
            try:
                history.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(history)
            except OSError as e:
                log.debug("history not saved: %s", e)
    return 0
