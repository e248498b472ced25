"""The root-cause report (CONTRACT section 5): one self-contained HTML file, or Markdown.

The report reads the marts through a read-only connection, so it can be written while the
pipeline lands data. Jobs that need action come first, each with the layered check
(queue, topology, gang, throughput) and its evidence, then the cluster-wide sections.
Everything that came from the cluster is escaped: ``html.escape`` in HTML and SVG, and
entity + Markdown escaping in Markdown, so a pod named ``<script>`` stays text.

Columns are read by name where they exist (``_rows``), so a model that gains or renames a
column degrades one cell, not the report.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from gangscope.config import Settings
from reports import charts
from reports.charts import esc

log = logging.getLogger(__name__)

CLASSES = ("gpu_fault", "interconnect_degradation", "preemption", "admission_quota", "admission_topology",
           "gang_assembly", "topology_misplacement", "unexplained_slowdown", "healthy")
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
CLASS_COLOURS = {"gpu_fault": "#d62728", "interconnect_degradation": "#ff7f0e", "preemption": "#9467bd",
                 "admission_quota": "#8c564b", "admission_topology": "#e377c2", "gang_assembly": "#1f77b4",
                 "topology_misplacement": "#17becf", "unexplained_slowdown": "#7f7f7f", "healthy": "#2ca02c"}
# Which layer of the check a class points at.
CAUSE_LAYER = {"admission_quota": "queue", "admission_topology": "topology", "preemption": "queue",
               "gang_assembly": "gang", "topology_misplacement": "topology", "gpu_fault": "throughput",
               "interconnect_degradation": "throughput", "unexplained_slowdown": "throughput"}
# Columns/evidence keys that belong to each layer (matched as substrings of the name).
LAYER_KEYS = {
    "queue": ("cluster_queue", "local_queue", "queue", "admission", "admitted", "quota", "evict", "preempt",
              "workload"),
    "topology": ("topology", "domain", "rack", "block", "placement", "spread", "level"),
    "gang": ("gang", "pod_group", "podgroup", "phase", "min_member", "min_count", "assembl", "failed_scheduling",
             "timeout", "member", "partial", "unschedulable", "start_up", "bound", "all_running"),
    "throughput": ("throughput", "baseline", "ratio", "bandwidth", "_bw", "nvlink", "ib_", "pcie", "xid", "ecc",
                   "error", "gpu", "link", "port", "missing", "device", "slowdown", "dip"),
}
LAYERS = ("queue", "topology", "gang", "throughput")
BW_SIGNALS = ("nvlink_bw", "ib_bw", "pcie_bw")
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
    chart_svg: str = ""
    chart_text: str = ""


@dataclass
class ReportData:
    generated_at: datetime
    cluster: str
    flagged: list[JobSection] = field(default_factory=list)
    healthy_jobs: int = 0
    by_class: list[tuple[str, int]] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


# --- reading the lake -----------------------------------------------------------------------


_COLUMNS: dict[int, dict[tuple[str, str], list[str]]] = {}  # per connection; each catalog query costs ~50 ms


def _columns(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[str]:
    if id(con) not in _COLUMNS:
        by: dict[tuple[str, str], list[str]] = {}
        for s, t, c in con.execute(
                "SELECT table_schema, table_name, column_name FROM information_schema.columns "
                "WHERE table_catalog = 'lake' ORDER BY table_schema, table_name, ordinal_position").fetchall():
            by.setdefault((s, t), []).append(c)
        _COLUMNS[id(con)] = by
    return _COLUMNS[id(con)].get((schema, table), [])


def _rows(con: duckdb.DuckDBPyConnection, schema: str, table: str, where: str = "", order: str = "",
          params: list[Any] | None = None, limit: int | None = None) -> tuple[list[str], list[dict[str, Any]]] | None:
    """All columns of ``schema.table`` as dicts, or None if the model is not built."""
    cols = _columns(con, schema, table)
    if not cols:
        return None
    sql = f'SELECT * FROM {schema}."{table}"' + (f" WHERE {where}" if where else "") + \
        (f" ORDER BY {order}" if order else "") + (f" LIMIT {int(limit)}" if limit else "")
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return names, [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _first(row: dict[str, Any], *names: str) -> Any:
    for n in names:
        if row.get(n) is not None:
            return row[n]
    return None


def _as_dt(v: Any) -> datetime | None:
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    if isinstance(v, str) and v:
        try:
            d = datetime.fromisoformat(v.replace("Z", "+00:00"))
            return d if d.tzinfo else d.replace(tzinfo=UTC)
        except ValueError:
            return None
    return None


# Per layer: the model table whose row for the job is shown (identity columns left out).
LAYER_TABLES = {"queue": ("intermediate", "int_admission"), "topology": ("intermediate", "int_placement"),
                "gang": ("intermediate", "int_gang")}
IDENTITY = ("cluster", "namespace", "job")


def _one(con: duckdb.DuckDBPyConnection, schema: str, table: str, finding: dict[str, Any]) -> dict[str, Any]:
    got = _rows(con, schema, table, where="cluster = ? AND namespace = ? AND job = ?",
                params=[finding.get("cluster"), finding.get("namespace"), finding.get("job")], limit=1)
    return got[1][0] if got and got[1] else {}


def _throughput_facts(con: duckdb.DuckDBPyConnection, finding: dict[str, Any]) -> list[tuple[str, Any]]:
    if not _columns(con, "intermediate", "int_job_throughput"):
        return []
    row = con.execute(
        "SELECT any_value(baseline), min(ratio) FILTER (WHERE judged), count(*) FILTER (WHERE dip), "
        "count(*) FILTER (WHERE judged) FROM intermediate.int_job_throughput WHERE cluster = ? AND namespace = ? "
        "AND job = ?", [finding.get("cluster"), finding.get("namespace"), finding.get("job")]).fetchone()
    if not row or row[3] == 0:
        return []
    return [("baseline throughput", row[0]), ("lowest ratio to baseline", row[1]),
            ("buckets below threshold", f"{row[2]} of {row[3]}")]


def _layers(con: duckdb.DuckDBPyConnection, finding: dict[str, Any],
            job: dict[str, Any]) -> list[tuple[str, bool, list[tuple[str, Any]]]]:
    """The layered check: what each layer's model says about the job, and the finding's evidence."""
    cause = CAUSE_LAYER.get(str(finding.get("root_cause")), "")
    facts: dict[str, list[tuple[str, Any]]] = {layer: [] for layer in LAYERS}
    for layer, (schema, table) in LAYER_TABLES.items():
        row = _one(con, schema, table, finding)
        facts[layer] += [(k, v) for k, v in row.items() if k not in IDENTITY and v is not None and v != []]
    if not facts["queue"] and job.get("cluster_queue"):
        facts["queue"].append(("cluster_queue", job["cluster_queue"]))
    cq = job.get("cluster_queue") or next((v for k, v in facts["queue"] if k == "cluster_queue"), None)
    if cq:
        q = _rows(con, "marts", "queue_health", where="cluster = ? AND cluster_queue = ?",
                  params=[finding.get("cluster"), cq], limit=1)
        if q and q[1]:
            facts["queue"] += [(f"queue {k}", v) for k, v in q[1][0].items()
                               if k in ("pending", "wait_p95_s", "blocked_quota", "blocked_topology")]
    facts["throughput"] += _throughput_facts(con, finding)
    evidence = _json(finding.get("evidence"))
    for key, value in (evidence.items() if isinstance(evidence, dict) else []):
        layer = next((lay for lay in LAYERS if any(k in key.lower() for k in LAYER_KEYS[lay])), cause or "throughput")
        if value not in (None, [], {}):
            facts[layer].append((f"evidence {key}", value))
    return [(layer, layer == cause, facts[layer]) for layer in LAYERS]


def _series(con: duckdb.DuckDBPyConnection, finding: dict[str, Any], job: dict[str, Any],
            t0: datetime, t1: datetime) -> tuple[list[charts.Panel], list[charts.Band]]:
    panels: list[charts.Panel] = []
    key = [finding.get("cluster"), finding.get("namespace"), finding.get("job")]
    if _columns(con, "intermediate", "int_job_throughput"):
        rows = con.execute(
            "SELECT ts, value, baseline FROM intermediate.int_job_throughput WHERE cluster = ? AND namespace = ? "
            "AND job = ? AND ts BETWEEN ? AND ? ORDER BY ts", [*key, t0, t1]).fetchall()
        series = [charts.Series("throughput", [(_as_dt(t), v) for t, v, _ in rows])]
        if any(b is not None for _, _, b in rows):
            series.append(charts.Series("baseline", [(_as_dt(t), b) for t, _, b in rows if b is not None]))
        panels.append(charts.Panel("job throughput", series))
    nodes = list(finding.get("nodes") or job.get("nodes") or [])[:8]
    if nodes and _columns(con, "staging", "stg_metric_signals"):
        rows = con.execute(
            "SELECT node || ' ' || signal, time_bucket(INTERVAL 1 MINUTE, ts) AS t, sum(value) / count(DISTINCT ts) "
            f"FROM staging.stg_metric_signals WHERE signal IN ({', '.join('?' * len(BW_SIGNALS))}) "
            "AND list_contains(?, node) AND ts BETWEEN ? AND ? GROUP BY ALL ORDER BY 1, 2",
            [*BW_SIGNALS, nodes, t0, t1]).fetchall()
        by: dict[str, list[tuple[datetime, float]]] = {}
        for name, t, v in rows:
            by.setdefault(name, []).append((_as_dt(t), v))
        panels.append(charts.Panel("bandwidth of its nodes", [charts.Series(k, v) for k, v in by.items()]))
    bands = []
    adm = _one(con, "intermediate", "int_admission", finding)
    gang = _one(con, "intermediate", "int_gang", finding)
    created = _as_dt(_first(adm, "created_at") or job.get("created_at"))
    admitted = _as_dt(adm.get("admitted_at"))
    if created and (admitted or adm):
        bands.append(charts.Band("waiting for admission", created, admitted or t1, "admission"))
    g_start = _as_dt(gang.get("assembly_started_at"))
    g_end = _as_dt(gang.get("assembled_at"))
    running = _as_dt(gang.get("all_running_at") or job.get("all_running_at"))
    if g_start and not gang.get("assembled_before_capture"):
        bands.append(charts.Band("gang assembling" if g_end else "gang incomplete", g_start, g_end or t1, "gang"))
    if g_end and running and gang.get("start_up_s") is not None:  # image pull and container start-up
        bands.append(charts.Band("starting up", g_end, running, "gang"))
    return panels, [b for b in bands if b.end > b.start]


def _chart(con: duckdb.DuckDBPyConnection, finding: dict[str, Any], job: dict[str, Any]) -> tuple[str, str]:
    onset = _as_dt(finding.get("started_at"))
    ended = _as_dt(finding.get("ended_at"))
    anchor = onset or datetime.now(UTC)
    created = _as_dt(_first(job, "created_at", "first_seen"))
    t0 = min(anchor - timedelta(minutes=30), created or anchor)
    # An ongoing finding is charted up to its latest data (at most 6 h past the onset).
    t1 = ended + timedelta(minutes=15) if ended else anchor + timedelta(hours=6)
    panels, bands = _series(con, finding, job, t0, t1)
    data_end = max([t for p in panels for s in p.series for t, _ in s.points] + [anchor + timedelta(minutes=5)])
    bands = [charts.Band(b.label, b.start, min(b.end, data_end), b.kind) for b in bands if b.start < data_end]
    markers = [charts.Marker(f"onset: {finding.get('root_cause')}", onset)] if onset else []
    title = f"{finding.get('namespace')}/{finding.get('job')}"
    svg = charts.time_chart(panels, bands, markers, title=title)
    points = sum(len(s.points) for p in panels for s in p.series)
    parts = [f"{points} samples charted"] + [f"{b.label} {b.start:%H:%M}-{b.end:%H:%M}Z" for b in bands]
    if onset:
        parts.append(f"onset {onset:%Y-%m-%d %H:%M:%S}Z")
    text = "; ".join(parts)
    return svg, text


def _job_of(finding: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of the job a finding belongs to: the latest one created before the finding started."""
    onset = _as_dt(finding.get("started_at"))
    dated = [(_as_dt(_first(r, "created_at", "first_seen")), r) for r in candidates]
    before = [(d, r) for d, r in dated if d is not None and onset is not None and d <= onset]
    if before:
        return max(before, key=lambda dr: dr[0])[1]
    return candidates[-1] if candidates else {}


