"""The fleet view at the top of the report: GPU-hours lost by root cause (and the trend against the
previous report), nodes ranked by faults, ClusterQueues ranked by wait.

The trend needs the previous report's figures: the HTML report carries them in a
``<meta name="gangscope-fleet">`` tag (JSON), and the next report written to the same directory under the
same name pattern (``<prefix>-<UTC time>.html``, as the scheduled reports are) reads the newest earlier one.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from reports.lakeread import columns, rows

META = "gangscope-fleet"
_STAMPED = re.compile(r"^(?P<prefix>.+)-(?P<stamp>\d{8}T\d{6}Z)\.(?:html|md)$")
_META = re.compile(r'<meta name="gangscope-fleet" content="([^"]*)">')


@dataclass
class Fleet:
    lost: list[tuple[str, str, float]] = field(default_factory=list)  # (root cause, how, GPU-hours), worst first
    previous: dict[str, float] | None = None  # GPU-hours lost by root cause in the previous report
    previous_at: str | None = None
    nodes: list[tuple[str, str, float]] = field(default_factory=list)  # (node, what went wrong, trouble score)
    queues: list[dict[str, Any]] = field(default_factory=list)  # ClusterQueues, longest p95 wait first
    built: bool = False  # marts.gpu_hours_lost exists

    @property
    def total(self) -> float:
        return sum(h for _, _, h in self.lost)

    def figures(self) -> dict[str, float]:
        return {cause: round(h, 3) for cause, _, h in self.lost}


def _node_faults(r: dict[str, Any]) -> str:
    parts = []
    for key, word in (("xid_faults", "XID fault"), ("ecc_faults", "ECC fault"), ("missing_gpus", "GPU lost"),
                      ("bandwidth_drops", "bandwidth drop"), ("link_error_samples", "link-error sample"),
                      ("port_down_samples", "IB-port-down sample")):
        n = r.get(key)
        if isinstance(n, int | float) and n > 0:
            parts.append(f"{n:g} {word}{'s' if n != 1 else ''}")
    codes = r.get("xid_codes")
    if codes:
        parts.append(f"XID {', '.join(map(str, codes)) if isinstance(codes, list) else codes}")
    return ", ".join(parts)


def collect(con: duckdb.DuckDBPyConnection, since: Any = None) -> Fleet:
    fleet = Fleet()
    if columns(con, "marts", "gpu_hours_lost"):
        fleet.built = True
        where = "started_at >= ?" if since is not None else ""
        got = con.execute(
            "SELECT root_cause, string_agg(DISTINCT how, ', '), sum(gpu_hours) FROM marts.gpu_hours_lost "
            + (f"WHERE {where} " if where else "") + "GROUP BY ALL ORDER BY 3 DESC, 1",
            [since] if where else []).fetchall()
        fleet.lost = [(c, h, float(v or 0)) for c, h, v in got]
    got_nodes = rows(con, "marts", "node_health", where="coalesce(trouble_score, 0) > 0",
                     order="trouble_score DESC, node", limit=10)
    if got_nodes:
        fleet.nodes = [(str(r.get("node")), _node_faults(r), float(r.get("trouble_score") or 0)) for r in got_nodes[1]]
    got_q = rows(con, "marts", "queue_health", where="cluster_queue IS NOT NULL",
                 order="wait_p95_s DESC NULLS LAST, cluster_queue", limit=10)
    if got_q:
        fleet.queues = got_q[1]
    return fleet


def previous(out: Path) -> tuple[dict[str, float] | None, str | None]:
    """The fleet figures of the newest earlier HTML report beside ``out`` with the same name prefix."""
    m = _STAMPED.match(out.name)
    if not m or not out.parent.is_dir():
        return None, None
    earlier = sorted((p for p in out.parent.glob(f"{m['prefix']}-*.html")
                      if _STAMPED.match(p.name) and _STAMPED.match(p.name)["stamp"] < m["stamp"]),
                     key=lambda p: p.name)
    for path in reversed(earlier):
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(8192)
        found = _META.search(head)
        if found:
            try:
                figures = json.loads(html.unescape(found.group(1)))
            except ValueError:
                continue
            if isinstance(figures, dict):
                return {str(k): float(v) for k, v in figures.items() if isinstance(v, int | float)}, \
                    _STAMPED.match(path.name)["stamp"]
    return None, None
