"""The fleet view at the top of the report: GPU-hours lost by root cause (and the trend against the
previous report), nodes ranked by faults, ClusterQueues ranked by wait.

The trend needs the previous report's figures: each report appends a one-line JSON summary to
``gangscope-summaries.jsonl`` in its directory, and the next report of the same cluster, kind
(``report``, ``hourly``, ``daily``) and format reads the newest one, whatever the files are called.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from reports.lakeread import columns, rows

log = logging.getLogger(__name__)


@dataclass
class Fleet:
    lost: list[tuple[str, str, float]] = field(default_factory=list)  # (root cause, how, GPU-hours), worst first
    previous: dict[str, float] | None = None  # GPU-hours lost by root cause in the previous report
    previous_at: datetime | None = None
    nodes: list[tuple[str, str, float]] = field(default_factory=list)  # (node, what went wrong, trouble score)
    queues: list[dict[str, Any]] = field(default_factory=list)  # ClusterQueues, longest p95 wait first
    built: bool = False  # marts.gpu_hours_lost exists

    @property
    def total(self) -> float:
        return sum(h for _, _, h in self.lost)

    def figures(self) -> dict[str, float]:
        return {cause: round(h, 3) for cause, _, h in self.lost}

    def change(self, cause: str | None = None) -> float | None:
        """GPU-hours lost now less in the previous report (of one cause, or in all), to 0.1 h; None without one."""
        if self.previous is None:
            return None
        now = self.figures()
        if cause is not None:
            return round(now.get(cause, 0.0) - self.previous.get(cause, 0.0), 1) + 0.0  # + 0.0: no "-0.0"
        return round(sum(now.values()) - sum(self.previous.values()), 1) + 0.0


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


SUMMARIES = "gangscope-summaries.jsonl"
_TAIL_BYTES = 256 * 1024  # only the newest summaries are read
_MAX_LINE = 8192
_KEEP_LINES = 1000  # the file is cut back to this many lines when it passes 4 x _TAIL_BYTES


def _figures(v: Any) -> dict[str, float]:
    """GPU-hours by root cause from a summary; ValueError unless it is a small map of finite numbers >= 0."""
    if not isinstance(v, dict) or len(v) > 64:
        raise ValueError("gpu_hours_lost is not a map of at most 64 causes")
    out: dict[str, float] = {}
    for k, h in v.items():
        if not isinstance(k, str) or not k or len(k) > 64 or isinstance(h, bool) or not isinstance(h, int | float) \
                or not math.isfinite(h) or h < 0:
            raise ValueError("gpu_hours_lost holds a bad cause or value")
        out[k] = float(h)
    return out


def previous(directory: Path, cluster: str, kind: str, fmt: str) -> tuple[dict[str, float] | None, datetime | None]:
    """The fleet figures of the newest earlier report of this cluster, kind and format in ``directory``.

    Read from the directory's summary file (one JSON line per report written), so any file names work,
    a report overwritten under a fixed name included. A line that is not a valid summary is skipped with a
    log line; without a matching line there is no trend.
    """
    path = directory / SUMMARIES
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - _TAIL_BYTES))
            tail = f.read()
    except FileNotFoundError:
        return None, None
    except OSError as e:
        log.warning("previous report summaries in %s not read: %s", path, e.strerror)
        return None, None
    lines = tail.split(b"\n")
    if size > _TAIL_BYTES:
        lines = lines[1:]  # the first may be cut
    for back, raw in enumerate(reversed(lines)):
        if not raw.strip():
            continue
        try:
            if len(raw) > _MAX_LINE:
                raise ValueError(f"longer than {_MAX_LINE} bytes")
            entry = json.loads(raw)
            if not isinstance(entry, dict) or entry.get("v") != 1:
                raise ValueError("not a version 1 summary object")
            if (entry.get("cluster"), entry.get("kind"), entry.get("format")) != (cluster, kind, fmt):
                continue
            try:
                at = datetime.fromisoformat(str(entry.get("generated_at")))
            except ValueError:
                raise ValueError("generated_at is not an ISO 8601 time") from None  # never echo the value
            if at.tzinfo is None:
                raise ValueError("generated_at has no time zone")
            return _figures(entry.get("gpu_hours_lost")), at
        except (ValueError, TypeError, OverflowError, RecursionError) as e:  # JSONDecodeError is a ValueError
            log.warning("previous report summary ignored (%s, line %d from the end): %s", path, back + 1, e)
    return None, None


def record(directory: Path, cluster: str, kind: str, fmt: str, report: Path, generated_at: datetime,
           figures: dict[str, float]) -> None:
    """Append this report's summary for the next report's trend; cut the file back when it grows large."""
    path = directory / SUMMARIES
    line = json.dumps({"v": 1, "cluster": cluster, "kind": kind, "format": fmt, "file": report.name,
                       "generated_at": generated_at.isoformat(), "gpu_hours_lost": figures}, sort_keys=True)
    try:
        with path.open("a", encoding="utf-8") as f:  # one short write: appends by two reports do not interleave
            f.write(line + "\n")
        if path.stat().st_size > 4 * _TAIL_BYTES:
            kept = path.read_text(encoding="utf-8", errors="replace").splitlines()[-_KEEP_LINES:]
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("\n".join(kept) + "\n", encoding="utf-8")
            tmp.replace(path)
    except OSError as e:  # the report is written; only the next one's trend is lost
        log.warning("report summary not recorded in %s: %s", path, e.strerror)
