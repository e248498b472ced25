"""Server-side table printing (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``), as kube-apiserver does it.

``kubectl get`` asks the server for a ``meta.k8s.io/v1`` Table and prints its columns as they come, so the
columns, their cells and the ages are the server's: a pod's READY / STATUS / RESTARTS, a Workload's printer
columns. Ages are reckoned against the server's clock (``now``), which for the sandbox is the sandbox clock;
kubectl computing them from a faster clock's timestamps showed ``<invalid>``.

Built-in kinds follow kube-apiserver's printers (``pkg/printers/internalversion/printers.go``: ``printPod``,
``printNode``, ``printEvent``, ``printJob``); custom resources the ``additionalPrinterColumns`` of their CRDs
(``CRD_COLUMNS`` below names each source), evaluated the way apiextensions-apiserver's table convertor does,
with a ``date`` column shown as an age; a kind with neither gets NAME and AGE, like a CRD without columns.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

Column = dict[str, Any]

_NAME: Column = {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a "
                 "namespace.", "priority": 0}


def _col(name: str, ctype: str = "string", priority: int = 0, description: str = "") -> Column:
    return {"name": name, "type": ctype, "format": "", "description": description, "priority": priority}


def human_duration(seconds: float) -> str:
    """apimachinery ``duration.HumanDuration``: ``<invalid>`` more than a second in the future, then 2-3 figures."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def _ts(v: Any) -> datetime | None:
    if not isinstance(v, str) or not v:
        return None
    try:
        d = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def age(v: Any, now: datetime) -> str:
    """``translateTimestampSince``: ``<unknown>`` without a time."""
    t = _ts(v)
    return "<unknown>" if t is None else human_duration((now - t).total_seconds())


# --- built-in kinds (kube-apiserver printers) ------------------------------------------------------------

POD_COLUMNS = [
    _NAME, _col("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", description="The aggregate status of the containers in this pod."),
    _col("Restarts", description="The number of times the containers in this pod have been restarted and when the "
         "last container in this pod has restarted."),
    _col("Age"), _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1),
    _col("Readiness Gates", priority=1),
]


def _restartable(c: dict[str, Any] | None) -> bool:
    return bool(c) and c.get("restartPolicy") == "Always"  # type: ignore[union-attr]


def _terminated_reason(t: dict[str, Any], prefix: str = "") -> str:
    if t.get("reason"):
        return prefix + t["reason"]
    if t.get("signal"):
        return f"{prefix}Signal:{t['signal']}"
    return f"{prefix}ExitCode:{t.get('exitCode', 0)}"


