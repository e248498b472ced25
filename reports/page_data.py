"""What the live page of ``gangscope run`` shows (docs/page.md); ``page_html`` renders it.

The findings are the ones gangscope published: the lifecycle state the findings outlet keeps after each build
(``reports.lifecycle``), so the page, the alerts and the findings topic never disagree and listing them reads no
lake at all. The fleet (GPU-hours lost, ClusterQueues, nodes) and each job's layered check are read from the
marts on a read-only connection (``sqlshell.connect_read_only``), by ``reports.fleet`` and ``reports.explain``,
the same code as the report and ``gangscope explain``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import duckdb

from gangscope.config import Settings
from reports import explain as explain_mod
from reports import fleet as fleet_view
from reports.jobchart import JobChart, job_chart
from reports.lakeread import as_dt, columns, forget
from reports.lifecycle import STATE_FILE
from reports.report_data import SEVERITY_ORDER

log = logging.getLogger(__name__)

FLEET_HOURS = 24  # GPU-hours lost by incidents that started this long before the data's end
MAX_OPEN, MAX_RESOLVED = 300, 100  # rows shown; the heading gives the full count


@dataclass
class Published:
    """Findings as published: open ones (worst first, newest first within a severity) and the recently resolved."""

    open: list[dict[str, Any]] = field(default_factory=list)  # diagnose dicts plus "finding_id"
    resolved: list[dict[str, Any]] = field(default_factory=list)  # newest end first
    open_total: int = 0
    resolved_total: int = 0
    read: bool = False  # the state file existed (a build published at least once)


@dataclass
class FleetView:
    fleet: fleet_view.Fleet = field(default_factory=fleet_view.Fleet)
    since: datetime | None = None
    as_of: datetime | None = None  # the newest time the models saw (the cluster's clock)


def published(settings: Settings, now: datetime, hours: float) -> Published:
    """The findings outlet's lifecycle state: open findings, and those resolved within ``hours`` before ``now``."""
    try:
        state = json.loads((settings.data / STATE_FILE).read_text())
    except FileNotFoundError:
        return Published()
    except (OSError, ValueError) as e:  # replaced atomically by the outlet, so this is a damaged file
        log.warning("findings state %s not read: %s", settings.data / STATE_FILE, e)
        return Published()
    horizon = now - timedelta(hours=hours)
    opened, resolved = [], []
    for fid, entry in state.items():
        f = {**entry.get("finding", {}), "finding_id": fid}
        if entry.get("state") == "open":
            opened.append(f)
        elif (as_dt(f.get("ended_at")) or now) >= horizon:
            resolved.append(f)
    opened.sort(key=lambda f: f.get("started_at") or "", reverse=True)
    opened.sort(key=lambda f: SEVERITY_ORDER.get(str(f.get("severity")), 9))
    resolved.sort(key=lambda f: f.get("ended_at") or "", reverse=True)
    return Published(opened[:MAX_OPEN], resolved[:MAX_RESOLVED], len(opened), len(resolved), True)


def as_of(con: duckdb.DuckDBPyConnection, cluster: str) -> datetime | None:
    if not columns(con, "intermediate", "int_as_of"):
        return None
    got = con.execute("SELECT max(as_of) FROM intermediate.int_as_of WHERE cluster = ?", [cluster]).fetchone()
    return as_dt(got[0]) if got else None


def read_fleet(con: duckdb.DuckDBPyConnection, cluster: str) -> FleetView:
    """GPU-hours lost by cause over the last ``FLEET_HOURS`` of data, ClusterQueues by wait, nodes by trouble."""
    forget(con)  # a fresh look at what the builds committed
    end = as_of(con, cluster)
    since = end - timedelta(hours=FLEET_HOURS) if end else None
    return FleetView(fleet_view.collect(con, since), since, end)


@dataclass
class JobView:
    explanation: explain_mod.Explanation
    chart: JobChart | None
    as_of: datetime | None


def _charted(e: explain_mod.Explanation) -> dict[str, Any]:
    """The finding the time line is drawn around: the job's worst open one, else its latest; a job without any
    gets a finding-shaped row of its own (no onset), so healthy jobs have the same chart."""
    flagged = [f for f in e.findings if f.get("root_cause") != "healthy"]
    ongoing = [f for f in flagged if not f.get("ended_at")]
    if ongoing:
        return min(ongoing, key=lambda f: SEVERITY_ORDER.get(str(f.get("severity")), 9))
    if flagged:
        return max(flagged, key=lambda f: f.get("started_at") or "")
    return {"cluster": e.cluster, "namespace": e.namespace, "job": e.job, "nodes": e.job_facts.get("nodes") or [],
            "evidence": {}, "root_cause": None}


def read_job(con: duckdb.DuckDBPyConnection, namespace: str, job: str, cluster: str) -> JobView:
    """``gangscope explain``'s layered check of one job, and its time line (throughput, interconnect, GPUs);
    ``explain.UnknownJob`` (with the closest names) when the lake has no such job."""
    forget(con)
    e = explain_mod.explain(con, f"{namespace}/{job}", cluster)
    end = as_of(con, e.cluster)
    focus = _charted(e)
    window = None
    if not focus.get("started_at") and end is not None:  # no finding: the job's life up to the data's end
        created = as_dt(e.job_facts.get("created_at"))
        gone = as_dt(e.job_facts.get("deleted_at"))
        t1 = min(end, gone + timedelta(minutes=5)) if gone else end
        t0 = max((created or t1) - timedelta(minutes=5), t1 - timedelta(days=1))
        window = (t0, t1) if t1 > t0 else None
    preempted = [f for f in e.findings if f.get("root_cause") == "preemption"]
    chart = None
    try:
        chart = job_chart(con, focus, dict(e.job_facts), preempted, uid="job", window=window, gpus=True)
    except duckdb.Error as err:  # a chart must never cost the page
        log.warning("chart for %s/%s skipped: %s", namespace, job, str(err).splitlines()[0])
    return JobView(e, chart, end)
