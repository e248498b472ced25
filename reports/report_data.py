"""What the root-cause report shows, read from the marts (CONTRACT section 5); the renderers only format it.

Jobs that need action come first, each with what happened (sentences from its evidence), its next step,
a time line, the layered check (queue, topology, gang, throughput) and the raw evidence; the fleet view
and the cluster-wide sections come from their marts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

import duckdb

from gangscope.rootcauses import ROOT_CAUSES as CLASSES
from reports import fleet as fleet_view
from reports import localtime
from reports.jobchart import JobChart, job_chart
from reports.lakeread import as_dt, as_json, columns, first, forget, memo, one, rows
from reports.nextsteps import Explained, explain

log = logging.getLogger(__name__)

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
# Okabe-Ito colours per class (colour-blind safe); the bar labels carry the class name as well.
CLASS_COLOURS = {"gpu_fault": "#D55E00", "interconnect_degradation": "#E69F00", "preemption": "#CC79A7",
                 "admission_quota": "#0072B2", "admission_topology": "#56B4E9", "gang_assembly": "#009E73",
                 "topology_misplacement": "#F0E442", "unexplained_slowdown": "#999999", "healthy": "#000000",
                 # Paul Tol's muted scheme for the classes of issue 31 (Okabe-Ito has no more).
                 "node_failure": "#882255", "gpu_throttle": "#999933", "startup_failure": "#332288",
                 "workload_crash": "#CC6677", "training_stalled": "#44AA99"}
# Which layer of the check a class points at.
CAUSE_LAYER = {"admission_quota": "queue", "admission_topology": "topology", "preemption": "queue",
               "gang_assembly": "gang", "topology_misplacement": "topology", "gpu_fault": "throughput",
               "interconnect_degradation": "throughput", "unexplained_slowdown": "throughput",
               "node_failure": "throughput", "gpu_throttle": "throughput", "startup_failure": "gang",
               "workload_crash": "throughput", "training_stalled": "throughput"}
LAYERS = ("queue", "topology", "gang", "throughput")
# Per layer: the model table whose row for the job is shown (identity columns left out).
LAYER_TABLES = {"queue": ("intermediate", "int_admission"), "topology": ("intermediate", "int_placement"),
                "gang": ("intermediate", "int_gang")}
IDENTITY = ("cluster", "namespace", "job")
MAX_CHARTED_JOBS = 40


@dataclass
class Table:
    title: str
    note: str
    cols: list[str]
    rows: list[tuple[Any, ...]]
    missing: bool = False


@dataclass
class JobSection:
    finding: dict[str, Any]
    job: dict[str, Any]
    layers: list[tuple[str, bool, list[tuple[str, Any]]]]  # (layer, is_cause, [(key, value)])
    explained: Explained = field(default_factory=Explained)
    chart: JobChart | None = None


@dataclass
class ReportData:
    generated_at: datetime
    cluster: str
    flagged: list[JobSection] = field(default_factory=list)
    healthy_jobs: int = 0
    by_class: list[tuple[str, int]] = field(default_factory=list)
    fleet: fleet_view.Fleet = field(default_factory=fleet_view.Fleet)
    tables: list[Table] = field(default_factory=list)
    zone: tzinfo = UTC  # the time zone every time is shown in (report.timezone)


def _throughput_facts(con: duckdb.DuckDBPyConnection, finding: dict[str, Any]) -> list[tuple[str, Any]]:
    if not columns(con, "intermediate", "int_job_throughput"):
        return []
    by = memo(con, "throughput_facts", lambda: {
        (c, n, j): rest for c, n, j, *rest in con.execute(
            "SELECT cluster, namespace, job, any_value(baseline), min(ratio) FILTER (WHERE judged), "
            "count(*) FILTER (WHERE dip), count(*) FILTER (WHERE judged) FROM intermediate.int_job_throughput "
            "GROUP BY ALL").fetchall()})
    row = by.get((finding.get("cluster"), finding.get("namespace"), finding.get("job")))
    if not row or row[3] == 0:
        return []
    return [("baseline throughput (items/s)", row[0]), ("lowest ratio to baseline", row[1]),
            ("buckets below threshold", f"{row[2]} of {row[3]}")]


def _layers(con: duckdb.DuckDBPyConnection, finding: dict[str, Any],
            job: dict[str, Any]) -> list[tuple[str, bool, list[tuple[str, Any]]]]:
    """The layered check: what each layer's model says about the job."""
    cause = CAUSE_LAYER.get(str(finding.get("root_cause")), "")
    facts: dict[str, list[tuple[str, Any]]] = {layer: [] for layer in LAYERS}
    for layer, (schema, table) in LAYER_TABLES.items():
        row = one(con, schema, table, finding)
        facts[layer] += [(k, v) for k, v in row.items() if k not in IDENTITY and v is not None and v != []]
    if not facts["queue"] and job.get("cluster_queue"):
        facts["queue"].append(("cluster_queue", job["cluster_queue"]))
    cq = job.get("cluster_queue") or next((v for k, v in facts["queue"] if k == "cluster_queue"), None)
    queues = memo(con, "queue_health", lambda: {(r.get("cluster"), r.get("cluster_queue")): r
                                                for r in (rows(con, "marts", "queue_health") or ([], []))[1]})
    q = queues.get((finding.get("cluster"), cq)) if cq else None
    if q:
        facts["queue"] += [(f"queue {k}", v) for k, v in q.items()
                           if k in ("pending", "wait_p95_s", "blocked_quota", "blocked_topology")]
    facts["throughput"] += _throughput_facts(con, finding)
    return [(layer, layer == cause, facts[layer]) for layer in LAYERS]


