"""Migration baseline (CONTRACT section 6): KPIs of a window, and a comparison of two windows.

Typical use: ``snapshot`` a week on Kueue + coscheduling, move to the native
``scheduling.k8s.io`` Workload/PodGroup APIs, then ``compare`` the file with a later window.
Figures come from the marts (one row per job in ``marts.jobs``, findings in
``marts.findings``). Jobs are split by API family: ``native`` when their gang is a native
``scheduling.k8s.io`` PodGroup, ``kueue_coscheduling`` otherwise (Kueue Workload and/or a
scheduler-plugins or Volcano PodGroup, or neither). See docs/baseline.md.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from gangscope.config import Settings
from gangscope.errors import UserError
from gangscope.rootcauses import precedence

FORMAT_VERSION = 1
# Per-job fields compare sets side by side (what moved and what differs); times and nodes are context.
JOB_FIELDS = ("api", "queue", "gang", "gang_size", "group_timeout_s", "placement_level", "placement_domains",
              "root_cause")
# KPI name -> True when a higher value is better.
KPIS: dict[str, bool | None] = {  # None: no better or worse
    "jobs": None,
    "admission_wait_p50_s": False, "admission_wait_p95_s": False, "admission_wait_p99_s": False,
    "gang_assembly_p50_s": False, "gang_assembly_p95_s": False,
    "gang_timeout_rate": False,
    "topology_compliance_rate": True,
    "idle_gpu_hours": False,
    "findings": False,
}


def percentile(values: list[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (DuckDB ``quantile_cont``, numpy's default)."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    k = (len(xs) - 1) * p
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _rate(flags: list[Any]) -> float | None:
    known = [bool(f) for f in flags if f is not None]
    return sum(known) / len(known) if known else None


def kpis(jobs: list[dict[str, Any]], findings: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one group of jobs (a ClusterQueue, an API family, or all)."""
    waits = [j["admission_wait_s"] for j in jobs if j.get("admission_wait_s") is not None]
    assembly = [j["gang_assembly_s"] for j in jobs if j.get("gang_assembly_s") is not None]
    gang_jobs = [j for j in jobs if j.get("gang_system")]
    tput: dict[str, list[float]] = {}
    for j in jobs:
        if j.get("throughput_per_gpu") is not None:
            tput.setdefault(str(j["job"]), []).append(float(j["throughput_per_gpu"]))
    by_class: dict[str, int] = {}
    for f in findings:
        by_class[f["root_cause"]] = by_class.get(f["root_cause"], 0) + 1
    idle = [float(j["idle_gpu_hours"]) for j in jobs if j.get("idle_gpu_hours") is not None]
    return {
        "jobs": len(jobs),
        "admission_wait_p50_s": percentile(waits, 0.50),
        "admission_wait_p95_s": percentile(waits, 0.95),
        "admission_wait_p99_s": percentile(waits, 0.99),
        "gang_assembly_p50_s": percentile(assembly, 0.50),
        "gang_assembly_p95_s": percentile(assembly, 0.95),
        "gang_timeout_rate": _rate([j.get("gang_timed_out") for j in gang_jobs]),
        "topology_compliance_rate": _rate([j.get("topology_compliant") for j in jobs]),
        "throughput_per_gpu": {k: percentile(v, 0.5) for k, v in sorted(tput.items())},
        "idle_gpu_hours": sum(idle) if idle else 0.0,
        "findings": sum(by_class.values()),
        "findings_by_class": dict(sorted(by_class.items())),
    }


def api_family(job: dict[str, Any]) -> str:
    return "native" if str(job.get("gang_system") or "").lower() == "native" else "kueue_coscheduling"


def _iso(d: datetime | None) -> str | None:
    return d.astimezone(UTC).isoformat().replace("+00:00", "Z") if d else None


# One row per job with what the KPIs need, from the models (docs/tables.md explains each column).
JOB_SQL = """
SELECT j.cluster, j.namespace, j.job, j.cluster_queue,
       CASE WHEN j.workload IS NOT NULL THEN 'kueue' END AS queue_system,
       j.gang_system, j.gpus, j.created_at,
       a.wait_s AS admission_wait_s,
       CASE WHEN j.all_running_at IS NOT NULL AND j.created_at IS NOT NULL
            THEN greatest(epoch(j.all_running_at) - epoch(j.created_at), 0) END AS gang_assembly_s,
       g.timed_out AS gang_timed_out,
       CASE WHEN p.domains > 0 THEN NOT p.misplaced END AS topology_compliant,
       t.throughput / nullif(j.gpus, 0) AS throughput_per_gpu,
       coalesce(i.idle_gpu_hours, 0) AS idle_gpu_hours,
       j.gang_size, j.pod_group,
       -- Only coscheduling has a per-group timeout (scheduleTimeoutSeconds); native gangs have none (1.35 / 1.36: a
       -- fixed 5-minute Permit deadline; 1.37: no Permit wait at all).
       CASE WHEN j.gang_system = 'coscheduling' THEN g.timeout_s END AS group_timeout_s,
       p.level AS placement_level, p.domains AS placement_domains, j.nodes
FROM marts.jobs j
LEFT JOIN intermediate.int_admission a USING (cluster, namespace, job)
LEFT JOIN intermediate.int_gang g USING (cluster, namespace, job)
LEFT JOIN intermediate.int_placement p USING (cluster, namespace, job)
LEFT JOIN (SELECT cluster, namespace, job, median(value) FILTER (WHERE judged) AS throughput
           FROM intermediate.int_job_throughput GROUP BY ALL) t USING (cluster, namespace, job)
LEFT JOIN (SELECT cluster, namespace, job, sum(idle_gpu_hours) AS idle_gpu_hours
           FROM marts.idle_gpu_hours GROUP BY ALL) i USING (cluster, namespace, job)
"""
NEEDED = ("marts.jobs", "marts.findings", "marts.idle_gpu_hours", "intermediate.int_admission",
          "intermediate.int_gang", "intermediate.int_placement", "intermediate.int_job_throughput")


