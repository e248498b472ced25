"""Reads ``marts.findings`` and formats it: the JSON of CONTRACT section 4, or a readable table.

Each finding also carries ``evidence_text`` (its evidence as sentences) and ``next_steps`` (what to
do, with the kubectl command that shows the same evidence), derived by ``reports.nextsteps``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import duckdb

from reports import nextsteps
from reports.terminal import terminal_safe

FIELDS = ("cluster", "namespace", "job", "job_kind", "workload", "pod_group", "root_cause", "severity",
          "started_at", "ended_at", "confidence", "nodes", "evidence", "summary")
EXTRA_FIELDS = ("evidence_text", "next_steps")  # beyond CONTRACT section 4: added, never replacing a field


def _rfc3339(t: datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _jsonable(v: Any) -> Any:
    """Evidence values: timestamps inside become RFC 3339 strings (DuckDB writes them with a space)."""
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, str) and len(v) >= 19 and v[4] == "-" and v[10] == " " and v[13] == ":":
        try:
            return _rfc3339(datetime.fromisoformat(v))
        except ValueError:
            return v
    return v


def findings(con: duckdb.DuckDBPyConnection, since: datetime | None = None, until: datetime | None = None,
             include_healthy: bool = False) -> list[dict[str, Any]]:
    """Findings overlapping [since, until], newest first; healthy rows only with ``include_healthy``."""
    where = ["(? OR root_cause <> 'healthy')"]
    params: list[Any] = [include_healthy]
    if since is not None:
        where.append("(ended_at IS NULL OR ended_at >= ?)")
        params.append(since)
    if until is not None:
        where.append("started_at <= ?")
        params.append(until)
    try:
        cur = con.execute(
            f"SELECT {', '.join(FIELDS)} FROM marts.findings WHERE {' AND '.join(where)} "
            "ORDER BY started_at DESC NULLS LAST, namespace, job, root_cause", params)
    except duckdb.CatalogException:
        return []
    out = []
    for row in cur.fetchall():
        r = dict(zip(FIELDS, row, strict=True))
        r["started_at"] = _rfc3339(r["started_at"])
        r["ended_at"] = _rfc3339(r["ended_at"])
        r["confidence"] = round(float(r["confidence"]), 2) if r["confidence"] is not None else None
        r["nodes"] = list(r["nodes"] or [])
        ev = r["evidence"]
        r["evidence"] = _jsonable(json.loads(ev) if isinstance(ev, str) else (ev or {}))
        explained = nextsteps.explain(r)
        r["evidence_text"] = explained.sentences
        r["next_steps"] = explained.steps_json()
        out.append(r)
    return out


def to_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=2)


def _since(started: str | None) -> str:
    return (started or "")[:16].replace("T", " ")


def to_table(rows: list[dict[str, Any]]) -> str:
    """Columns: job, class, since, nodes, one-line summary; under each row one line with its first next step
    (and the command that takes it, else the one that shows its evidence)."""
    if not rows:
        return "no findings"
    head = ("JOB", "CLASS", "SEV", "SINCE (UTC)", "NODES", "SUMMARY")
    body = []
    for r in rows:
        nodes = r["nodes"]
        shown = ",".join(nodes[:3]) + (f" +{len(nodes) - 3}" if len(nodes) > 3 else "")
        body.append((f"{r['namespace']}/{r['job']}", r["root_cause"], r["severity"], _since(r["started_at"]),
                     shown or "-", r["summary"] or ""))
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(x[:-1], widths, strict=True)) + "  " + str(x[-1])
             for x in [head, *body]]
    out = [lines[0]]
    for r, line in zip(rows, lines[1:], strict=True):
        out.append(line)
        step = (r.get("next_steps") or [None])[0]
        if step:
            out.append(f"  next: {step['action']}  $ {step.get('act') or step['check']}")
    return "\n".join(terminal_safe(line.rstrip()) for line in out)