def collect(con: duckdb.DuckDBPyConnection, cluster: str, since: datetime | None = None) -> ReportData:
    """Everything the report shows, read from the marts."""
    _COLUMNS.pop(id(con), None)  # a fresh look at what the models built
    data = ReportData(generated_at=datetime.now(UTC).replace(microsecond=0), cluster=cluster)
    where, params = "", []
    if since is not None:
        where, params = "(ended_at IS NULL OR ended_at >= ?)", [since]
    found = _rows(con, "marts", "findings", where=where, params=params, order="started_at DESC")
    findings = found[1] if found else []
    jobs_rows = _rows(con, "marts", "jobs")
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
        job = _job_of(f, jobs.get((f.get("cluster"), f.get("namespace"), f.get("job")), []))
        section = JobSection(f, job, _layers(con, f, job))
        if i < MAX_CHARTED_JOBS:
            try:
                section.chart_svg, section.chart_text = _chart(con, f, job)
            except duckdb.Error as e:  # a chart must never cost the report
                log.warning("chart for %s/%s skipped: %s", f.get("namespace"), f.get("job"), e)
        data.flagged.append(section)
    specs = [
        ("queue_health", "Queues: Kueue depth and admission wait", "per ClusterQueue", ""),
        ("idle_gpu_hours", "Idle GPU-hours from partial gangs and misplacement", "GPUs held without useful work",
         "idle_gpu_hours DESC"),
        ("node_health", "Nodes ranked by interconnect trouble", "worst first", ""),
        ("topology_label_audit", "Nodes missing topology labels", "labels a Topology level needs but the node lacks",
         ""),
    ]
    for table, title, note, order in specs:
        cols = _columns(con, "marts", table)
        if not cols:
            data.tables.append(Table(title, "model not built yet", [], [], missing=True))
            continue
        if not order:
            score = next((c for c in cols if any(k in c for k in ("trouble", "score"))), None)
            order = f'"{score}" DESC NULLS LAST' if score else ""
        elif order.split()[0] not in cols:
            order = ""
        got = _rows(con, "marts", table, order=order, limit=200)
        assert got is not None
        data.tables.append(Table(title, note, got[0], [tuple(r.values()) for r in got[1]]))
    data.tables.append(_gang_times(con))
    return data