def pod_cells(pod: dict[str, Any], now: datetime) -> list[Any]:
    """``printPod``: READY, STATUS (the reason a person reads: ``ImagePullBackOff``, ``Init:0/1``, ``Terminating``),
    RESTARTS with the last restart's age, AGE, and the wide columns."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    total = len(containers) + sum(1 for c in init_specs.values() if _restartable(c))
    ready = restarts = side_restarts = 0
    last_restart: datetime | None = None
    side_last: datetime | None = None
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    def later(a: datetime | None, b: Any) -> datetime | None:
        t = _ts(b)
        return t if t is not None and (a is None or t > a) else a

    initializing = False
    inits = status.get("initContainerStatuses") or []
    for i, c in enumerate(inits):
        restarts += int(c.get("restartCount") or 0)
        last_term = (c.get("lastState") or {}).get("terminated")
        if last_term:
            last_restart = later(last_restart, last_term.get("finishedAt"))
        if _restartable(init_specs.get(c.get("name"))):
            side_restarts += int(c.get("restartCount") or 0)
            if last_term:
                side_last = later(side_last, last_term.get("finishedAt"))
        state = c.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term and term.get("exitCode", 0) == 0:
            continue
        if _restartable(init_specs.get(c.get("name"))) and c.get("started"):
            ready += bool(c.get("ready"))
            continue
        if term:
            reason = _terminated_reason(term, "Init:")
        elif wait and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions") or [])
    if not initializing or initialized:
        restarts, last_restart = side_restarts, side_last
        running = False
        for c in reversed(status.get("containerStatuses") or []):
            restarts += int(c.get("restartCount") or 0)
            last_term = (c.get("lastState") or {}).get("terminated")
            if last_term:
                last_restart = later(last_restart, last_term.get("finishedAt"))
            state = c.get("state") or {}
            wait, term = state.get("waiting") or {}, state.get("terminated")
            if wait.get("reason"):
                reason = wait["reason"]
            elif term:
                reason = _terminated_reason(term)
            elif c.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in status.get("conditions") or [])
            reason = "Running" if pod_ready else "NotReady"
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    shown = str(restarts)
    if restarts and last_restart is not None:
        shown = f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"
    ips = status.get("podIPs") or []
    ip = (ips[0].get("ip") if ips else None) or status.get("podIP") or "<none>"
    gates = spec.get("readinessGates") or []
    if gates:
        true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        gate_text = f"{sum(1 for g in gates if g.get('conditionType') in true)}/{len(gates)}"
    else:
        gate_text = "<none>"
    return [meta.get("name"), f"{ready}/{total}", reason, shown, age(meta.get("creationTimestamp"), now), ip,
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>", gate_text]


NODE_COLUMNS = [
    _NAME, _col("Status", description="The status of the node"), _col("Roles", description="The roles of the node"),
    _col("Age"), _col("Version"), _col("Internal-IP", priority=1), _col("External-IP", priority=1),
    _col("OS-Image", priority=1), _col("Kernel-Version", priority=1), _col("Container-Runtime", priority=1),
]


def node_cells(node: dict[str, Any], now: datetime) -> list[Any]:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    ready = conds.get("Ready")
    states = ["Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = meta.get("labels") or {}
    roles = sorted({k.removeprefix("node-role.kubernetes.io/") for k in labels
                    if k.startswith("node-role.kubernetes.io/")} | ({labels["kubernetes.io/role"]}
                                                                    if labels.get("kubernetes.io/role") else set()))
    addr = {a.get("type"): a.get("address") for a in reversed(status.get("addresses") or [])}
    info = status.get("nodeInfo") or {}
    return [meta.get("name"), ",".join(states), ",".join(r for r in roles if r) or "<none>",
            age(meta.get("creationTimestamp"), now), info.get("kubeletVersion", ""),
            addr.get("InternalIP") or "<none>", addr.get("ExternalIP") or "<none>", info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


EVENT_COLUMNS = [
    _col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Subobject", priority=1),
    _col("Source", priority=1), _col("Message"), _col("First Seen", priority=1), _col("Count", priority=1),
    {**_NAME, "priority": 1},
]


def event_cells(ev: dict[str, Any], now: datetime) -> list[Any]:
    meta = ev.get("metadata") or {}
    inv = ev.get("involvedObject") or ev.get("regarding") or {}
    first = ev.get("firstTimestamp") or ev.get("deprecatedFirstTimestamp") or ev.get("eventTime")
    last = ev.get("lastTimestamp") or ev.get("deprecatedLastTimestamp") or (
        (ev.get("series") or {}).get("lastObservedTime")) or ev.get("eventTime") or first
    count = ev.get("count") or ev.get("deprecatedCount") or 1
    last_seen = age(last, now)
    if int(count) > 1 and first:
        last_seen = f"{last_seen} (x{count} over {age(first, now)})"
    source = (ev.get("source") or {}).get("component") or ev.get("reportingComponent") or \
        ev.get("reportingController") or ""
    host = (ev.get("source") or {}).get("host")
    return [last_seen, ev.get("type", ""), ev.get("reason", ""),
            f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}", inv.get("fieldPath", ""),
            f"{source}, {host}" if host else source, ev.get("message") or ev.get("note") or "",
            age(first, now), str(count), meta.get("name")]


JOB_COLUMNS = [
    _NAME, _col("Status"), _col("Completions"), _col("Duration"), _col("Age"), _col("Containers", priority=1),
    _col("Images", priority=1), _col("Selector", priority=1),
]


def job_cells(job: dict[str, Any], now: datetime) -> list[Any]:
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    state = next((s for s, c in (("Complete", "Complete"), ("Failed", "Failed")) if c in true), None)
    if state is None:
        state = "Terminating" if meta.get("deletionTimestamp") else next(
            (c for c in ("Suspended", "FailureTarget", "SuccessCriteriaMet") if c in true), "Running")
    completions = spec.get("completions")
    done = f"{status.get('succeeded', 0)}/{completions}" if completions is not None else \
        f"{status.get('succeeded', 0)}/1 of {spec.get('parallelism', 1)}"
    start, end = _ts(status.get("startTime")), _ts(status.get("completionTime"))
    duration = "" if start is None else human_duration(((end or now) - start).total_seconds())
    pod_spec = ((spec.get("template") or {}).get("spec") or {})
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    return [meta.get("name"), state, done, duration, age(meta.get("creationTimestamp"), now),
            ",".join(c.get("name", "") for c in pod_spec.get("containers") or []),
            ",".join(c.get("image", "") for c in pod_spec.get("containers") or []),
            ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"]


BUILTIN = {("", "pods"): (POD_COLUMNS, pod_cells), ("", "nodes"): (NODE_COLUMNS, node_cells),
           ("", "events"): (EVENT_COLUMNS, event_cells), ("events.k8s.io", "events"): (EVENT_COLUMNS, event_cells),
           ("batch", "jobs"): (JOB_COLUMNS, job_cells)}

# --- custom resources: the additionalPrinterColumns of their CRDs ------------------------------------------
# (name, type, jsonPath, priority), from:
#  kubernetes-sigs/kueue config/components/crd/bases/kueue.x-k8s.io_{workloads,clusterqueues,localqueues}.yaml at
#    ff69552e79ad21652c36caa97038382e55625cf7 (v1beta2; v1beta1 the same but ClusterQueue's .spec.cohort);
#    resourceflavors and topologies have none (NAME, AGE);
#  kubernetes-sigs/scheduler-plugins manifests/coscheduling/crd.yaml at 08079b777f337ff2fc01e41688d892b1d5b2fb2c;
#  volcano-sh/volcano config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml at 096235e19d45...;
#  kubernetes-sigs/jobset config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml at 01078527ec43....
_WL = [("Queue", "string", ".spec.queueName", 0), ("Reserved in", "string", ".status.admission.clusterQueue", 0),
       ("Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status", 0),
       ("Finished", "string", ".status.conditions[?(@.type=='Finished')].status", 0),
       ("Age", "date", ".metadata.creationTimestamp", 0)]
_CQ = [("Cohort", "string", ".spec.cohortName", 0), ("Strategy", "string", ".spec.queueingStrategy", 1),
       ("Pending Workloads", "integer", ".status.pendingWorkloads", 0),
       ("Admitted Workloads", "integer", ".status.admittedWorkloads", 1)]
CRD_COLUMNS: dict[tuple[str, str, str], list[tuple[str, str, str, int]]] = {
    ("kueue.x-k8s.io", "v1beta2", "workloads"): _WL,
    ("kueue.x-k8s.io", "v1beta1", "workloads"): _WL,
    ("kueue.x-k8s.io", "v1beta2", "clusterqueues"): _CQ,
    ("kueue.x-k8s.io", "v1beta1", "clusterqueues"): [("Cohort", "string", ".spec.cohort", 0), *_CQ[1:]],
    **{("kueue.x-k8s.io", v, "localqueues"): [
        ("ClusterQueue", "string", ".spec.clusterQueue", 0),
        ("Pending Workloads", "integer", ".status.pendingWorkloads", 0),
        ("Admitted Workloads", "integer", ".status.admittedWorkloads", 0)] for v in ("v1beta2", "v1beta1")},
    ("scheduling.x-k8s.io", "v1alpha1", "podgroups"): [
        ("Phase", "string", ".status.phase", 0), ("MinMember", "integer", ".spec.minMember", 0),
        ("Running", "string", ".status.running", 0), ("Succeeded", "string", ".status.succeeded", 0),
        ("Failed", "string", ".status.failed", 0), ("Age", "date", ".metadata.creationTimestamp", 0)],
    ("scheduling.volcano.sh", "v1beta1", "podgroups"): [
        ("STATUS", "string", ".status.phase", 0), ("minMember", "integer", ".spec.minMember", 0),
        ("RUNNINGS", "integer", ".status.running", 0), ("AGE", "date", ".metadata.creationTimestamp", 0),
        ("QUEUE", "string", ".spec.queue", 1)],
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"): [
        ("TerminalState", "string", ".status.terminalState", 0), ("Restarts", "string", ".status.restarts", 0),
        ("Completed", "string", '.status.conditions[?(@.type=="Completed")].status', 0),
        ("Suspended", "string", ".spec.suspend", 0), ("Age", "date", ".metadata.creationTimestamp", 0)],
}
DEFAULT_COLUMNS = [("Age", "date", ".metadata.creationTimestamp", 0)]

_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[\?\(@\.([A-Za-z0-9_]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]|\[(\d+|\*)\]")


def json_path(obj: Any, path: str) -> list[Any]:
    """The values of a printer-column JSONPath: ``.a.b``, ``[n]``, ``[*]`` and ``[?(@.key=='value')]`` filters."""
    cur, pos = [obj], 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            return []
        pos = m.end()
        nxt: list[Any] = []
        for v in cur:
            if m.group(1) is not None:
                if isinstance(v, dict) and m.group(1) in v:
                    nxt.append(v[m.group(1)])
            elif m.group(2) is not None:
                if isinstance(v, list):
                    nxt += [x for x in v if isinstance(x, dict) and str(x.get(m.group(2))) == m.group(3)]
            elif isinstance(v, list):
                nxt += v if m.group(4) == "*" else v[int(m.group(4)):int(m.group(4)) + 1]
        cur = nxt
    return cur


def _crd_cell(ctype: str, values: list[Any], now: datetime) -> Any:
    if not values or values[0] is None:
        return None
    v = values[0]
    if ctype == "date":
        return age(v, now) if isinstance(v, str) else None
    if ctype == "string":
        return str(v).lower() if isinstance(v, bool) else v if isinstance(v, str) else _json_text(v)
    return v


def _json_text(v: Any) -> str:
    import json

    return json.dumps(v, separators=(",", ":"))


def table(group: str, version: str, plural: str, objects: list[dict[str, Any]], now: datetime,
          resource_version: str, cont: str | None = None) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects``, each row carrying the object's metadata (includeObject=Metadata)."""
    if (group, plural) in BUILTIN:
        columns, cells = BUILTIN[(group, plural)]
        rows = [cells(o, now) for o in objects]
    else:
        spec = CRD_COLUMNS.get((group, version, plural), DEFAULT_COLUMNS)
        columns = [_NAME] + [_col(n, t, p) for n, t, _, p in spec]
        rows = [[(o.get("metadata") or {}).get("name")] + [_crd_cell(t, json_path(o, jp), now) for _, t, jp, _ in spec]
                for o in objects]
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if cont:
        meta["continue"] = cont
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns,
            "rows": [{"cells": r, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                             "metadata": o.get("metadata") or {}}}
                     for r, o in zip(rows, objects, strict=True)]}


def wants_table(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for a meta.k8s.io/v1 Table first (kubectl lists ``as=Table;v=v1`` before
    plain JSON)."""
    for part in (accept or "").split(","):
        params = {k.strip(): v.strip() for k, _, v in (p.partition("=") for p in part.split(";")[1:])}
        if params.get("as") == "Table":
            return params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", None)
        if part.strip().split(";")[0] in ("application/json", "*/*"):
            return False
    return False