def compute(con: duckdb.DuckDBPyConnection, cluster: str, since: datetime | None = None,
            until: datetime | None = None) -> dict[str, Any]:
    """The snapshot of jobs created in [since, until) on ``cluster``."""
    have = {f"{s}.{t}" for s, t in con.execute(
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_catalog = 'lake'").fetchall()}
    missing = [t for t in NEEDED if t not in have]
    if missing:
        raise UserError(f"{missing[0]} is not built yet: run `gangscope models build` (or the pipeline) first")
    where = ["cluster = ?"]
    params: list[Any] = [cluster]
    if since:
        where.append("created_at >= ?")
        params.append(since)
    if until:
        where.append("created_at < ?")
        params.append(until)
    cur = con.execute(f"SELECT * FROM ({JOB_SQL}) WHERE {' AND '.join(where)}", params)
    names = [d[0] for d in cur.description]
    jobs = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    keys = {(j["namespace"], j["job"]): j for j in jobs}
    f_rows = con.execute("SELECT namespace, job, root_cause FROM marts.findings WHERE cluster = ? "
                         "AND root_cause <> 'healthy'", [cluster]).fetchall()
    # The findings of the window's jobs, whenever they started.
    findings = [{"namespace": n, "job": j, "root_cause": c, "api": api_family(keys[(n, j)])}
                for n, j, c in f_rows if (n, j) in keys]
    created = [j["created_at"] for j in jobs if j.get("created_at") is not None]
    by_cq: dict[str, list[dict[str, Any]]] = {}
    for j in jobs:
        if j.get("cluster_queue"):
            by_cq.setdefault(j["cluster_queue"], []).append(j)
    cq_of = {(j["namespace"], j["job"]): j.get("cluster_queue") for j in jobs}
    return {
        "gangscope_baseline": FORMAT_VERSION,
        "cluster": cluster,
        # Half-open [since, until): without --until it ends just after the last job, so the next
        # window can start exactly there.
        "window": {"since": _iso(since or (min(created) if created else None)),
                   "until": _iso(until or (max(created) + timedelta(microseconds=1) if created else None))},
        "systems": {
            "queue": sorted({str(j["queue_system"]) for j in jobs if j.get("queue_system")}),
            "gang": sorted({str(j["gang_system"]) for j in jobs if j.get("gang_system")}),
        },
        "overall": kpis(jobs, findings),
        "cluster_queues": {cq: kpis(js, [f for f in findings if cq_of.get((f["namespace"], f["job"])) == cq])
                           for cq, js in sorted(by_cq.items())},
        "api": {fam: kpis([j for j in jobs if api_family(j) == fam], [f for f in findings if f["api"] == fam])
                for fam in ("kueue_coscheduling", "native")},
        # Per job: what compare sets side by side for the same job name in both windows.
        "per_job": {f"{j['namespace']}/{j['job']}": {
            "api": api_family(j), "queue": j.get("queue_system"), "gang": j.get("gang_system"),
            "pod_group": j.get("pod_group"), "gang_size": j.get("gang_size"),
            "group_timeout_s": j.get("group_timeout_s"), "placement_level": j.get("placement_level"),
            "placement_domains": j.get("placement_domains"), "nodes": list(j.get("nodes") or []),
            "gang_assembly_s": j.get("gang_assembly_s"), "admission_wait_s": j.get("admission_wait_s"),
            "root_cause": next((f["root_cause"] for f in sorted(findings, key=lambda f: precedence(
                f["root_cause"])) if (f["namespace"], f["job"]) == (j["namespace"], j["job"])), "healthy"),
        } for j in sorted(jobs, key=lambda j: (j["namespace"], j["job"]))},
    }


def snapshot(settings: Settings, out: Path, since: datetime | None = None, until: datetime | None = None) -> dict:
    from reports.sqlshell import connect_read_only

    con = connect_read_only(settings)
    try:
        snap = compute(con, settings.cluster, since, until)
    finally:
        con.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(snap, indent=2, sort_keys=False) + "\n")
    return snap


def load(path: Path) -> dict[str, Any]:
    try:
        snap = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"baseline file {path} does not exist") from None
    except ValueError as e:
        raise UserError(f"baseline file {path} is not JSON: {e}") from None
    if not isinstance(snap, dict) or snap.get("gangscope_baseline") != FORMAT_VERSION:
        raise UserError(f"{path} is not a gangscope baseline (format {FORMAT_VERSION})")
    return snap


