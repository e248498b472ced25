"""Scenarios: which jobs run where, when, and which faults are injected.

A scenario is plain data (``SimJob``s and ``Fault``s on a ``Cluster``); ``timeline.py`` turns it into
watch events and ``telemetry.py`` into exporter samples, so both always tell the same story. Times
are seconds after the scenario start. Every scenario fits in its first hour; longer runs just keep
the surviving jobs going. Nodes beyond what a scenario needs get healthy filler jobs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from collectors.simulate.cluster import (
    BLOCK_LABEL,
    DEDICATED_TAINT,
    NODES_PER_RACK,
    RACK_LABEL,
    RACKS_PER_BLOCK,
    Cluster,
    Node,
    det_uuid,
)
from collectors.simulate.objects import workload_name

MIN = 60.0
NAMESPACES = ("ml-research", "team-b", "team-c", "ml-platform")


@dataclass
class SimJob:
    """One training job (one run of it: a re-run of the same name is another SimJob)."""

    name: str
    namespace: str
    pods: int
    nodes: list[Node]  # pod i runs on nodes[i]; pods beyond len(nodes) never get a node
    created: float
    root_cause: str = "healthy"
    onset: float | None = None
    kind: str = "Job"  # Job | JobSet
    gang: str = "none"  # none | coscheduling | volcano | native
    native_policy: str = "gang"  # gang | basic (1.37: the Job controller's default for a Job without spec.scheduling)
    k8s: str = "1.36"  # 1.35 (v1alpha1 Workload, pods' workloadRef) | 1.36 (v1alpha2) | 1.37 (v1beta1 + v1alpha3)
    replicas: int = 1  # 1.35: gang replicas (podGroupReplicaKey), each its own gang of pods // replicas
    delegated: bool = False  # 1.37 JobSet: its child Job gets a PodGroup alone, pointing at the JobSet's Workload
    kueue_gate: str = "on"  # UnadmittedWorkloadsObservability: on (granular reasons) | off (v0.19 default: Pending)
    kueue: bool = True
    kueue_api: str = "v1beta2"
    queue: str = "team-a"
    cq: str = "team-a-cq"
    required: str | None = RACK_LABEL
    preferred: bool = False
    gpus_per_pod: int = 8
    priority: int = 0
    priority_class: str | None = None
    node_selector: dict[str, str] | None = None
    schedule_timeout: int = 60
    pending: tuple[str, str] | None = None  # never admitted: (QuotaReserved reason, message)
    unschedulable: str | None = None  # FailedScheduling message of pods without a node
    volcano_unschedulable: bool = False
    end: float | None = None  # Succeeded at
    deleted: float | None = None  # objects deleted at (a finished earlier run)
    evicted: float | None = None  # Kueue preempted it at
    preemptor: SimJob | None = None
    readmit: float | None = None  # re-admitted after eviction at
    tps_per_gpu: float = 3100.0
    slowdowns: list[tuple[float, float, float]] = field(default_factory=list)  # (from, until, factor)
    stall: float | None = None  # throughput collapses (hang after a fault) at
    pull_s: float = 24.0  # from binding to containers running (image pull, start-up)
    pg_name: str | None = None  # gang object name when it differs from the job's (first-contact variants)
    # filled by assign_ids
    uid: str = ""
    wl_uid: str = ""
    pg_uid: str = ""
    child_uid: str = ""
    pod_names: list[str] = field(default_factory=list)
    pod_uids: list[str] = field(default_factory=list)
    pod_uids2: list[str] = field(default_factory=list)  # pods recreated after re-admission
    pod_names2: list[str] = field(default_factory=list)

    @property
    def admitted(self) -> float | None:
        if self.pending is not None or not self.kueue:
            return None if self.pending else self.created
        return self.created + 15.0

    @property
    def placed(self) -> float | None:
        """When pods are bound to nodes (gates removed, scheduled)."""
        base = self.admitted if self.kueue else self.created
        return None if base is None or not self.nodes else base + 6.0

    @property
    def all_placed(self) -> bool:
        return len(self.nodes) >= self.pods and not self.volcano_unschedulable

    @property
    def running(self) -> float | None:
        """When every pod runs (the gang is up); None if it never is."""
        if self.placed is None or not self.all_placed:
            return None
        return self.placed + self.pull_s

    @property
    def rerun(self) -> float | None:
        return None if self.readmit is None else self.readmit + 30.0

    @property
    def workload(self) -> str | None:
        if self.kueue:
            return workload_name(self)
        if self.gang != "native":
            return None
        # 1.37 Job controller: <job>-<SafeEncode(fnv32a(job UID))>
        return f"{self.name}-{safe_hash(self.uid)}" if self.k8s == "1.37" else self.name

    @property
    def template(self) -> str:
        """The Workload's pod group template: 1.37 Job controller "<job>-pgt-0"; else "worker"."""
        return f"{self.name}-pgt-0" if self.k8s == "1.37" and self.kind == "Job" else "worker"

    @property
    def pod_group(self) -> str | None:
        if self.gang in ("coscheduling", "volcano"):
            return self.pg_name or self.name
        if self.gang != "native" or self.k8s == "1.35":  # 1.35: no PodGroup object, pods name the Workload
            return None
        if self.k8s == "1.37" and self.kind == "Job":  # <workload>-<template>-<hash>
            return f"{self.workload}-{self.template}-{safe_hash(f'{self.workload}/{self.template}')}"
        return f"{self.workload}-worker-0" if self.k8s == "1.37" else f"{self.name}-worker-0"

    @property
    def composite(self) -> str | None:
        """1.37 JobSets of native gangs: a root CompositePodGroup over the child Job's PodGroup."""
        return f"{self.workload}-root" if self.k8s == "1.37" and self.gang == "native" and self.kind == "JobSet" \
            and not self.delegated else None

    def active_intervals(self) -> list[tuple[float, float]]:
        """Intervals when the training loop runs (throughput is reported)."""
        out = []
        if self.running is not None:
            stop = min(x for x in (self.end, self.evicted, float("inf")) if x is not None)
            out.append((self.running, stop))
        if self.rerun is not None:
            out.append((self.rerun, self.end if self.end and self.end > self.rerun else float("inf")))
        return out

    def holding_intervals(self) -> list[tuple[float, float]]:
        """Intervals when the job's pods hold GPUs on their nodes."""
        out = []
        if self.placed is not None:
            stop = min(x for x in (self.end, self.evicted, float("inf")) if x is not None)
            out.append((self.placed, stop))
        if self.readmit is not None:
            out.append((self.readmit + 6.0, self.end if self.end and self.end > self.readmit else float("inf")))
        return out


