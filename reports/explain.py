"""``gangscope explain NAMESPACE/JOB``: one job's layered check, in the order an operator looks.

Queue and admission, topology (assignment against actual spread), gang assembly, start-up, throughput against
its baseline, then interconnect, GPUs and nodes: each layer gets a verdict, the evidence and its times, read
from the intermediate models that decide the root causes; then the job's findings with their evidence and next
steps (``reports.nextsteps``), healthy jobs included. A finding marks the layer its class belongs to
(``CLASS_LAYER``): a class the models learn later slots in by one entry there, and a class not listed still
shows with its evidence and steps under the findings. Every table is read by column name (``lakeread``), so a
model that gains or loses a column costs one fact, not the explanation.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import duckdb

from reports import diagnose
from reports.lakeread import as_dt, as_json, rows
from reports.nextsteps import clock, duration, number, pct

# The layers, in the order an operator checks them: (key, title).
LAYERS = (("queue", "queue and admission"), ("topology", "topology"), ("gang", "gang assembly"),
          ("startup", "start-up"), ("throughput", "throughput"), ("gpus", "interconnect, GPUs and nodes"))
# Which layer a finding of each class is about; a class missing here is shown under the findings only.
CLASS_LAYER = {
    "admission_quota": "queue", "admission_topology": "queue", "preemption": "queue",
    "topology_misplacement": "topology",
    "gang_assembly": "gang",
    "startup_failure": "startup", "workload_crash": "startup",
    "training_stalled": "throughput", "unexplained_slowdown": "throughput",
    "interconnect_degradation": "gpus", "gpu_fault": "gpus", "gpu_throttle": "gpus", "node_failure": "gpus",
}
# problem: holds now; recovered: held and ended (a finding with ended_at, a dip back above threshold).
VERDICTS = ("ok", "waiting", "not applicable", "no data", "recovered", "problem")


@dataclass
class Layer:
    key: str
    title: str
    verdict: str  # one of VERDICTS
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)  # root causes of the findings about this layer


@dataclass
class Explanation:
    cluster: str
    namespace: str
    job: str
    job_kind: str | None
    state: str | None
    primary: str
    summary: str | None
    job_facts: dict[str, Any]
    layers: list[Layer]
    findings: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))


class UnknownJob(LookupError):
    def __init__(self, wanted: str, closest: list[str]) -> None:
        what = f"expected NAMESPACE/JOB, got {wanted!r}" if "/" not in wanted else f"no job {wanted} in the lake"
        super().__init__(what + (f"; closest: {', '.join(closest)}" if closest else ""))
        self.closest = closest


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, datetime):
        return diagnose._rfc3339(v)
    if hasattr(v, "__float__") and not isinstance(v, int | float | bool):
        return float(v)
    return v


def _one(con: duckdb.DuckDBPyConnection, schema: str, table: str, key: tuple[str, str, str],
         order: str = "") -> list[dict[str, Any]]:
    got = rows(con, schema, table, where="cluster = ? AND namespace = ? AND job = ?", params=list(key), order=order)
    return got[1] if got else []


def _clean(row: dict[str, Any], *names: str) -> dict[str, Any]:
    """The named columns of a row that have a value (evidence), parsed where they hold JSON."""
    return {n: as_json(row[n]) for n in names if row.get(n) is not None and row.get(n) != []}


def find_job(con: duckdb.DuckDBPyConnection, wanted: str, cluster: str | None = None) -> tuple[str, str, str]:
    """(cluster, namespace, job) of ``NAMESPACE/JOB``; UnknownJob with the closest names otherwise."""
    namespace, _, job = wanted.partition("/")
    got = rows(con, "marts", "jobs") or rows(con, "intermediate", "int_jobs")
    known = sorted({(r.get("cluster"), r.get("namespace"), r.get("job")) for r in (got[1] if got else [])})
    hits = [k for k in known if k[1] == namespace and k[2] == job and (cluster is None or k[0] == cluster)]
    if hits:
        return hits[0]
    names = sorted({f"{n}/{j}" for _, n, j in known})
    if "/" not in wanted:  # a job's name alone: the jobs of that name (or near it) in every namespace
        by_job = {j: f"{n}/{j}" for _, n, j in known}
        same = [x for x in names if x.endswith(f"/{wanted}")]
        raise UnknownJob(wanted, (same or [by_job[j] for j in difflib.get_close_matches(
            wanted, sorted(by_job), n=5, cutoff=0.4)])[:5])
    closest = difflib.get_close_matches(wanted, names, n=5, cutoff=0.4)
    if not closest and job:  # a name right in another namespace, or a namespace given alone
        closest = [n for n in names if n.endswith(f"/{job}") or n.startswith(f"{wanted}/")][:5]
    raise UnknownJob(wanted, closest)


def explain(con: duckdb.DuckDBPyConnection, wanted: str, cluster: str | None = None) -> Explanation:
    key = find_job(con, wanted, cluster)
    runs = _one(con, "marts", "jobs", key, order="created_at DESC NULLS LAST")
    job = runs[0] if runs else {}
    ij = (_one(con, "intermediate", "int_jobs", key, order="created_at DESC NULLS LAST") or [{}])[0]
    found = [f for f in diagnose.findings(con, include_healthy=True)
             if (f["cluster"], f["namespace"], f["job"]) == key]
    flagged = [f for f in found if f["root_cause"] != "healthy"]
    by_layer: dict[str, list[dict[str, Any]]] = {}
    for f in flagged:
        by_layer.setdefault(CLASS_LAYER.get(f["root_cause"], ""), []).append(f)
    layers = [
        _queue(con, key, ij), _topology(con, key, ij), _gang(con, key, ij), _startup(con, key, ij),
        _throughput(con, key, ij), _gpus(con, key, ij),
    ]
    for layer in layers:
        mine = by_layer.get(layer.key, [])
        if mine:
            layer.findings = [f["root_cause"] for f in mine]
            layer.verdict = "problem" if any(f.get("ended_at") is None for f in mine) else "recovered"
            worst = next((f for f in mine if f.get("ended_at") is None), mine[0])
            layer.summary = f"{worst['root_cause']} ({worst['severity']}): {worst['summary']}"
            if worst.get("evidence_text"):
                layer.evidence.setdefault("finding", worst["evidence_text"])
    facts = _clean(ij or job, "job_kind", "workload", "cluster_queue", "local_queue", "pod_group", "gang_system",
                   "gang_size", "pods", "pods_running", "gpus", "nodes", "created_at", "run_started_at",
                   "all_running_at", "deleted_at", "state")
    return Explanation(cluster=key[0], namespace=key[1], job=key[2], job_kind=job.get("job_kind") or ij.get("job_kind"),
                       state=job.get("state") or ij.get("state"), primary=job.get("root_cause") or "healthy",
                       summary=job.get("summary"), job_facts=facts, layers=layers, findings=found)


# --- the layers ------------------------------------------------------------------------------------------------

def _title(key: str) -> str:
    return dict(LAYERS)[key]


def _queue(con: duckdb.DuckDBPyConnection, key: tuple[str, str, str], ij: dict[str, Any]) -> Layer:
    adm = (_one(con, "intermediate", "int_admission", key, order="created_at DESC NULLS LAST") or [None])[0]
    if adm is None:
        return Layer("queue", _title("queue"), "not applicable", "not queued by Kueue (no Workload)")
    ev = _clean(adm, "workload", "cluster_queue", "local_queue", "created_at", "quota_reserved_at", "admitted_at",
                "wait_s", "cause", "cause_kind", "reason", "message", "reason_at", "gate")
    where = f" in ClusterQueue {adm['cluster_queue']}" if adm.get("cluster_queue") else ""
    if adm.get("admitted_at"):
        again = " (requeued since)" if adm.get("requeued") else ""
        return Layer("queue", _title("queue"), "ok", f"admitted{where} at {clock(adm['admitted_at'])}, after "
                     f"{duration(adm.get('wait_s'))} in the queue{again}", ev)
    why = f": {adm.get('reason')}: {adm.get('message')}" if adm.get("reason") else ""
    # Waiting, even blocked by quota or topology, until its admission finding (past thresholds.admission_wait_s)
    # makes it a problem (explain() below): a PROBLEM layer under a "healthy: no incident" verdict said both.
    return Layer("queue", _title("queue"), "waiting", f"not admitted{where} for {duration(adm.get('wait_s'))}{why}",
                 ev)


def _topology(con: duckdb.DuckDBPyConnection, key: tuple[str, str, str], ij: dict[str, Any]) -> Layer:
    place = (_one(con, "intermediate", "int_placement", key) or [None])[0]
    how = f"required {ij['required_topology']}" if ij.get("required_topology") else \
        f"preferred {ij['preferred_topology']}" if ij.get("preferred_topology") else "no topology request"
    if place is None:  # no pods on nodes yet, or no level to judge them by (no request, no Kueue Topology)
        nodes = [str(n) for n in as_json(ij.get("nodes")) or []]
        where = f"its pods are on {', '.join(nodes)}; no Kueue Topology to judge their spread by" if nodes else \
            "its pods are on no node yet"
        return Layer("topology", _title("topology"), "not applicable", f"{how}; {where}")
    ev = _clean(place, "level", "requested", "domains", "needed_domains", "assigned_domains", "misplaced",
                "domain_values")
    text = (f"{how}; its pods span {place.get('domains')} {place.get('level')} domain(s) "
            f"({', '.join(map(str, as_json(place.get('domain_values')) or []))}) where {place.get('needed_domains')} "
            "would hold it" + (f"; Kueue assigned {place['assigned_domains']}" if place.get("assigned_domains")
                               is not None else ""))
    return Layer("topology", _title("topology"), "problem" if place.get("misplaced") else "ok", text, ev)


def _gang(con: duckdb.DuckDBPyConnection, key: tuple[str, str, str], ij: dict[str, Any]) -> Layer:
    g = (_one(con, "intermediate", "int_gang", key) or [None])[0]
    if g is None:
        return Layer("gang", _title("gang"), "not applicable", "no member pods yet")
    ev = _clean(g, "pod_group", "gang_system", "gang_size", "pods", "pods_bound", "pods_running",
                "assembly_started_at", "assembled_at", "assembled_before_capture", "assembly_s", "timeout_s",
                "timed_out", "phase", "group_message", "failed_reasons", "first_failed_at", "idle_gpus")
    size = g.get("gang_size")
    if g.get("assembled_at"):
        when = "before gangscope first saw it" if g.get("assembled_before_capture") else \
            f"at {clock(g['assembled_at'])}, {duration(g.get('assembly_s'))} after " \
            f"{clock(g.get('assembly_started_at'))}"
        return Layer("gang", _title("gang"), "problem" if g.get("timed_out") else "ok",
                     f"{size} of {size} members bound {when} (timeout {duration(g.get('timeout_s'))})", ev)
    reasons = as_json(g.get("failed_reasons")) or {}
    said = f"; the scheduler says {', '.join(reasons)}" if reasons else ""
    return Layer("gang", _title("gang"), "problem" if g.get("timed_out") else "waiting",
                 f"{g.get('pods_bound')} of {size} members bound after {duration(g.get('assembly_s'))} "
                 f"(timeout {duration(g.get('timeout_s'))}){said}", ev)


def _startup(con: duckdb.DuckDBPyConnection, key: tuple[str, str, str], ij: dict[str, Any]) -> Layer:
    g = (_one(con, "intermediate", "int_gang", key) or [{}])[0]
    pods = _one(con, "intermediate", "int_pod_jobs", key)
    live = [p for p in pods if not p.get("deleted")]
    phases: dict[str, int] = {}
    for p in live:
        phases[str(p.get("phase"))] = phases.get(str(p.get("phase")), 0) + 1
    ev = {"pod_phases": phases, **_clean(g, "assembled_at", "all_running_at", "start_up_s")}
    if ij.get("state") in ("finished", "deleted") and not live:
        return Layer("startup", _title("startup"), "not applicable", f"the job is {ij.get('state')}", ev)
    shown = ", ".join(f"{n} {ph}" for ph, n in sorted(phases.items())) or "no live pods"
    if g.get("all_running_at"):
        took = f", {duration(g['start_up_s'])} after binding" if g.get("start_up_s") is not None else \
            " (start-up not measured: bound before gangscope first saw it)"
        return Layer("startup", _title("startup"), "ok", f"all members running since {clock(g['all_running_at'])}"
                     f"{took}; pods: {shown}", ev)
    if g.get("assembled_at"):
        return Layer("startup", _title("startup"), "waiting", f"bound, not all running yet; pods: {shown}", ev)
    return Layer("startup", _title("startup"), "not applicable", f"not bound yet; pods: {shown}", ev)


def _throughput(con: duckdb.DuckDBPyConnection, key: tuple[str, str, str], ij: dict[str, Any]) -> Layer:
    got = _one(con, "intermediate", "int_job_throughput", key, order="ts")
    if not got and ij.get("state") in ("queued", "assembling"):
        return Layer("throughput", _title("throughput"), "not applicable", f"not running yet ({ij.get('state')})")
    if not got:
        return Layer("throughput", _title("throughput"), "no data",
                     "no training-throughput metric for this job: slowdowns cannot be judged")
    judged = [r for r in got if r.get("judged")]
    last = got[-1]
    base = last.get("baseline")
    ev: dict[str, Any] = {"baseline": base, "baseline_source": last.get("baseline_source"), "last_ts": last.get("ts"),
                          "last_value": last.get("value"), "last_ratio": last.get("ratio"),
                          "buckets_judged": len(judged), "buckets_below": sum(1 for r in judged if r.get("dip"))}
    lows = [r.get("ratio") for r in judged if r.get("ratio") is not None]
    if lows:
        ev["lowest_ratio"] = min(lows)
    dips = _one(con, "intermediate", "int_throughput_dips", key, order="started_at")
    if dips:
        ev["dips"] = [_clean(d, "started_at", "held_at", "ended_at", "samples", "min_ratio", "mean_ratio")
                      for d in dips]
    text = (f"{number(last.get('value'))} items/s at {clock(last.get('ts'))}"
            + (f", {pct(last.get('ratio'))} of its baseline {number(base)} ({last.get('baseline_source')})"
               if base else ", no baseline yet"))
    open_dips = [d for d in dips if d.get("ended_at") is None]
    if dips:
        deepest = min(d.get("min_ratio") or 1 for d in dips)
        text += f"; {len(dips)} dip(s) below threshold, the deepest to {pct(deepest)}"
    return Layer("throughput", _title("throughput"), "problem" if open_dips else "recovered" if dips else "ok", text,
                 ev)


def _gpus(con: duckdb.DuckDBPyConnection, key: tuple[str, str, str], ij: dict[str, Any]) -> Layer:
    nodes = [str(n) for n in (as_json(ij.get("nodes")) or [])]
    ev: dict[str, Any] = {"nodes": nodes}
    inter = _one(con, "intermediate", "int_interconnect", key)
    signals = [r for r in inter if as_json(r.get("signal_nodes"))]
    if signals:
        ev["interconnect"] = [_clean(r, "dip_started_at", "bandwidth_drops", "link_errors", "ports_down",
                                     "first_signal_at") for r in signals]
    faults: list[dict[str, Any]] = []
    if nodes:
        got = rows(con, "intermediate", "int_gpu_faults", where=f"node IN ({', '.join('?' * len(nodes))})",
                   params=nodes, order="started_at")
        since = as_dt(ij.get("run_started_at") or ij.get("created_at"))
        faults = [f for f in (got[1] if got else []) if since is None or (as_dt(f.get("started_at")) or since) >= since
                  or f.get("pod")]
        if faults:
            ev["gpu_faults"] = [_clean(f, "node", "gpu", "kind", "code", "started_at", "samples", "pod")
                                for f in faults]
        health = rows(con, "marts", "node_health", where=f"node IN ({', '.join('?' * len(nodes))})", params=nodes)
        if health and health[1]:
            ev["node_health"] = [_clean(h, "node", "trouble_score", "interconnect_score", "xid_faults",
                                        "missing_gpus", "last_seen") for h in health[1]]
    if not nodes:
        return Layer("gpus", _title("gpus"), "not applicable", "no node holds its pods", ev)
    if signals or faults:
        parts = []
        if signals:
            on = sorted({str(n) for r in signals for n in as_json(r["signal_nodes"])})
            parts.append(f"interconnect signals on {', '.join(on)}")
        if faults:
            parts.append(f"{len(faults)} GPU fault(s) on {', '.join(sorted({str(f['node']) for f in faults}))}")
        return Layer("gpus", _title("gpus"), "problem", "; ".join(parts), ev)
    return Layer("gpus", _title("gpus"), "ok", f"no interconnect, GPU or node signal on {', '.join(nodes)}", ev)


# --- output -------------------------------------------------------------------------------------------------

def facts_line(e: Explanation) -> str:
    """What the job is now, in one line: state, pods running, GPUs, nodes, Workload."""
    f = e.job_facts
    what = [f"state {e.state}" if e.state else None,
            f"{f.get('pods_running', '?')}/{f.get('gang_size') or f.get('pods', '?')} pods running"
            if f.get("pods") is not None else None,
            f"{number(f['gpus'])} GPUs" if f.get("gpus") else None,
            f"on {', '.join(map(str, f['nodes']))}" if f.get("nodes") else None,
            f"Workload {f['workload']}" if f.get("workload") else None]
    return ", ".join(w for w in what if w)


def verdict_line(e: Explanation) -> str:
    return f"verdict: {e.primary}" + (f": {e.summary}" if e.summary else "")


def finding_line(x: dict[str, Any]) -> str:
    """One finding's class, severity, span, layer and nodes."""
    layer = CLASS_LAYER.get(x["root_cause"])
    return (f"{x['root_cause']} ({x['severity']}) from {x['started_at']} to {x['ended_at'] or 'now'}"
            + (f", layer {dict(LAYERS)[layer]}" if layer else "")
            + (f", nodes {', '.join(x['nodes'])}" if x.get("nodes") else ""))