def _verdict(name: str, before: Any, after: Any) -> str:
    if before is None or after is None:
        return "n/a"
    if after == before:
        return "same"
    higher_better = KPIS.get(name, name.startswith("throughput_per_gpu"))
    if higher_better is None:
        return "-"
    return "better" if (after > before) == higher_better else "worse"


def _rows_for(scope: str, a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name in KPIS:
        rows.append({"scope": scope, "kpi": name, "baseline": a.get(name), "current": b.get(name)})
    for cls in sorted(set(a.get("findings_by_class", {})) | set(b.get("findings_by_class", {}))):
        rows.append({"scope": scope, "kpi": f"findings[{cls}]", "baseline": a.get("findings_by_class", {}).get(cls, 0),
                     "current": b.get("findings_by_class", {}).get(cls, 0)})
    ta, tb = a.get("throughput_per_gpu", {}), b.get("throughput_per_gpu", {})
    for job in sorted(set(ta) & set(tb)):
        rows.append({"scope": scope, "kpi": f"throughput_per_gpu[{job}]", "baseline": ta[job], "current": tb[job]})
    for r in rows:
        before, after = r["baseline"], r["current"]
        r["delta"] = after - before if isinstance(before, (int, float)) and isinstance(after, (int, float)) else None
        kpi = r["kpi"].split("[")[0]
        r["verdict"] = _verdict("findings" if kpi == "findings" else kpi, before, after)
    return rows


def compare(base: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """Each KPI of both windows with its delta and better/worse.

    Scopes: ``overall``; ``api`` (the baseline's dominant API family beside the current
    one's, e.g. kueue_coscheduling before vs native after); each ClusterQueue in both.
    """
    def dominant(s: dict[str, Any]) -> str:
        return max(("kueue_coscheduling", "native"), key=lambda f: s["api"][f]["jobs"])

    fa, fb = dominant(base), dominant(current)
    rows = _rows_for("overall", base["overall"], current["overall"])
    rows += _rows_for(f"api {fa} -> {fb}", base["api"][fa], current["api"][fb])
    for cq in sorted(set(base.get("cluster_queues", {})) & set(current.get("cluster_queues", {}))):
        rows += _rows_for(f"cluster_queue {cq}", base["cluster_queues"][cq], current["cluster_queues"][cq])
    return {
        "baseline": {"window": base["window"], "cluster": base["cluster"], "systems": base["systems"]},
        "current": {"window": current["window"], "cluster": current["cluster"], "systems": current["systems"]},
        "rows": rows,
        "jobs": per_job(base.get("per_job", {}), current.get("per_job", {})),
    }


def per_job(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """For each job name in both windows: whether it moved API family, and every field that differs
    (gang size, a per-group timeout against none, placement domains, class)."""
    out = []
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        diff = {f: [x.get(f), y.get(f)] for f in JOB_FIELDS if x.get(f) != y.get(f)}
        out.append({"job": key, "moved": f"{x.get('api')} -> {y.get('api')}" if x.get("api") != y.get("api") else None,
                    "differs": diff,
                    "gang_assembly_s": [x.get("gang_assembly_s"), y.get("gang_assembly_s")]})
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def format_table(result: dict[str, Any]) -> str:
    b, c = result["baseline"], result["current"]
    lines = [
        f"baseline: {b['window']['since']} .. {b['window']['until']}  queue={','.join(b['systems']['queue']) or '-'} "
        f"gang={','.join(b['systems']['gang']) or '-'}",
        f"current:  {c['window']['since']} .. {c['window']['until']}  queue={','.join(c['systems']['queue']) or '-'} "
        f"gang={','.join(c['systems']['gang']) or '-'}",
        "",
    ]
    cols = ("scope", "kpi", "baseline", "current", "delta", "verdict")
    cells = [[_fmt(r[c]) for c in cols] for r in result["rows"]]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(cols)]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    lines += ["  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    if result.get("jobs"):
        lines += ["", "per job (baseline -> current)"]
        for j in result["jobs"]:
            what = "; ".join(f"{f} {_fmt(v[0])} -> {_fmt(v[1])}" for f, v in j["differs"].items()) or "no difference"
            lines.append(f"{j['job']}: {what}")
    return "\n".join(lines) + "\n"


def compare_file(settings: Settings, path: Path, since: datetime | None = None, until: datetime | None = None,
                 against: Path | None = None) -> dict[str, Any]:
    """Compare a snapshot file with ``against`` (another file) or with the lake's window [since, until)."""
    from reports.sqlshell import connect_read_only

    base = load(path)
    if against is not None:
        return compare(base, load(against))
    if since is None and base["window"].get("until"):
        since = datetime.fromisoformat(base["window"]["until"].replace("Z", "+00:00"))
    con = connect_read_only(settings)
    try:
        current = compute(con, settings.cluster, since, until)
    finally:
        con.close()
    return compare(base, current)