def _gang_times(con: duckdb.DuckDBPyConnection) -> Table:
    """Assembly (to binding) and start-up (binding to running: image pulls) apart, slowest start-up first."""
    title = "Gangs: assembly and start-up times"
    cols = ["namespace", "job", "gang_system", "gang_size", "assembly_s", "timeout_s", "timed_out", "start_up_s",
            "assembled_before_capture"]
    if not set(cols) <= set(_columns(con, "intermediate", "int_gang")):
        return Table(title, "model not built yet", [], [], missing=True)
    rows = con.execute(f"SELECT {', '.join(cols)} FROM intermediate.int_gang "
                       "ORDER BY start_up_s DESC NULLS LAST, assembly_s DESC LIMIT 200").fetchall()
    return Table(title, "assembly ends when the members are bound; start-up is binding to running (image pulls)",
                 cols, [tuple(r) for r in rows])


# --- rendering ------------------------------------------------------------------------------


def _fmt(v: Any, limit: int = 400) -> str:
    text = _fmt_full(v)
    return text if len(text) <= limit else text[:limit] + " …"


def _fmt_full(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, datetime):
        return v.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, default=str, sort_keys=True)
    return str(v)


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin-bottom:4px}table{border-collapse:collapse;font-size:12px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f3f3f3}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;color:#fff;font-size:12px}
.critical{background:#d62728}.warning{background:#e6a100}.info{background:#1f77b4}
.cause{background:#fff3f0}.job{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:12px 0}
.muted{color:#777}
"""


def _html_table(cols: list[str], rows: list[tuple[Any, ...]]) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{esc(_fmt(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(data: ReportData) -> str:
    h = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
         'img-src data:">',
         f"<title>gangscope report: {esc(data.cluster)}</title><style>{CSS}</style></head><body>",
         f"<h1>gangscope root-cause report: cluster {esc(data.cluster)}</h1>",
         f'<p class="muted">generated {esc(_fmt(data.generated_at))}. {len(data.flagged)} finding(s) need action; '
         f"{data.healthy_jobs} job(s) healthy.</p>",
         "<h2>Jobs that need action</h2>"]
    if data.flagged:
        rows = [(s.finding.get("severity"), f"{s.finding.get('namespace')}/{s.finding.get('job')}",
                 s.finding.get("root_cause"), s.finding.get("started_at"), s.finding.get("summary"))
                for s in data.flagged]
        h.append(_html_table(["severity", "job", "root cause", "since", "why"], rows))
    else:
        h.append("<p>No job needs action.</p>")
    h.append("<h2>Findings by class</h2>")
    if data.by_class:
        h.append(charts.bar_chart([(k, float(v)) for k, v in data.by_class], title="findings by root cause",
                                  colours=CLASS_COLOURS))
        h.append(_html_table(["root cause", "findings"], data.by_class))
    else:
        h.append("<p>No findings.</p>")
    h.append("<h2>Layered check per flagged job</h2>")
    for s in data.flagged:
        f = s.finding
        sev = str(f.get("severity") or "info")
        h.append('<div class="job">')
        h.append(f'<h3><span class="badge {esc(sev) if sev in SEVERITY_ORDER else "info"}">{esc(sev)}</span> '
                 f"{esc(f.get('namespace'))}/{esc(f.get('job'))}: {esc(f.get('root_cause'))}</h3>")
        h.append(f"<p>{esc(f.get('summary'))}</p>")
        meta = [("kind", f.get("job_kind")), ("workload", f.get("workload")), ("pod group", f.get("pod_group")),
                ("started", f.get("started_at")), ("ended", f.get("ended_at") or "ongoing"),
                ("confidence", f.get("confidence")), ("nodes", f.get("nodes"))]
        h.append("<p>" + " · ".join(f"<b>{esc(k)}</b> {esc(_fmt(v))}" for k, v in meta) + "</p>")
        h.append("<table><thead><tr><th>layer</th><th>verdict</th><th>what we saw</th></tr></thead><tbody>")
        for layer, is_cause, items in s.layers:
            facts = "<br>".join(f"{esc(k)} = {esc(_fmt(v))}" for k, v in items) or \
                '<span class="muted">no signal</span>'
            verdict = "root cause" if is_cause else ("checked" if items else "no data")
            h.append(f'<tr class="{"cause" if is_cause else ""}"><td>{esc(layer)}</td><td>{esc(verdict)}</td>'
                     f"<td>{facts}</td></tr>")
        h.append("</tbody></table>")
        if s.chart_svg:
            h.append(f'<div class="chart">{s.chart_svg}</div>')
        h.append("</div>")
    for t in data.tables:
        h.append(f"<h2>{esc(t.title)}</h2><p class='muted'>{esc(t.note)}</p>")
        if not t.missing:
            h.append(_html_table(t.cols, t.rows) if t.rows else "<p>None.</p>")
    h.append("</body></html>")
    return "\n".join(h)


_MD_SPECIAL = re.compile(r"([\\`*\[\]|~]|(?<!\w)_|_(?!\w)|^#)")


def md(v: Any) -> str:
    """Text from the cluster, safe in Markdown: HTML entities escaped, Markdown syntax backslashed."""
    text = _fmt(v) if not isinstance(v, str) else v
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return " ".join(text.split())  # no newlines: they would break tables


def _md_table(cols: list[str], rows: list[tuple[Any, ...]]) -> str:
    out = ["| " + " | ".join(md(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(md(_fmt(v)) for v in r) + " |" for r in rows]
    return "\n".join(out)


def render_md(data: ReportData) -> str:
    m = [f"# gangscope root-cause report: cluster {md(data.cluster)}", "",
         f"Generated {md(_fmt(data.generated_at))}. {len(data.flagged)} finding(s) need action; "
         f"{data.healthy_jobs} job(s) healthy.", "", "## Jobs that need action", ""]
    if data.flagged:
        m.append(_md_table(["severity", "job", "root cause", "since", "why"],
                           [(s.finding.get("severity"), f"{s.finding.get('namespace')}/{s.finding.get('job')}",
                             s.finding.get("root_cause"), s.finding.get("started_at"), s.finding.get("summary"))
                            for s in data.flagged]))
    else:
        m.append("No job needs action.")
    m += ["", "## Findings by class", ""]
    m.append(_md_table(["root cause", "findings"], data.by_class) if data.by_class else "No findings.")
    m += ["", "## Layered check per flagged job", ""]
    for s in data.flagged:
        f = s.finding
        m += [f"### {md(f.get('severity'))}: {md(f.get('namespace'))}/{md(f.get('job'))}: {md(f.get('root_cause'))}",
              "", md(f.get("summary")), "",
              f"kind {md(f.get('job_kind'))} · workload {md(f.get('workload'))} · pod group {md(f.get('pod_group'))} · "
              f"started {md(f.get('started_at'))} · ended {md(f.get('ended_at') or 'ongoing')} · confidence "
              f"{md(f.get('confidence'))} · nodes {md(f.get('nodes'))}", ""]
        m.append(_md_table(["layer", "verdict", "what we saw"], [
            (layer, "root cause" if is_cause else ("checked" if items else "no data"),
             "; ".join(f"{k} = {_fmt(v)}" for k, v in items) or "no signal") for layer, is_cause, items in s.layers]))
        if s.chart_text:
            m += ["", f"Time line: {md(s.chart_text)}"]
        m.append("")
    for t in data.tables:
        m += [f"## {md(t.title)}", "", f"_{md(t.note)}_", ""]
        if not t.missing:
            m.append(_md_table(t.cols, t.rows) if t.rows else "None.")
        m.append("")
    return "\n".join(m) + "\n"


def default_path(settings: Settings, fmt: str, when: datetime | None = None) -> Path:
    when = when or datetime.now(UTC)
    base = Path(settings.schedule.reports_dir) if settings.schedule.reports_dir else settings.data / "reports"
    return base / f"gangscope-report-{when:%Y%m%dT%H%M%SZ}.{'html' if fmt == 'html' else 'md'}"


def write_report(settings: Settings, fmt: str = "html", out: Path | None = None,
                 since: datetime | None = None) -> Path:
    """Write the report as ``fmt`` (html or md) to ``out`` (default ``<data>/reports/...``); return its path."""
    from gangscope.errors import UserError
    from reports.sqlshell import connect_read_only

    if fmt not in ("html", "md"):
        raise UserError(f"unknown report format {fmt!r} (choose html or md)")
    con = connect_read_only(settings)
    try:
        data = collect(con, settings.cluster, since=since)
    finally:
        _COLUMNS.pop(id(con), None)
        con.close()
    text = render_html(data) if fmt == "html" else render_md(data)
    out = Path(out) if out else default_path(settings, fmt)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)  # a reader never sees half a report
    return out
