"""What a finding means and what to do about it, derived from its evidence.

``explain(finding)`` turns one row of ``marts.findings`` (or one object of ``diagnose --format
json``) into sentences with numbers and units, and next steps that name the objects involved
(ClusterQueue, node, GPU, pod, link) with the ``kubectl`` command that shows the same evidence in
the cluster (``check``) and, where one action is clearly right, the command that takes it (``act``).
Everything is read with ``.get``: a model that lacks a key loses a clause, not the finding.
The XID meanings come from NVIDIA's catalogue buckets (NVSentinel ``xiderrorsmapping.csv``, shipped
beside this module as ``xid_catalogue.csv``, sha256 8ddc083d…).
Commands are built with ``shlex.quote`` around every name from the cluster; renderers escape them again.
"""

from __future__ import annotations

import csv
import json
import shlex
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from reports import localtime

RACK_TOPOLOGY_HINT = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY_HINT = "kueue.x-k8s.io/podset-preferred-topology"
DEBUG = "kubectl debug node/{node} -it --profile=sysadmin --image=busybox -- chroot /host"
# NVIDIA's resolution buckets, in words an on-call engineer acts on.
BUCKETS = {
    "RESTART_BM": "reboot the node (bare metal)", "RESTART_VM": "restart the VM", "RESET_GPU": "reset the GPU",
    "RESTART_APP": "restart the application", "IGNORE": "nothing needed on the hardware",
    "CHECK_MECHANICALS": "check the node's power and cooling", "CHECK_UVM": "check the unified-memory driver",
    "UPDATE_SWFW": "update the driver / firmware", "UNEXPECTED_ERR_REPORT_ISSUE": "report it to NVIDIA",
    "WORKFLOW_XID_48": "reset the GPU and check its row remapping", "WORKFLOW_XID_45": "look at the XID before it",
    "WORKFLOW_NVLINK_ERR": "reset the GPU and check its NVLink", "WORKFLOW_NVLINK5_ERR": "check the NVLink fabric",
}


ACRONYMS = {w.lower(): w for w in ("GPU", "ECC", "DBE", "SBE", "NVLink", "GSP", "RPC", "MMU", "FIFO", "PCIe", "DRAM",
                                    "SRAM", "UVM", "BAR1", "PMU", "FB", "SW", "HW", "GR", "CE", "NVDEC", "NVENC")}


@dataclass
class Step:
    action: str  # what to do, naming the object
    check: str  # kubectl command that shows the same evidence
    act: str | None = None  # kubectl command that takes the action, when one is clearly right


@dataclass
class Explained:
    sentences: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def steps_json(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.steps]


@dataclass(frozen=True)
class Xid:
    code: int
    meaning: str
    bucket: str
    fatal: bool