def placement_factor(nodes: list[Node]) -> float:
    """Throughput factor of a gang's placement: slower when it spans more racks (or blocks) than its size needs."""
    if not nodes:
        return 1.0
    need_racks = -(-len(nodes) // NODES_PER_RACK)
    need_blocks = -(-len(nodes) // (NODES_PER_RACK * RACKS_PER_BLOCK))
    f = 1.0
    if len({n.rack for n in nodes}) > need_racks:
        f *= 0.66
    if len({n.block for n in nodes}) > need_blocks:
        f *= 0.85
    return f


@dataclass
class Fault:
    """A telemetry-level fault or trap on one node (and GPU / IB device)."""

    kind: str  # xid | gpu_lost | ecc_dbe | nvlink_degraded | ib_flap | exporter_silent | nvlink_missing
    node: Node
    at: float
    until: float | None = None
    gpu: int | None = None
    xid: int | None = None
    device: int | None = None  # IB device index
    factor: float = 1.0  # what is left of the link's bandwidth
    slows: float = 1.0  # throughput factor of every job using the node while the fault lasts


@dataclass
class Scenario:
    name: str
    cluster: Cluster
    jobs: list[SimJob]
    faults: list[Fault]
    seed: int
    duration: float
    variant: str = "1.36"


def safe_hash(s: str) -> str:
    """apimachinery rand.SafeEncodeString of the decimal fnv32a of ``s`` (the 1.37 Job controller's name suffix)."""
    h = 0x811C9DC5
    for b in s.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return "".join("bcdfghjklmnpqrstvwxz2456789"[ord(c) % 27] for c in str(h))


def to_137(scn: Scenario, kueue_gate: str) -> None:
    """The same jobs and faults as Kubernetes 1.37 + Kueue v0.19 show them (variants ``<scenario>@k8s-1.37``):
    native scheduling.k8s.io v1beta1 objects (each also served as v1alpha3), created by the Job controller for every
    Job outside Kueue (gang for native gangs, ``basic`` for the rest), a CompositePodGroup over a JobSet's PodGroup,
    PodGroupInitiallyScheduled; Kueue with UnadmittedWorkloadsObservability ``off`` (v0.19's default: ``Pending``)
    or ``on``, and in HA (a follower's metrics too)."""
    scn.variant = "1.37"
    for j in scn.jobs:
        j.k8s = "1.37"
        j.kueue_gate = kueue_gate
        if not j.kueue and j.gang == "none" and j.kind == "Job":
            # A root Job outside Kueue: the Job controller creates a basic Workload + PodGroup (not a gang).
            j.gang, j.native_policy = "native", "basic"


def to_135(scn: Scenario) -> None:
    """The same jobs and faults on Kubernetes 1.35 (variants ``<scenario>@k8s-1.35``): every gang outside Kueue
    (coscheduling, Volcano, native) becomes a v1alpha1 Workload with a ``basic`` driver group and a ``workers``
    gang group, its pods joining it through ``spec.workloadRef`` with a ``podGroupReplicaKey``; a JobSet of an
    even pod count runs two replicas, each its own gang (``minCount`` = pods / 2). No PodGroup object exists."""
    scn.variant = "1.35"
    for j in scn.jobs:
        if not j.kueue and j.gang in ("coscheduling", "volcano", "native"):
            j.gang, j.k8s, j.volcano_unschedulable = "native", "1.35", False
            j.replicas = 2 if j.kind == "JobSet" and j.pods % 2 == 0 else 1


def delegate(scn: Scenario) -> None:
    """1.37 delegated child Jobs (variants ``<scenario>@k8s-1.37-delegated``): every gang outside Kueue runs as a
    JobSet that owns a native Workload; its child Job (annotated ``scheduling.k8s.io/group-template-name``) gets
    only a PodGroup whose ``workloadRef`` names the JobSet's Workload. Call before ``to_137``."""
    for j in scn.jobs:
        if not j.kueue and j.gang in ("coscheduling", "volcano", "native"):
            if j.kind == "Job":  # the same pods, now the JobSet's child Job's: <jobset>-workers-0-<i>-<suffix>
                j.kind = "JobSet"
                j.pod_names = [f"{j.name}-workers-0{n[len(j.name):]}" for n in j.pod_names]
                j.pod_names2 = [f"{j.name}-workers-0{n[len(j.name):]}" for n in j.pod_names2]
            j.gang, j.delegated, j.volcano_unschedulable = "native", True, False


XID_TEXT = {
    13: "Graphics Engine Exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors", 48: "Double Bit ECC Error", 79: "GPU has fallen off the bus",
}


class _Alloc:
    """Hands out free nodes: compact (one rack) by default, or spread over racks on purpose."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.free = [n for n in cluster.nodes if n.taints == cluster.nodes[0].taints]

    def take(self, k: int, spread: int = 1) -> list[Node]:
        if spread == 1:
            racks: dict[str, list[Node]] = {}
            for n in self.free:
                racks.setdefault(n.rack, []).append(n)
            for nodes in sorted(racks.values(), key=len):
                if len(nodes) >= k:
                    return self._use(nodes[:k])
        per = -(-k // spread)
        picked: list[Node] = []
        used_racks: set[str] = set()
        for n in self.free:
            if n.rack in used_racks and sum(p.rack == n.rack for p in picked) >= per:
                continue
            picked.append(n)
            used_racks.add(n.rack)
            if len(picked) == k:
                if len({p.rack for p in picked}) < spread:
                    break
                return self._use(picked)
        raise ValueError(f"not enough free nodes for {k} pods over {spread} racks; use more --nodes")

    def _use(self, nodes: list[Node]) -> list[Node]:
        for n in nodes:
            self.free.remove(n)
        return nodes


# --- the injected situations, one builder per class -----------------------------------------------------------

def _gpu_fault(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    j = SimJob("gpt-moe-pretrain", "ml-research", 2, a.take(2), 60, "gpu_fault", 25 * MIN, kind="JobSet",
               gang="coscheduling", stall=25 * MIN)
    jobs.append(j)
    faults += [Fault("xid", j.nodes[0], 25 * MIN, gpu=3, xid=79), Fault("gpu_lost", j.nodes[0], 25 * MIN + 20, gpu=3)]
    k = SimJob("bert-large-ft", "ml-research", 2, a.take(2), 90, "gpu_fault", 30 * MIN, kueue_api="v1beta1",
               stall=30 * MIN)
    jobs.append(k)
    faults += [Fault("xid", k.nodes[1], 30 * MIN, gpu=5, xid=48), Fault("ecc_dbe", k.nodes[1], 30 * MIN, gpu=5)]


def _interconnect(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, ib: bool = True) -> None:
    j = SimJob("llama-70b-sft", "ml-research", 2, a.take(2), 45, "interconnect_degradation", 25 * MIN)
    jobs.append(j)
    faults.append(Fault("nvlink_degraded", j.nodes[1], 25 * MIN, dur, factor=0.3, slows=0.58))
    if ib:
        k = SimJob("dlrm-train", "ml-platform", 2, a.take(2), 75, "interconnect_degradation", 28 * MIN,
                   gang="volcano", kueue=False, required=None)
        jobs.append(k)
        faults.append(Fault("ib_flap", k.nodes[0], 28 * MIN, 48 * MIN, device=1, slows=0.55))


def _preemption(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, scheduler: bool = True) -> None:
    nodes = a.take(2)
    low = SimJob("rl-sweep", "team-c", 2, nodes, 30, "preemption", 25 * MIN + 5, queue="team-c", cq="team-c-cq",
                 priority=100, priority_class="low", evicted=25 * MIN + 5, readmit=45 * MIN + 20)
    high = SimJob("rl-prod-eval", "team-c", 2, nodes, 25 * MIN, queue="team-c", cq="team-c-cq", priority=10000,
                  priority_class="high", end=45 * MIN, kind="JobSet")
    low.preemptor = high
    jobs += [low, high]
    if not scheduler:
        return
    # kube-scheduler preemption outside Kueue: the victim pod gets DisruptionTarget, the job fails.
    victim = SimJob("embed-batch", "ml-platform", 2, a.take(2), 50, "preemption", 35 * MIN, kueue=False,
                    required=None, evicted=35 * MIN, priority=0)
    critical = SimJob("critical-infer", "ml-platform", 1, [victim.nodes[1]], 35 * MIN - 1, kueue=False,
                      required=None, priority=1_000_000, priority_class="system-critical-inference",
                      tps_per_gpu=5200.0)
    victim.preemptor = critical
    jobs += [victim, critical]


def _admission_quota(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    jobs.append(SimJob("team-b-baseline", "team-b", 2, a.take(2), 20, queue="team-b", cq="team-b-cq"))
    jobs.append(SimJob("team-b-finetune", "team-b", 2, [], 5 * MIN, "admission_quota", 5 * MIN, queue="team-b",
                       cq="team-b-cq", pending=("WaitingForQuota", "couldn't assign flavors to pod set main: "
                                                "insufficient unused quota for nvidia.com/gpu in flavor tas-flavor, "
                                                "16 more needed")))
    jobs.append(SimJob("team-b-huge", "team-b", 4, [], 7 * MIN, "admission_quota", 7 * MIN, queue="team-b",
                       cq="team-b-cq", kueue_api="v1beta1", pending=(
                           "Pending", "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu "
                           "in flavor tas-flavor, previously considered podsets requests (0) + current podset "
                           "request (32) > maximum capacity (16)")))


def _admission_topology(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    jobs.append(SimJob("wide-rack-pretrain", "ml-research", 6, [], 4 * MIN, "admission_topology", 4 * MIN, pending=(
        "TopologyPlacementFailed", 'couldn\'t assign flavors to pod set main: topology "default" allows to fit only '
        "4 out of 6 pod(s)")))
    jobs.append(SimJob("fat-pod-train", "ml-research", 2, [], 6 * MIN, "admission_topology", 6 * MIN,
                       gpus_per_pod=16, kueue_api="v1beta1", pending=(
                           "Pending", 'couldn\'t assign flavors to pod set main: topology "default" doesn\'t allow to '
                           "fit any of 2 pod(s)")))


def _gang_assembly(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, n_nodes: int,
                   tainted_rack: str | None, partial_pods: int = 4) -> None:
    if tainted_rack is not None:
        jobs.append(SimJob(
            "cosched-tainted", "ml-research", 2, [], 3 * MIN, "gang_assembly", 3 * MIN + 5, gang="coscheduling",
            kueue=False, required=None, node_selector={RACK_LABEL: tainted_rack}, schedule_timeout=120,
            unschedulable=f"0/{n_nodes} nodes are available: {n_nodes - 4} node(s) didn't match Pod's node "
            f"affinity/selector, 4 node(s) had untolerated taint(s). preemption: 0/{n_nodes} nodes are available: "
            f"{n_nodes} Preemption is not helpful for scheduling."))
        jobs.append(SimJob(
            "volcano-selector", "ml-platform", 2, [], 8 * MIN, "gang_assembly", 8 * MIN + 5, gang="volcano",
            kueue=False, required=None, node_selector={BLOCK_LABEL: "block-99"}, volcano_unschedulable=True,
            unschedulable=f"0/{n_nodes} nodes are available: {n_nodes} node(s) didn't match Pod's node "
            "affinity/selector."))
    placed = a.take(partial_pods - 1)
    jobs.append(SimJob(
        "partial-start", "ml-research", partial_pods, placed, 10 * MIN, "gang_assembly", 10 * MIN + 21,
        required=None, unschedulable=f"0/{n_nodes} nodes are available: 4 node(s) had untolerated taint(s), "
        f"{n_nodes - 4} Insufficient nvidia.com/gpu. preemption: 0/{n_nodes} nodes are available: 4 Preemption is "
        f"not helpful for scheduling, {n_nodes - 4} No preemption victims found for incoming pod."))


def _misplacement(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    first = a.take(2)
    jobs.append(SimJob("gpt-13b-pretrain", "ml-research", 2, first, 60, "healthy", end=20 * MIN,
                       deleted=21 * MIN))
    other = next((n for n in a.free if n.rack != first[0].rack), None)
    if other is None:
        raise ValueError("misplacement needs a free node in a second rack; use more --nodes")
    spread = [first[0], *a._use([other])]
    jobs.append(SimJob("gpt-13b-pretrain", "ml-research", 2, spread, 22 * MIN, "topology_misplacement",
                       22 * MIN + 45, preferred=True))
    # The node the first run freed is taken at once (a busy cluster): a node left free would contradict the
    # other scenarios' "Insufficient nvidia.com/gpu" for pods still pending.
    jobs.append(SimJob("eval-harness", "ml-platform", 1, [first[1]], 21 * MIN + 30, kueue=False, required=None,
                       tps_per_gpu=2950.0))


def _unexplained(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    jobs.append(SimJob("mistral-7b-ft", "ml-research", 2, a.take(2), 100, "unexplained_slowdown", 30 * MIN,
                       kind="JobSet", slowdowns=[(30 * MIN, dur, 0.6)]))


def _healthy(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, n: int = 1,
             traps: bool = True) -> None:
    systems = [("none", True), ("coscheduling", True), ("native", False), ("volcano", False)]
    for i in range(n):
        gang, kueue = systems[i % len(systems)]
        j = SimJob(f"healthy-train-{i + 1}", "ml-platform" if not kueue else "ml-research", 2, a.take(2),
                   40 + 7 * i, gang=gang, kueue=kueue, required=RACK_LABEL if kueue else None,
                   kind="JobSet" if i % 3 == 2 else "Job", kueue_api="v1beta1" if i % 4 == 1 else "v1beta2",
                   tps_per_gpu=3100.0 + 97 * (i % 5))
        jobs.append(j)
        if traps and i == 0:
            # XID 13 alone is an application error, not hardware; a silent exporter is missing data.
            faults.append(Fault("xid", j.nodes[0], 20 * MIN, gpu=2, xid=13))
            faults.append(Fault("exporter_silent", j.nodes[1], 35 * MIN))
        if traps and i == 1:
            faults += [Fault("xid", j.nodes[0], 15 * MIN, gpu=0, xid=31), Fault("xid", j.nodes[1], 16 * MIN, gpu=6,
                                                                               xid=43)]
            faults.append(Fault("nvlink_missing", j.nodes[1], 0))
        if traps and i == 2:
            faults.append(Fault("xid", j.nodes[0], 33 * MIN, gpu=1, xid=45))


def _filler(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    """Healthy jobs on every node left, so big clusters look busy (2-4 pods each)."""
    i = 0
    while len(a.free) >= 2:
        k = min(len(a.free), 4 if i % 2 else 2)
        try:
            nodes = a.take(k)
        except ValueError:
            nodes = a._use(a.free[:k])  # fragmented leftovers: a healthy job across racks
        gang, kueue = [("none", True), ("coscheduling", True), ("native", False), ("volcano", False)][i % 4]
        jobs.append(SimJob(f"batch-train-{i + 1:03d}", "ml-platform", k, nodes, 50 + 3 * i, gang=gang, kueue=kueue,
                           required=RACK_LABEL if kueue and len({n.rack for n in nodes}) == 1 else None,
                           kueue_api="v1beta1" if i % 5 == 4 else "v1beta2", tps_per_gpu=2900.0 + 41 * (i % 7)))
        i += 1


def _taint_rack(cluster: Cluster) -> str:
    """Reserve the last rack for inference: taint its nodes (the gang_assembly trap target)."""
    rack = cluster.nodes[-1].rack
    for n in cluster.nodes:
        if n.rack == rack:
            n.taints.append(dict(DEDICATED_TAINT))
    return rack


Builder = Callable[[Cluster, _Alloc, list[SimJob], list[Fault], float], None]


def _single(fn: Callable[..., None], **kw: object) -> Builder:
    def build(cluster: Cluster, a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
        fn(a, jobs, faults, dur, **kw)
        _healthy(a, jobs, faults, dur, n=1, traps=False)
    return build


def _gang(cluster: Cluster, a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    rack = _taint_rack(cluster)
    a.free = [n for n in a.free if n.rack != rack]
    _gang_assembly(a, jobs, faults, dur, len(cluster.nodes), rack)
    _healthy(a, jobs, faults, dur, n=1, traps=False)


def _traps(cluster: Cluster, a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    _healthy(a, jobs, faults, dur, n=4, traps=True)


def _mixed(cluster: Cluster, a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    j = SimJob("gpt-moe-pretrain", "ml-research", 2, a.take(2), 60, "gpu_fault", 25 * MIN, kind="JobSet",
               gang="coscheduling", stall=25 * MIN)
    jobs.append(j)
    faults += [Fault("xid", j.nodes[0], 25 * MIN, gpu=3, xid=79), Fault("gpu_lost", j.nodes[0], 25 * MIN + 20, gpu=3)]
    _interconnect(a, jobs, faults, dur, ib=False)
    _preemption(a, jobs, faults, dur, scheduler=False)
    _admission_quota(a, jobs, faults, dur)
    _admission_topology(a, jobs, faults, dur)
    _misplacement(a, jobs, faults, dur)
    _unexplained(a, jobs, faults, dur)
    _healthy(a, jobs, faults, dur, n=1, traps=True)
    _gang_assembly(a, jobs, faults, dur, len(cluster.nodes), None, partial_pods=2)


SCENARIOS: dict[str, tuple[str, Builder]] = {
    "gpu_fault": ("XID 79 (GPU falls off the bus, its series stop) and XID 48 + ECC DBE on one GPU",
                  _single(_gpu_fault)),
    "interconnect_degradation": ("NVLink degradation on one node; InfiniBand port flapping on another",
                                 _single(_interconnect)),
    "preemption": ("a low-priority job evicted by a higher-priority one, re-admitted later", _single(_preemption)),
    "admission_quota": ("a ClusterQueue short of GPU quota (WaitingForQuota, legacy Pending)",
                        _single(_admission_quota)),
    "admission_topology": ("unsatisfiable topology (TopologyPlacementFailed, legacy Pending message)",
                           _single(_admission_topology)),
    "gang_assembly": ("gangs blocked by taints or selectors (coscheduling, Volcano), and a partial start",
                      _gang),
    "topology_misplacement": ("a re-run of a job spread across racks, slower than its compact first run",
                              _single(_misplacement)),
    "unexplained_slowdown": ("throughput drops with no infrastructure signal", _single(_unexplained)),
    "healthy": ("healthy jobs only, with traps: XID 13/31/43/45, a silent exporter, missing NVLink fields",
                _traps),
    "mixed": ("several classes at once on one cluster (the demo's scenario)", _mixed),
}


def build(name: str, cluster: Cluster, seed: int, duration: float) -> Scenario:
    if name not in SCENARIOS:
        raise KeyError(name)
    rng = random.Random(f"{seed}:{name}:jobs")
    a = _Alloc(cluster)
    jobs: list[SimJob] = []
    faults: list[Fault] = []
    SCENARIOS[name][1](cluster, a, jobs, faults, duration)
    _filler(a, jobs, faults, duration)
    for j in jobs:
        assign_ids(j, rng)
    return Scenario(name, cluster, jobs, faults, seed, duration)


def _suffix(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


def assign_ids(j: SimJob, rng: random.Random) -> None:
    j.uid, j.wl_uid, j.pg_uid, j.child_uid = (det_uuid(rng) for _ in range(4))
    base = j.name if j.kind == "Job" else f"{j.name}-workers-0"
    j.pod_names = [f"{base}-{i}-{_suffix(rng)}" for i in range(j.pods)]
    j.pod_uids = [det_uuid(rng) for _ in range(j.pods)]
    j.pod_names2 = [f"{base}-{i}-{_suffix(rng)}" for i in range(j.pods)]
    j.pod_uids2 = [det_uuid(rng) for _ in range(j.pods)]