def no_finding_line(e: Explanation) -> str:
    return "no finding: " + next((x["summary"] for x in e.findings if x.get("summary")), "nothing wrong seen")


def to_text(e: Explanation) -> str:
    from reports.terminal import terminal_safe

    head = f"{e.namespace}/{e.job}" + (f" ({e.job_kind})" if e.job_kind else "")
    out = [f"{head}: " + facts_line(e)]
    out.append(verdict_line(e))
    out.append("")
    width = max(len(t) for _, t in LAYERS)
    for i, layer in enumerate(e.layers, 1):
        out.append(f"{i}. {layer.title:<{width}}  {layer.verdict.upper():<14}  {layer.summary}")
    flagged = [x for x in e.findings if x["root_cause"] != "healthy"]
    for x in flagged:
        out.append("")
        out.append(f"finding: {finding_line(x)}")
        out.append(f"  {x['summary']}")
        for s in x.get("evidence_text") or []:
            out.append(f"  - {s}")
        for step in x.get("next_steps") or []:
            out.append(f"  next: {step['action']}")
            out.append(f"    $ {step['check']}")
            if step.get("act"):
                out.append(f"    $ {step['act']}")
    if not flagged:
        out.append("")
        out.append(no_finding_line(e))
    return "\n".join(terminal_safe(line.rstrip()) for line in out)