@cache
def xid_catalogue() -> dict[int, Xid]:
    out: dict[int, Xid] = {}
    with (Path(__file__).with_name("xid_catalogue.csv")).open(newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if len(row) >= 4 and row[0].strip().isdigit():
                words = row[1].split(" / ")[0].removeprefix("ROBUST_CHANNEL_").lower().split("_")
                name = " ".join(ACRONYMS.get(w, w) for w in words)
                out[int(row[0])] = Xid(int(row[0]), name[:1].upper() + name[1:], row[2].strip(),
                                       row[3].strip() == "FATAL")
    return out


# --- formatting ---------------------------------------------------------------------------------


def q(v: Any) -> str:
    """A value from the cluster as one shell word."""
    return shlex.quote(str(v))


def _dt(v: Any) -> datetime | None:
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    if isinstance(v, str) and len(v) >= 16:
        try:
            d = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            return None
        return d if d.tzinfo else d.replace(tzinfo=UTC)
    return None


def clock(v: Any) -> str:
    d = _dt(v)
    return localtime.clock(d) if d else "an unknown time"


def duration(seconds: Any) -> str:
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "an unknown time"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def rate(v: Any, unit: str = "B/s") -> str:
    """Bytes/s (or another unit per second) with an SI prefix: 1.45e12 -> '1.45 TB/s'."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "?"
    for div, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g} {p}{unit}"
    return f"{x:.3g} {unit}"


def number(v: Any) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "?"
    return f"{x:,.0f}" if abs(x) >= 100 or x == int(x) else f"{x:.2g}"


def pct(ratio: Any) -> str:
    try:
        return f"{100 * float(ratio):.0f} %"
    except (TypeError, ValueError):
        return "?"


def _evidence(finding: dict[str, Any]) -> dict[str, Any]:
    ev = finding.get("evidence")
    if isinstance(ev, str):
        try:
            ev = json.loads(ev)
        except ValueError:
            return {}
    return ev if isinstance(ev, dict) else {}


def _list(v: Any) -> list[Any]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return []
    return v if isinstance(v, list) else []


def _obj(v: Any) -> dict[str, Any]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {}
    return v if isinstance(v, dict) else {}


def _throughput(tp: dict[str, Any]) -> str | None:
    if not tp or tp.get("min_ratio") is None:
        return None
    text = f"Throughput fell to {pct(tp.get('min_ratio'))} of its baseline"
    if tp.get("baseline") is not None:
        text += f" of {number(tp['baseline'])} items/s"
    if tp.get("mean_ratio") is not None:
        text += f" (mean {pct(tp['mean_ratio'])}"
        text += f", {tp['low_samples']} samples below {pct(tp.get('threshold_ratio'))})" \
            if tp.get("low_samples") is not None and tp.get("threshold_ratio") is not None else ")"
    return text + f" from {clock(tp.get('first_low_at'))}."


# The label each submitted kind's controller puts on its pods naming the job (docs/job-kinds.md). A RayJob's pods
# carry its RayCluster's name in ray.io/cluster; KubeRay adds the RayJob's own name as originated-from-cr-name.
KIND_POD_LABEL = {
    "RayCluster": "ray.io/cluster",
    "RayJob": "ray.io/originated-from-cr-name",
    "TrainJob": "jobset.sigs.k8s.io/jobset-name",
    "PyTorchJob": "training.kubeflow.org/job-name",
    "MPIJob": "training.kubeflow.org/job-name",
    "LeaderWorkerSet": "leaderworkerset.sigs.k8s.io/name",
}


def _pods_of(finding: dict[str, Any]) -> str:
    """A kubectl selector for the job's pods (the labels its controller sets)."""
    job, kind = finding.get("job"), str(finding.get("job_kind") or "")
    if kind in KIND_POD_LABEL:
        return f"-l {KIND_POD_LABEL[kind]}={q(job)}"
    if kind == "JobSet":
        return f"-l jobset.sigs.k8s.io/jobset-name={q(job)}"
    if kind == "Job":
        return f"-l batch.kubernetes.io/job-name={q(job)}"
    if finding.get("pod_group"):  # a scheduler-plugins PodGroup (kind PodGroup too when nothing else owns it)
        return f"-l scheduling.x-k8s.io/pod-group={q(finding['pod_group'])}"
    if kind == "PodGroup":  # plain pods grouped by Kueue's label, no gang object
        return f"-l kueue.x-k8s.io/pod-group-name={q(job)}"
    return f"-l job-name={q(job)}"


def _wl_condition(finding: dict[str, Any], condition: str) -> str:
    wl = finding.get("workload") or "WORKLOAD"
    return (f"kubectl get workload -n {q(finding.get('namespace'))} {q(wl)} -o jsonpath="
            + q(f'{{.status.conditions[?(@.type=="{condition}")].message}}'))


# --- per class ----------------------------------------------------------------------------------


def _gpu_fault(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    faults = [x for x in _list(ev.get("faults")) if isinstance(x, dict)]
    devices: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for x in faults:
        devices.setdefault((str(x.get("node")), str(x.get("gpu"))), []).append(x)
    cat = xid_catalogue()
    for (node, gpu), xs in devices.items():
        uuid = next((x.get("uuid") for x in xs if x.get("uuid")), None)
        dev = f"GPU {gpu}" + (f" ({uuid})" if uuid else "") + f" on {node}"
        buckets = []
        for x in xs:
            kind = x.get("kind")
            if kind == "xid":
                code = x.get("xid")
                info = cat.get(int(code)) if isinstance(code, int | float | str) and str(code).isdigit() else None
                meaning = f": {info.meaning} (NVIDIA: {BUCKETS.get(info.bucket, info.bucket)}, " \
                          f"{'fatal' if info.fatal else 'not fatal'})" if info else " (not in the XID catalogue)"
                out.sentences.append(f"{dev} reported XID {code} at {clock(x.get('first_at'))}{meaning}.")
                if info:
                    buckets.append(info.bucket)
            elif kind == "ecc_dbe":
                out.sentences.append(f"{dev} counted double-bit ECC / row-remap failures from "
                                     f"{clock(x.get('first_at'))} ({x.get('samples')} samples).")
                buckets.append("WORKFLOW_XID_48")
            elif kind == "gpu_missing":
                out.sentences.append(f"{dev} stopped reporting at {clock(x.get('first_at'))} while the node's other "
                                     f"GPUs went on ({x.get('samples')} minutes seen before).")
        what = BUCKETS.get(buckets[0], buckets[0]) if buckets else "have the GPU checked"
        out.steps.append(Step(
            f"Cordon and drain {node}: {dev} is faulty ({what}); then restart "
            f"{f.get('namespace')}/{f.get('job')} on other nodes.",
            f"{DEBUG.format(node=q(node))} nvidia-smi -q -i {q(uuid if uuid else gpu)}",
            f"kubectl cordon {q(node)} && kubectl drain {q(node)} --ignore-daemonsets --delete-emptydir-data"))


def _link(x: dict[str, Any]) -> str:
    dev = str(x.get("device") or "")
    if x.get("signal") == "ib_errors" or "/" in dev:
        return f"InfiniBand port {dev}"
    if dev.startswith("nvlink"):
        return f"NVLink {dev.removeprefix('nvlink')}"
    return f"NVLink of GPU {dev}" if dev else "NVLink"


SIGNAL_NAMES = {"nvlink_bw": "NVLink", "ib_bw": "InfiniBand", "pcie_bw": "PCIe"}


def _interconnect(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    tp = _throughput(_obj(ev.get("throughput")))
    nodes: dict[str, list[str]] = {}
    for d in (x for x in _list(ev.get("bandwidth_drops")) if isinstance(x, dict)):
        node = str(d.get("node"))
        nodes.setdefault(node, []).append(SIGNAL_NAMES.get(str(d.get("signal")), str(d.get("signal"))))
        out.sentences.append(
            f"{SIGNAL_NAMES.get(str(d.get('signal')), d.get('signal'))} bandwidth on {node} fell from "
            f"{rate(d.get('baseline'))} (its own baseline) to a median of {rate(d.get('dip_median'))} "
            f"({pct(d.get('ratio'))}), lowest {rate(d.get('min_value'))} at {clock(d.get('at'))}.")
    errs = [x for x in _list(ev.get("link_errors")) if isinstance(x, dict)]
    by_node: dict[str, list[dict[str, Any]]] = {}
    for x in errs:
        by_node.setdefault(str(x.get("node")), []).append(x)
    for node, xs in by_node.items():
        links = ", ".join(_link(x) for x in xs[:8]) + (f" and {len(xs) - 8} more" if len(xs) > 8 else "")
        top = max((float(x.get("max_rate") or 0) for x in xs), default=0.0)
        first = min((str(x.get("at")) for x in xs if x.get("at")), default=None)
        out.sentences.append(f"Link error counters rose on {node} ({links}), up to {top:.3g} errors/s, "
                             f"from {clock(first)}.")
        nodes.setdefault(node, []).append("link errors")
    for x in (p for p in _list(ev.get("ports_down")) if isinstance(p, dict)):
        node = str(x.get("node"))
        out.sentences.append(f"InfiniBand port {x.get('device')} on {node} left ACTIVE (state {x.get('state')}) "
                             f"at {clock(x.get('at'))}.")
        nodes.setdefault(node, []).append(f"port {x.get('device')}")
    if tp:
        out.sentences.insert(0, tp)
    for node, what in nodes.items():
        ib = [x for x in errs + _list(ev.get("ports_down")) if isinstance(x, dict) and x.get("node") == node
              and "/" in str(x.get("device") or "")]
        if ib:
            dev, _, port = str(ib[0].get("device")).partition("/")
            check = f"{DEBUG.format(node=q(node))} cat /sys/class/infiniband/{q(dev)}/ports/{q(port or '1')}/state"
        else:
            check = f"{DEBUG.format(node=q(node))} nvidia-smi nvlink -e"
        out.steps.append(Step(
            f"Cordon {node} and have its interconnect checked ({', '.join(dict.fromkeys(what))}); restart "
            f"{f.get('namespace')}/{f.get('job')} on healthy nodes.", check, f"kubectl cordon {q(node)}"))


def _preemption(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    evictions = [x for x in _list(ev.get("evictions")) if isinstance(x, dict)]
    pre = _obj(ev.get("preemptor"))
    first = evictions[0] if evictions else {}
    by = f"{pre.get('namespace')}/{pre.get('job')} (Workload {pre.get('workload')})" if pre.get("job") else None
    cause = ev.get("cause")
    cq = ev.get("cluster_queue")
    if first.get("source") == "pod_condition":
        out.sentences.append(f"kube-scheduler preempted its pods at {clock(first.get('at'))} "
                             f"(DisruptionTarget {first.get('reason')}) for a higher-priority pod.")
    else:
        out.sentences.append(
            f"Kueue evicted it at {clock(first.get('at'))}" + (f" to admit {by}" if by else "")
            + (f" in ClusterQueue {cq}" if cq else "") + (f", because of {cause}" if cause else "")
            + (f" (reason {first.get('reason')})" if first.get("reason") else "") + ".")
    restarted = _dt(f.get("ended_at"))
    out.sentences.append(f"It ran again from {clock(restarted)}." if restarted else "It has not run again yet.")
    if by:
        action = (f"Nothing is broken: {by} has the higher priority. If "
                  f"{f.get('namespace')}/{f.get('job')} must not be preempted, give it a higher "
                  "WorkloadPriorityClass" + (f" or move it out of ClusterQueue {cq}'s LowerPriority preemption"
                                             if cq else "") + ".")
    else:
        action = (f"Find the higher-priority pod that displaced {f.get('namespace')}/{f.get('job')}; if the job "
                  "must not be preempted, raise its PriorityClass.")
    check = _wl_condition(f, "Evicted") if f.get("workload") else \
        f"kubectl get events -n {q(f.get('namespace'))} --field-selector reason=Preempted"
    out.steps.append(Step(action, check))


def _admission_config(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    """A queue or flavor set up so that nothing can be admitted (evidence.cause_kind 'configuration')."""
    ns, cause, msg = f.get("namespace"), str(ev.get("cause") or ""), str(ev.get("message") or "")
    cq, lq = ev.get("cluster_queue"), ev.get("local_queue")
    out.sentences.append(f"Waiting {duration(ev.get('wait_s'))} for admission (threshold "
                         f"{duration(ev.get('threshold_s'))}) because of configuration, not a shortage: "
                         f"{cause.replace('_', ' ')}" + (f" ({ev.get('reason')}: {msg})" if msg else "") + ".")
    flavor = msg.split("flavor ", 1)[1].split()[0] if "flavor " in msg else None
    # Which queue object the message names (int_admission writes "ClusterQueue <name>: ..." / "LocalQueue ...").
    on_cq = not msg.startswith("LocalQueue ")
    if msg.startswith("ClusterQueue "):
        cq = msg.split()[1].rstrip(":")
    if cause == "missing_local_queue":
        step = Step(f"Create LocalQueue {lq} in namespace {ns} (pointing at a ClusterQueue), or set the job's "
                    "kueue.x-k8s.io/queue-name label to a LocalQueue that exists.",
                    f"kubectl get localqueues -n {q(ns)}")
    elif cause == "missing_cluster_queue":
        step = Step(f"LocalQueue {lq} points at a ClusterQueue that does not exist: create it or point {lq} at one "
                    "that does.", f"kubectl get localqueue -n {q(ns)} {q(lq)} -o jsonpath={q('{.spec.clusterQueue}')}")
    elif cause in ("queue_inactive", "queue_stopped") and on_cq:
        fix = ("resume it (spec.stopPolicy None) if the stop was not meant" if cause == "queue_stopped"
               else "fix what its Active condition names (a missing ResourceFlavor or AdmissionCheck)")
        step = Step(f"ClusterQueue {cq} admits nothing: {fix}.",
                    f"kubectl get clusterqueue {q(cq)} -o jsonpath="
                    + q('{.spec.stopPolicy} {.status.conditions[?(@.type=="Active")].message}'))
    elif cause in ("queue_inactive", "queue_stopped"):
        fix = ("resume it (spec.stopPolicy None) if the stop was not meant" if cause == "queue_stopped"
               else "fix what its Active condition names")
        step = Step(f"LocalQueue {lq} in namespace {ns} admits nothing: {fix}.",
                    f"kubectl get localqueue -n {q(ns)} {q(lq)} -o jsonpath="
                    + q('{.spec.stopPolicy} {.status.conditions[?(@.type=="Active")].message}'))
    elif cause == "no_matching_flavor":
        step = Step(f"No ResourceFlavor of ClusterQueue {cq} matches {ns}/{f.get('job')}'s pods"
                    + (f" (flavor {flavor})" if flavor else "") + ": align the job's nodeSelector / affinity / "
                    "tolerations with the flavor's nodeLabels and tolerations, or add a flavor that matches.",
                    f"kubectl get resourceflavor {q(flavor)} -o yaml" if flavor
                    else "kubectl get resourceflavors -o yaml")
    else:  # misconfigured, admission_gated: Kueue's own message says what
        step = Step(f"Fix what Kueue names for {ns}/{f.get('job')}: {msg or cause}.", _wl_condition(f, "QuotaReserved"))
    out.steps.append(step)


def _admission_quota(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    if ev.get("cause_kind") == "configuration":
        _admission_config(f, ev, out)
        return
    qd = _obj(ev.get("quota"))
    cq, res, flavor, short = ev.get("cluster_queue"), qd.get("resource"), qd.get("flavor"), qd.get("short")
    waited = f"Waiting {duration(ev.get('wait_s'))} for admission (threshold {duration(ev.get('threshold_s'))})"
    where = f" in ClusterQueue {cq}" if cq else ""
    # Names the evidence lacks (an older Kueue's message, a queue not seen yet) are left out, never printed as "None".
    queue = f"ClusterQueue {cq}" if cq else "its ClusterQueue"
    in_flavor = f" in flavor {flavor}" if flavor else ""
    if res and short is not None:
        out.sentences.append(f"{waited}{where}: {number(short)} {res} short{in_flavor}"
                             + (f" (nominal quota {number(qd['nominal_quota'])})"
                                if qd.get("nominal_quota") is not None else "") + ".")
    else:
        said = ": ".join(str(ev[k]) for k in ("reason", "message") if ev.get(k))
        out.sentences.append(f"{waited}{where}" + (f": {said}." if said else "."))
    never = "maximum capacity" in str(ev.get("message") or "") or ev.get("reason") == "ExceedsMaxQuota"
    cohort, unused, limit = qd.get("cohort"), qd.get("cohort_unused"), qd.get("borrowing_limit")
    if cohort is None:
        borrow = f"{cq or 'Its ClusterQueue'} is in no cohort, so it cannot borrow."
    elif unused is not None and short is not None and float(unused) >= float(short) \
            and (limit is None or float(limit) >= float(short)):
        borrow = f"Cohort {cohort} has {number(unused)} {res} unused: borrowing could cover it."
    else:
        borrow = (f"Cohort {cohort} has {number(unused) if unused is not None else 'no known'} {res or ''} unused"
                  + (f" and a borrowing limit of {number(limit)}" if limit is not None else "")
                  + ": not enough to cover it.")
    out.sentences.append(borrow)
    need = f"{number(short)} {res}" if res and short is not None else "the missing quota"
    if never:
        action = (f"It can never be admitted as it is: shrink {f.get('namespace')}/{f.get('job')} by {need} or raise "
                  f"the nominalQuota of {res or 'the resource'}{in_flavor} of {queue} by {need}.")
    elif cohort is not None and "could cover" in borrow:
        action = f"Check why {queue} does not borrow {need} from cohort {cohort} (its borrowingLimit)."
    else:
        action = (f"Free {need}{in_flavor} in {queue}, raise its nominalQuota by {need}, or put it in a cohort with "
                  f"spare {res or 'quota'}.")
    out.steps.append(Step(action, _wl_condition(f, "QuotaReserved")))


def _admission_topology(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    t = _obj(ev.get("topology"))
    level = t.get("level") or ev.get("missing_level")
    cq = ev.get("cluster_queue")
    out.sentences.append(f"Waiting {duration(ev.get('wait_s'))} for admission (threshold "
                         f"{duration(ev.get('threshold_s'))})" + (f" in ClusterQueue {cq}." if cq else "."))
    if ev.get("missing_level"):
        out.sentences.append(f"It requests topology level {ev['missing_level']}, which no node carries as a label.")
        action = (f"Label the nodes with {ev['missing_level']} or change the job's {RACK_TOPOLOGY_HINT} to a "
                  "level the nodes carry.")
    else:
        fit, want = t.get("fit_pods"), t.get("want_pods")
        if fit is not None and want is not None:
            out.sentences.append(f"Kueue can place only {fit} of its {want} pods within one {level} domain.")
        if t.get("largest_free_domain"):
            out.sentences.append(f"The largest free {level} domain now is {t['largest_free_domain']} with "
                                 f"{number(t.get('largest_free_gpus'))} free GPUs (at most "
                                 f"{number(t.get('largest_free_node_gpus'))} on one node).")
        per_pod, node_gpus = t.get("gpus_per_pod"), t.get("largest_node_gpus")
        if per_pod is not None:
            out.sentences.append(f"Each pod asks for {number(per_pod)} GPUs"
                                 + (f"; the largest node has {number(node_gpus)}." if node_gpus is not None else "."))
        if per_pod is not None and node_gpus is not None and float(per_pod) > float(node_gpus):
            action = (f"No node can ever hold one pod of {f.get('namespace')}/{f.get('job')}: each asks for "
                      f"{number(per_pod)} GPUs and the largest node has {number(node_gpus)}; split each pod's "
                      f"GPUs over {-(-int(float(per_pod)) // max(int(float(node_gpus)), 1))} pods.")
        elif fit == 0:
            action = (f"No {level} domain can hold even one pod: check the pods' GPU request against the "
                      f"{number(t.get('largest_free_node_gpus'))} GPUs a node has free, or free a whole domain.")
        elif fit is None or not level:  # the message named no counts (an older Kueue's): no numbers to give
            action = (f"Compare {f.get('namespace')}/{f.get('job')}'s {RACK_TOPOLOGY_HINT} with the GPUs free in each "
                      "domain of that level, relax it to a wider level, or free GPUs in one domain.")
        else:
            action = (f"Shrink {f.get('namespace')}/{f.get('job')} to {fit} pods, relax {RACK_TOPOLOGY_HINT}: "
                      f"{level} to {PREFERRED_TOPOLOGY_HINT} or a wider level, or free GPUs in "
                      f"{t.get('largest_free_domain') or 'one domain'}.")
    out.steps.append(Step(action, _wl_condition(f, "QuotaReserved")))


def _ray_gang(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    """The gang inside a Ray cluster (int_ray_placement): the pods all run, a placement group waits; the model's
    next_step names the worker group that cannot scale, chosen as it chooses (FailedScheduling first, then
    maxReplicas, by group name)."""
    ns = f.get("namespace")
    n = ev.get("ray_placement_groups_pending")
    out.sentences.append(
        f"{number(n)} Ray placement group{'s' if _num(n) > 1 else ''} PENDING for {duration(ev.get('pending_s'))} "
        f"(timeout {duration(ev.get('timeout_s'))}) with {ev.get('pods_running', '?')} pods running "
        f"(gang size {ev.get('gang_size', '?')}).")
    groups = sorted((g for g in _list(ev.get("worker_groups")) if isinstance(g, dict)),
                    key=lambda g: str(g.get("group")))
    if groups:
        out.sentences.append("Worker groups: " + "; ".join(
            f"{g.get('group')} {g.get('running', 0)} running, {g.get('pending', 0)} Pending"
            + (f" (at most {number(g['max_replicas'])})" if g.get("max_replicas") is not None else "")
            for g in groups) + ".")
    stuck = next((g for g in groups if _num(g.get("unschedulable")) > 0), None) or next(
        (g for g in groups if g.get("at_max")), None)
    action = str(ev.get("next_step") or "Check the Ray autoscaler and the placement group's bundles.")
    action = action[:1].upper() + action[1:] + ("" if action.endswith(".") else ".")
    selector = _pods_of(f) + (f",ray.io/group={q(stuck.get('group'))}" if stuck else "")
    out.steps.append(Step(action, f"kubectl get pods -n {q(ns)} {selector} -o wide"))


def _gang(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    if "ray_placement_groups_pending" in ev:
        _ray_gang(f, ev, out)
        return
    ns = f.get("namespace")
    out.sentences.append(
        f"{ev.get('pods_running', '?')} of {ev.get('gang_size', '?')} gang members running after "
        f"{duration(ev.get('assembly_s'))} (timeout {duration(ev.get('timeout_s'))})"
        + (f"; PodGroup phase {ev['pod_group_phase']}" if ev.get("pod_group_phase") else "")
        + (f"; {ev['idle_gpus']} GPUs held idle by the running members" if ev.get("idle_gpus") else "") + ".")
    pods = [p for p in _list(ev.get("unschedulable_pods")) if isinstance(p, dict)]
    reasons = _obj(ev.get("failed_scheduling"))
    if pods:
        names = ", ".join(str(p.get("pod")) for p in pods[:5]) + (f" and {len(pods) - 5} more" if len(pods) > 5 else "")
        out.sentences.append(f"Unschedulable: {names}.")
    if reasons:
        parts = [f"{n} nodes: {r}" if isinstance(n, int | float) and n else str(r)
                 for r, n in sorted(reasons.items(), key=lambda kv: -(kv[1] or 0))]
        out.sentences.append("The scheduler says " + "; ".join(parts) + ".")
    closest = [c for c in _list(ev.get("closest_nodes")) if isinstance(c, dict)]
    failing = [c for c in _list(ev.get("nodes_failing_selector")) if isinstance(c, dict)]
    if closest:
        out.sentences.append("Closest nodes for the pods' selector, affinity and tolerations: "
                             + "; ".join(_node_gap(c) for c in closest) + ".")
    no_match = ev.get("nodes_matching_selector") == 0
    if no_match and failing:
        out.sentences.append("No node matches the pods' node selector / required affinity: " + "; ".join(
            f"{c.get('node')} lacks {', '.join(map(str, _list(c.get('missing')))) or '?'}" for c in failing) + ".")
    text = " ".join(str(r).lower() for r in reasons) + " " + " ".join(str(p.get("message") or "") for p in pods)
    first = pods[0].get("pod") if pods else None
    target = f"pod {first}" if first else f"{ns}/{f.get('job')}"
    best = closest[0] if closest else {}
    taints = [str(t) for t in _list(best.get("untolerated_taints"))]
    short = _num(best.get("gpus_needed")) > _num(best.get("free_gpus"))
    if no_match:
        lacks = ", ".join(map(str, _list(failing[0].get("missing")))) if failing else ""
        action = (f"No node matches {target}'s node selector / affinity"
                  + (f" ({failing[0].get('node')} lacks {lacks})" if lacks else "")
                  + ": fix the selector or label nodes.")
    elif best and (taints or best.get("cordoned") or best.get("not_ready")):
        why = ", ".join(([f"taint {', '.join(taints)} not tolerated"] if taints else [])
                        + (["cordoned"] if best.get("cordoned") else [])
                        + (["not Ready"] if best.get("not_ready") else []))
        fix = ("add the toleration to the pods or remove the taint" if taints else
               "uncordon it if its maintenance is over" if best.get("cordoned") else "bring it back to Ready")
        action = (f"{target} targets tainted nodes: " if taints else f"{target}: ") \
            + f"{best.get('node')} comes closest ({why}" + (f", {_node_gpus(best)}" if short else "") + f"): {fix}."
    elif best and short:
        action = (f"{target} waits for GPUs; {best.get('node')} comes closest with {_node_gpus(best)}: "
                  "free GPUs or shrink the gang.")
    elif best:
        # The objects say a node fits now, so the scheduler's word is older than the data or something else holds
        # the pod back (its gang's other members, Kueue's topology assignment, a scheduling gate).
        said = max(reasons.items(), key=lambda kv: kv[1] if isinstance(kv[1], int | float) else 0)[0] if reasons \
            else str(pods[0].get("message") or "") if pods else ""
        action = (f"{best.get('node')} has room for {target} now ({_node_gpus(best)}, selector, affinity and "
                  "tolerations match), yet it is not bound" + (f" (the scheduler last said: {said})" if said else "")
                  + ": watch whether it binds; if not, look at "
                  + (f"the PodGroup {f['pod_group']} status, " if f.get("pod_group") else "")
                  + "the Workload's admission and the scheduler's events.")
    elif "taint" in text and "insufficient" not in text:
        action = f"{target} targets tainted nodes: add the toleration or change its node selector."
    elif "affinity" in text or "selector" in text:
        action = f"No node matches {target}'s node selector / affinity: fix the selector or label nodes."
    elif "insufficient" in text:
        action = f"{target} waits for GPUs: free GPUs or shrink the gang."
    else:
        action = f"Look at why {target} is not bound (PodGroup {f.get('pod_group') or '-'} status, events)."
    if ev.get("idle_gpus"):
        action += f" Meanwhile {ev['idle_gpus']} GPUs sit idle: delete the partial gang if it cannot complete soon."
    check = (f"kubectl get events -n {q(ns)} --field-selector "
             + q(f"involvedObject.name={first},reason=FailedScheduling")) if first else \
        f"kubectl get pods -n {q(ns)} {_pods_of(f)} -o wide"
    out.steps.append(Step(action, check))


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _node_gpus(c: dict[str, Any]) -> str:
    text = f"{number(c.get('free_gpus'))} of {number(c.get('gpus'))} GPUs free"
    return text + (f" ({number(c.get('gpus_needed'))} needed)"
                   if _num(c.get("gpus_needed")) > _num(c.get("free_gpus")) else "")


def _node_gap(c: dict[str, Any]) -> str:
    """``gpu-node-007: 4 of 8 GPUs free (8 needed), taint nvidia.com/maintenance:NoSchedule not tolerated``."""
    parts = [_node_gpus(c)] + [f"taint {t} not tolerated" for t in _list(c.get("untolerated_taints"))]
    parts += (["cordoned"] if c.get("cordoned") else []) + (["not Ready"] if c.get("not_ready") else [])
    return f"{c.get('node')}: " + ", ".join(parts)


def _misplacement(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    level, doms, need = ev.get("level"), ev.get("domains"), ev.get("needed_domains")
    values = ", ".join(map(str, _list(ev.get("domain_values"))))
    out.sentences.append(f"Its pods span {doms} {level} domains ({values}) where {need} would hold it.")
    tp = _throughput(_obj(ev.get("throughput")))
    if tp:
        out.sentences.append(tp)
    how = ev.get("requested_as")
    if how == "preferred":
        action = (f"Kueue only preferred one {level} ({PREFERRED_TOPOLOGY_HINT}); set {RACK_TOPOLOGY_HINT}: "
                  f"{level} on the pod template so it waits for {need} domain(s) instead of spreading.")
    elif how == "required":
        action = (f"The job required {level} yet spans {doms} domains: compare Kueue's topologyAssignment "
                  f"({ev.get('assigned_domains') or '?'} domains) with the nodes' {level} labels.")
    else:
        action = (f"The job asked for no topology: set {RACK_TOPOLOGY_HINT}: {level} on the pod template "
                  f"(Kueue topology-aware scheduling) so its {len(f.get('nodes') or [])} nodes share one domain.")
    nodes = " ".join(q(n) for n in (f.get("nodes") or []))
    out.steps.append(Step(action, f"kubectl get nodes {nodes} -L {q(level)}" if nodes and level else
                          f"kubectl get pods -n {q(f.get('namespace'))} {_pods_of(f)} -o wide"))


def _slowdown(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    tp = _throughput(_obj(ev.get("throughput")))
    if tp:
        out.sentences.append(tp)
    nodes = ", ".join(map(str, f.get("nodes") or [])) or "its nodes"
    out.sentences.append(f"No queue, gang, placement, interconnect or GPU signal on {nodes}.")
    since = _dt(_obj(ev.get("throughput")).get("first_low_at") or f.get("started_at"))
    out.steps.append(Step(
        f"Look inside {f.get('namespace')}/{f.get('job')}: its logs from {clock(since)} (data loading, checkpoints, "
        "a straggling rank).",
        f"kubectl logs -n {q(f.get('namespace'))} {_pods_of(f)} --prefix --tail=200"
        + (f" --since-time={since:%Y-%m-%dT%H:%M:%SZ}" if since else "")))


def _node_failure(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    job = f"{f.get('namespace')}/{f.get('job')}"
    for x in (x for x in _list(ev.get("losses")) if isinstance(x, dict)):
        node, how = x.get("node"), x.get("how")
        pods = [p for p in _list(x.get("pods")) if isinstance(p, dict)]
        took = ", ".join(f"{p.get('pod')} ({p.get('reason') or p.get('phase')})" for p in pods[:5])
        back = f"; back at {clock(x.get('recovered_at'))}" if x.get("recovered_at") else "; not back yet"
        if how == "not_ready":
            out.sentences.append(
                f"Node {node} went {'unreachable' if x.get('ready') == 'Unknown' else 'NotReady'} at "
                f"{clock(x.get('lost_at'))} ({x.get('reason')}: {x.get('message')})"
                + (f"; it took {took}" if took else f"; the job's pods there served nothing for "
                   f"{duration(ev.get('node_lost_threshold_s'))} or more") + f"{back}.")
            action = (f"Replace or repair {node} (its kubelet stopped: check the machine, its container runtime and "
                      f"network); keep it cordoned until then, and restart {job} on healthy nodes if it did not "
                      "recover by itself.")
            check = f"kubectl describe node {q(node)}"
            act = f"kubectl cordon {q(node)}"
        elif how == "drain":
            out.sentences.append(f"Node {node} was {'cordoned and ' if x.get('cordoned') else ''}drained at "
                                 f"{clock(x.get('lost_at'))}: the Eviction API took {took or 'the job’s pods'}{back}.")
            action = (f"Someone or something (kubectl drain, an autoscaler, a node-maintenance controller) evicted "
                      f"{job}'s pods from {node}: if the maintenance is over, uncordon it; protect the job with a "
                      "PodDisruptionBudget if evicting it mid-run was not meant.")
            check = f"kubectl get events -A --field-selector involvedObject.name={q(node)}"
            act = f"kubectl uncordon {q(node)}"
        elif how == "gpus_unhealthy":
            conds = [c for c in _list(x.get("health_conditions")) if isinstance(c, dict)]
            out.sentences.append(
                f"Node {node} has {x.get('gpus_allocatable')} of {x.get('gpus_capacity')} GPUs allocatable since "
                f"{clock(x.get('lost_at'))} (the device plugin marked GPUs unhealthy) while {job} holds "
                f"{x.get('gpus_held')} there"
                + (f"; {conds[0].get('type')}: {conds[0].get('message')}" if conds else "") + ".")
            action = (f"Drain {node} and have its GPU replaced or reset; restart {job} on healthy nodes (a restart on "
                      f"{node} fails: the device is unhealthy).")
            check = f"kubectl get node {q(node)} -o jsonpath=" + q("{.status.allocatable} {.status.conditions}")
            act = f"kubectl drain {q(node)} --ignore-daemonsets --delete-emptydir-data"
        elif how == "node_ended":
            out.sentences.append(f"Node {node} ended the job's pods at {clock(x.get('lost_at'))}: {took} "
                                 f"({x.get('message') or x.get('reason')}).")
            action = (f"Find why {node} ended {job}'s pods (node-pressure eviction, shutdown, the node object gone) "
                      "and fix the node before it runs the job again.")
            check = f"kubectl describe node {q(node)}"
            act = None
        else:
            out.sentences.append(f"Kueue evicted the Workload at {clock(x.get('lost_at'))}: {x.get('message')}.")
            action = f"Kueue found the nodes of {job} unhealthy: repair or replace them; Kueue requeues the job."
            check = _wl_condition(f, "Evicted")
            act = None
        out.steps.append(Step(action, check, act))


def _gpu_throttle(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    tp = _throughput(_obj(ev.get("throughput")))
    if tp:
        out.sentences.append(tp)
    for g in (g for g in _list(ev.get("throttled_gpus")) if isinstance(g, dict)):
        node, gpu, uuid = g.get("node"), g.get("gpu"), g.get("uuid")
        reasons = ", ".join(map(str, _list(g.get("reasons"))))
        out.sentences.append(
            f"GPU {gpu}{f' ({uuid})' if uuid else ''} on {node} ran at {number(g.get('sm_clock'))} MHz against "
            f"{number(g.get('peers_clock'))} MHz on the job's other GPUs ({pct(g.get('clock_ratio'))})"
            + (f", up to {number(g.get('gpu_temp'))} C" if g.get("gpu_temp") is not None else "")
            + (f", reasons {reasons}" if reasons else "") + f", from {clock(g.get('first_at'))}; a synchronous job "
            "runs at the pace of its slowest GPU.")
        thermal = "thermal" in reasons or (g.get("thermal_throttle") or 0) > 0 or (g.get("gpu_temp") or 0) >= 85
        out.steps.append(Step(
            f"Drain {node} and reset GPU {gpu}" + (" and check the node's cooling (fans, airflow, inlet temperature)"
                                                    if thermal else " and check its power limit and power supply")
            + f"; restart {f.get('namespace')}/{f.get('job')} on other nodes meanwhile.",
            f"{DEBUG.format(node=q(node))} nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {q(uuid or gpu)}",
            f"kubectl cordon {q(node)} && kubectl drain {q(node)} --ignore-daemonsets --delete-emptydir-data"))


def _startup(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    ns, first = f.get("namespace"), _obj(ev.get("first_pod"))
    pod, reason, msg, image = first.get("pod"), str(first.get("reason") or ""), str(first.get("message") or ""), \
        first.get("image")
    if pod:
        out.sentences.append(
            f"{ev.get('pods_stuck')} pod(s) bound to nodes have not started their containers; {pod} waits "
            f"{duration(first.get('stuck_s'))} after binding at {clock(first.get('bound_at'))}: "
            f"{reason or 'no reason given'}" + (f" ({msg})" if msg else "") + ".")
    if ev.get("gpus_held"):
        out.sentences.append(f"They hold {ev['gpus_held']} GPUs idle.")
    k = _obj(ev.get("kueue_eviction"))
    if k:
        out.sentences.append(f"Kueue evicted the Workload at {clock(k.get('at'))} ({k.get('reason')}: "
                             f"{k.get('message')}) and requeues it: it will fail the same way until fixed.")
    check = f"kubectl describe pod -n {q(ns)} {q(pod)}" if pod else _wl_condition(f, "Evicted")
    text = f"{reason} {msg}".lower()
    if "registry is unavailable" in text or "registryunavailable" in text:
        registry = str(image or "").split("/", 1)[0] or "the registry"
        action = (f"The registry {registry} does not answer the node: check the registry and the node's network path "
                  "to it (DNS, proxy, firewall); the kubelet retries the pull by itself once it answers.")
    elif "image" in text or "pull" in text:
        action = (f"Fix the image reference {image or ''} (name, tag, registry) or the pull secret "
                  f"(imagePullSecrets of the pod or its ServiceAccount) so the node can pull it.")
        if pod:
            check += f" && kubectl get pod -n {q(ns)} {q(pod)} -o jsonpath=" + q("{.spec.imagePullSecrets}")
    elif "secret" in text or "configmap" in text or "couldn't find key" in text:
        action = f"Create the missing Secret / ConfigMap (or key) the pod names: {msg}; then delete the pod."
    elif "mount" in text or "attach" in text or "volume" in text:
        action = "Fix the volume the pod cannot mount (the PVC, its storage class, or a ConfigMap / Secret volume)."
    elif "sandbox" in text:
        action = "The node cannot create the pod's sandbox (CNI, container runtime): check the node's runtime."
    elif first.get("container") and reason in ("Error", "OOMKilled"):
        action = f"The init container {first.get('container')} fails: read its logs and fix it."
    else:
        action = f"Look at why {pod or f.get('job')}'s containers do not start: its events and the kubelet's logs."
    out.steps.append(Step(action, check, f"kubectl delete pod -n {q(ns)} {q(pod)}" if pod and first.get("immediate")
                          else None))


def _crash(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    ns, first = f.get("namespace"), _obj(ev.get("first_failure"))
    pod, code, reason = first.get("pod"), first.get("exit_code"), first.get("reason")
    if pod:
        who = f"Rank {first['rank']} (pod {pod})" if first.get("rank") is not None else f"Pod {pod}"
        what = (f"was killed by the kernel for running out of memory (OOMKilled, exit code {code})"
                if reason == "OOMKilled" else f"exited with code {code}" + (f" ({reason})" if reason else ""))
        out.sentences.append(f"{who} container {first.get('container')} {what} at {clock(first.get('at'))} on "
                             f"{first.get('node')}; it was the first to fail.")
    if ev.get("failures"):
        out.sentences.append(f"{ev['failures']} container failure(s) in all, exit codes "
                             f"{', '.join(map(str, _list(ev.get('exit_codes'))))}; {ev.get('restarts') or 0} restarts.")
    if ev.get("crash_looping"):
        out.sentences.append(f"{ev['crash_looping']} pod(s) in CrashLoopBackOff ({ev.get('crash_loop_message')}).")
    ctl = _obj(ev.get("controller"))
    if ctl.get("reason"):
        out.sentences.append(f"The {ctl.get('kind')} gave up at {clock(ctl.get('at'))}: {ctl.get('reason')} "
                             f"({ctl.get('message')}).")
    elif ctl.get("jobset_restarts"):
        out.sentences.append(f"The JobSet recreated its Jobs {ctl['jobset_restarts']} times.")
    logs = (f"kubectl logs -n {q(ns)} {q(pod)} -c {q(first.get('container') or 'trainer')} --previous"
            if pod else f"kubectl logs -n {q(ns)} {_pods_of(f)} --prefix --tail=200")
    if reason == "OOMKilled" or ev.get("oom_kills"):
        action = (f"Raise the memory limit of {pod or 'the pods'} (or lower the batch size / activation memory): the "
                  "kernel killed it for exceeding its limit.")
    elif code in (134, -6) or code == 1:
        action = (f"Read {pod or 'the failed rank'}'s last logs (the traceback; an NCCL watchdog timeout means a "
                  "collective hung before it crashed) and fix the error before restarting.")
    else:
        action = f"Read {pod or 'the failed rank'}'s logs from before it exited and fix the error before restarting."
    out.steps.append(Step(action, logs))


def _stalled(f: dict[str, Any], ev: dict[str, Any], out: Explained) -> None:
    ns = f.get("namespace")
    how = "reported at about 0" if ev.get("how") == "reported_zero" else "stopped reporting"
    out.sentences.append(
        f"Throughput {how} from {clock(ev.get('stalled_from'))} for {duration(ev.get('stalled_s'))} (last progress "
        f"{number(ev.get('last_value'))} items/s at {clock(ev.get('last_progress_at'))}, baseline "
        f"{number(ev.get('baseline'))}) while {ev.get('pods_running')}/{ev.get('gang_size')} pods stay Running.")
    if ev.get("gpu_util") is not None:
        out.sentences.append(f"Its GPUs were {number(ev['gpu_util'])} % busy meanwhile"
                             + (" (a hung NCCL collective keeps them spinning)." if (ev["gpu_util"] or 0) > 80
                                else "."))
    out.steps.append(Step(
        f"Dump the stuck ranks' Python stacks (py-spy dump) to see which collective or data step they wait in; look "
        f"for NCCL watchdog and timeout lines in the logs; restart {ns}/{f.get('job')} from its last checkpoint if it "
        "is hung.",
        f"kubectl logs -n {q(ns)} {_pods_of(f)} --prefix --tail=100 | grep -iE 'nccl|watchdog|timeout'"))


CLASSES = {"gpu_fault": _gpu_fault, "node_failure": _node_failure, "interconnect_degradation": _interconnect,
           "gpu_throttle": _gpu_throttle, "preemption": _preemption, "admission_quota": _admission_quota,
           "admission_topology": _admission_topology, "gang_assembly": _gang, "startup_failure": _startup,
           "workload_crash": _crash, "topology_misplacement": _misplacement, "training_stalled": _stalled,
           "unexplained_slowdown": _slowdown}



def explain(finding: dict[str, Any]) -> Explained:
    """Sentences and next steps of one finding; healthy or unknown classes get none."""
    out = Explained()
    fn = CLASSES.get(str(finding.get("root_cause")))
    if fn is None:
        return out
    fn(finding, _evidence(finding), out)
    if not out.steps:  # evidence without the keys a step needs: still say where to look
        out.steps.append(Step(f"Look at {finding.get('namespace')}/{finding.get('job')}'s pods and events.",
                              f"kubectl get pods -n {q(finding.get('namespace'))} {_pods_of(finding)} -o wide"))
    return out