def _job_of(finding: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of the job a finding belongs to: the latest one created before the finding started."""
    onset = as_dt(finding.get("started_at"))
    dated = [(as_dt(first(r, "created_at", "first_seen")), r) for r in candidates]
    before = [(d, r) for d, r in dated if d is not None and onset is not None and d <= onset]
    if before:
        return max(before, key=lambda dr: dr[0])[1]
    return candidates[-1] if candidates else {}


TABLE_SPECS = [
    ("queue_health", "Queues: Kueue depth and admission wait", "per ClusterQueue", ""),
    ("idle_gpu_hours", "Idle GPU-hours from partial gangs and misplacement", "GPUs held without useful work",
     "idle_gpu_hours DESC"),
    ("node_health", "Nodes ranked by interconnect trouble", "worst first", ""),
    ("topology_label_audit", "Nodes missing topology labels", "labels a Topology level needs but the node lacks", ""),
]


def collect(con: duckdb.DuckDBPyConnection, cluster: str, since: datetime | None = None,
            zone: tzinfo = UTC) -> ReportData:
    """Everything the report shows, read from the marts; sentences and charts give times in ``zone``."""
    with localtime.using(zone):
        data = _collect(con, cluster, since)
    data.zone = zone
    return data


def _collect(con: duckdb.DuckDBPyConnection, cluster: str, since: datetime | None) -> ReportData:
    forget(con)  # a fresh look at what the models built
    data = ReportData(generated_at=datetime.now(UTC).replace(microsecond=0), cluster=cluster)
    where, params = "", []
    if since is not None:
        where, params = "(ended_at IS NULL OR ended_at >= ?)", [since]
    found = rows(con, "marts", "findings", where=where, params=params, order="started_at DESC")
    findings = found[1] if found else []
    for f in findings:
        f["evidence"] = as_json(f.get("evidence"))
    jobs_rows = rows(con, "marts", "jobs")
    jobs: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    for r in jobs_rows[1] if jobs_rows else []:
        jobs.setdefault((r.get("cluster"), r.get("namespace"), r.get("job")), []).append(r)
    flagged = [f for f in findings if f.get("root_cause") != "healthy"]
    flagged.sort(key=lambda f: (SEVERITY_ORDER.get(str(f.get("severity")), 9),
                                CLASSES.index(f["root_cause"]) if f.get("root_cause") in CLASSES else 99))
    data.healthy_jobs = sum(1 for rs in jobs.values() for r in rs if r.get("root_cause") in (None, "healthy"))
    counts: dict[str, int] = {}
    for f in flagged:
        counts[str(f.get("root_cause"))] = counts.get(str(f.get("root_cause")), 0) + 1
    data.by_class = sorted(counts.items(), key=lambda kv: CLASSES.index(kv[0]) if kv[0] in CLASSES else 99)
    for i, f in enumerate(flagged):
        key = (f.get("cluster"), f.get("namespace"), f.get("job"))
        job = _job_of(f, jobs.get(key, []))
        section = JobSection(f, job, _layers(con, f, job), explain(f))
        if i < MAX_CHARTED_JOBS:
            preempted = [p for p in flagged if p.get("root_cause") == "preemption"
                         and (p.get("cluster"), p.get("namespace"), p.get("job")) == key]
            try:
                section.chart = job_chart(con, f, job, preempted, uid=f"j{i}")
            except duckdb.Error as e:  # a chart must never cost the report
                log.warning("chart for %s/%s skipped: %s", f.get("namespace"), f.get("job"), e)
        data.flagged.append(section)
    data.fleet = fleet_view.collect(con, since)
    for table, title, note, order in TABLE_SPECS:
        cols = columns(con, "marts", table)
        if not cols:
            data.tables.append(Table(title, "model not built yet", [], [], missing=True))
            continue
        if not order:
            score = next((c for c in cols if any(k in c for k in ("trouble", "score"))), None)
            order = f'"{score}" DESC NULLS LAST' if score else ""
        elif order.split()[0] not in cols:
            order = ""
        got = rows(con, "marts", table, order=order, limit=200)
        assert got is not None
        data.tables.append(Table(title, note, got[0], [tuple(r.values()) for r in got[1]]))
    data.tables.append(_gang_times(con))
    return data


def _gang_times(con: duckdb.DuckDBPyConnection) -> Table:
    """Assembly (to binding) and start-up (binding to running: image pulls) apart, slowest start-up first."""
    title = "Gangs: assembly and start-up times"
    cols = ["namespace", "job", "gang_system", "gang_size", "assembly_s", "timeout_s", "timed_out", "start_up_s",
            "assembled_before_capture"]
    if not set(cols) <= set(columns(con, "intermediate", "int_gang")):
        return Table(title, "model not built yet", [], [], missing=True)
    got = rows(con, "intermediate", "int_gang", order="start_up_s DESC NULLS LAST, assembly_s DESC", limit=200)
    assert got is not None
    return Table(title, "assembly ends when the members are bound; start-up is binding to running (image pulls)",
                 cols, [tuple(r.get(c) for c in cols) for r in got[1]])
