"""Scenarios: which jobs run where, when, and which faults are injected.

A scenario is plain data (``SimJob``s and ``Fault``s on a ``Cluster``); ``timeline.py`` turns it into
watch events and ``telemetry.py`` into exporter samples, so both always tell the same story. Times
are seconds after the scenario start. Every scenario fits in its first hour; longer runs just keep
the surviving jobs going. Nodes beyond what a scenario needs get healthy filler jobs.
"""

from __future__ import annotations

import random
import uuid
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
from collectors.simulate.objects import IMAGE, workload_name

MIN = 60.0
PODS_READY_TIMEOUT_S = 1800.0  # Kueue v0.19 waitForPodsReady default timeout (and recoveryTimeout)
STARTED_AFTER_FIX_S = 25.0  # the kubelet's next pull attempt succeeds after the fix, the container starts
OOM_RUN_S = 150.0  # how long a restarted rank lives before the OOM killer takes it again
NCCL_TIMEOUT_S = 600.0  # ProcessGroupNCCL default collective timeout (torch >= 2.2): the watchdog aborts then
RESTART_PLACE_S = 10.0  # a restarted JobSet's new pods are bound this long after the old ones failed
RESTART_RUN_S = 40.0  # ... and run this long after
DRAIN_EVICT_S = 20.0  # a drain evicts the cordoned node's pods this long after the cordon
DRAIN_GRACE_S = 25.0  # an evicted trainer exits this long after SIGTERM (within its 30 s grace period)
# start-up failures: the containers do not start (until ``fixed_at``, when set); registry: the registry is down
STUCK = ("image_pull", "registry", "config_error", "mount")
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
    submitted_as: str | None = None  # the kind a job-kind variant re-tells it as (kinds.rekind): RayCluster, ...
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
    evict_reason: str = "Preempted"  # Kueue's Evicted reason: Preempted | NodeFailures (PodsReadyTimeout: startup)
    tps_per_gpu: float = 3100.0
    slowdowns: list[tuple[float, float, float]] = field(default_factory=list)  # (from, until, factor)
    stall: float | None = None  # throughput collapses (hang after a fault) at
    pull_s: float = 24.0  # from binding to containers running (image pull, start-up)
    pg_name: str | None = None  # gang object name when it differs from the job's (first-contact variants)
    # issue 31: what stops real runs beyond scheduling and interconnect (docs/simulator.md)
    restart_policy: str = "Never"  # OnFailure: the kubelet restarts a failed container in place (crash loop)
    backoff_limit: int = 0
    ignore_disruptions: bool = False  # podFailurePolicy Ignore on DisruptionTarget (replacement once Failed)
    image: str = IMAGE
    startup: str | None = None  # image_pull | config_error | mount: containers never start; slow_pull: they do
    crash: str | None = None  # oom: rank crash_rank OOMKilled in a loop until backoffLimit | nccl: watchdog abort
    crash_rank: int = 1
    fixed_at: float | None = None  # start-up failure: its cause is removed (the registry is back): containers start
    crash_recovers: bool = False  # oom: three crashes, then the restarted rank stays up (a crash loop that ends)
    children: bool = False  # a JobSet's child Job and restart attempts are modelled (the jobs of issue 31)
    pauses: list[tuple[float, float]] = field(default_factory=list)  # checkpoint pauses: throughput ~0
    hang: bool = False  # the stall is a hung collective: util stays ~100 %, tensor activity, power, traffic fall
    stall_mode: str = "gauge"  # how a stall shows: gauge (~0) | counter (stops rising) | gone (series absent)
    counter: bool = False  # throughput reported as the counter train_tokens_total (read as a rate)
    disrupted: tuple[str, int, float] | None = None  # (lost | drain, pod index, when): its node fails under it
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
        if self.startup in STUCK:
            return None if self.fixed_at is None else self.fixed_at + STARTED_AFTER_FIX_S
        return self.placed + self.pull_s

    @property
    def rerun(self) -> float | None:
        """When the second set of pods runs: after a re-admission, or after a JobSet restart."""
        if self.readmit is not None:
            return self.readmit + 30.0
        return None if self.restart_at is None else self.restart_at + RESTART_RUN_S

    @property
    def series_end(self) -> float | None:
        """When the training loop of the first pods stops reporting, for a cause the stories set (a crash, a lost
        or drained node): the rank-0 pod's metrics endpoint is gone, or stops (rank 0 waits for its lost peer)."""
        if self.crash == "oom":
            return self.failed_at
        if self.crash == "nccl":
            return self.restart_at
        if self.disrupted is not None:
            kind, _, at = self.disrupted
            return at + (DRAIN_EVICT_S if kind == "drain" else 0.0)
        return None

    @property
    def hold_end(self) -> float | None:
        """When the first pods release their GPUs for a cause the stories set (deleted after a crash)."""
        if self.crash == "oom":
            return None if self.failed_at is None else self.failed_at + 5
        return None if self.restart_at is None else self.restart_at + 1

    def released(self) -> dict[int, float]:
        """Pods (by index) that release their node's GPUs before the others: a pod evicted by a drain."""
        if self.disrupted is not None and self.disrupted[0] == "drain":
            return {self.disrupted[1]: self.disrupted[2] + DRAIN_EVICT_S + DRAIN_GRACE_S + 1}
        return {}

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
            stop = min(x for x in (self.end, self.evicted, self.series_end, float("inf")) if x is not None)
            out.append((self.running, stop))
        if self.rerun is not None:
            out.append((self.rerun, self.end if self.end and self.end > self.rerun else float("inf")))
        return out

    def holding_intervals(self, duration: float = float("inf")) -> list[tuple[float, float]]:
        """Intervals when the job's pods hold GPUs on their nodes, the k-th by the k-th set of pods."""
        if self.kueue and self.startup in STUCK:
            return [(a + 6.0, ev + 3.0 if ev is not None else float("inf"))
                    for a, ev, _ in self.timeout_cycles(self.stuck_until(duration))]
        out = []
        if self.placed is not None:
            stop = min(x for x in (self.end, self.evicted, self.hold_end, float("inf")) if x is not None)
            out.append((self.placed, stop))
        if self.readmit is not None:
            out.append((self.readmit + 6.0, self.end if self.end and self.end > self.readmit else float("inf")))
        elif self.restart_at is not None:
            out.append((self.restart_at + RESTART_PLACE_S, float("inf")))
        return out

    # --- the issue-31 stories' timing, read by the timeline and the telemetry alike ----------------------------

    def generation(self, k: int) -> tuple[list[str], list[str]]:
        """Pod names and UIDs of the job's k-th set of pods (0: the first, 1: after a re-admission or restart)."""
        if k == 0:
            return self.pod_names, self.pod_uids
        if k == 1:
            return self.pod_names2, self.pod_uids2
        names = [f"{n.rsplit('-', 1)[0]}-{safe_hash(f'{self.uid}/{k}/{i}')[:5]}" for i, n in enumerate(self.pod_names)]
        return names, [str(uuid.uuid5(uuid.UUID(u), str(k))) for u in self.pod_uids]

    def evictions(self, duration: float) -> list[tuple[float, float | None, str]]:
        """Kueue evictions: (evicted at, re-admitted at or None, Evicted reason)."""
        if self.kueue and self.startup in STUCK:
            return [(ev, rq + 1 if rq + 1 < duration else None, "PodsReadyTimeout")
                    for _, ev, rq in self.timeout_cycles(self.stuck_until(duration))
                    if ev is not None and rq is not None]
        return [] if self.evicted is None else [(self.evicted, self.readmit, self.evict_reason)]

    @property
    def finished(self) -> float | None:
        """When Kueue marks the Workload Finished (Succeeded at ``end``, Failed after a crash loop)."""
        return self.end if self.end is not None else (None if self.failed_at is None else self.failed_at + 6)

    def stuck_until(self, duration: float) -> float:
        """Until when a start-up failure lasts: the scenario's end, or the fix."""
        return duration if self.fixed_at is None else min(duration, self.fixed_at)

    def timeout_cycles(self, duration: float) -> list[tuple[float, float | None, float | None]]:
        """Kueue v0.19 waitForPodsReady on a Workload whose pods never start: per admission (admitted at, evicted
        at, re-queued at). Evicted PodsReadyTimeout 30 min after Admitted, back in the queue 60 s x 2^(count-1)
        later (requeuingStrategy defaults), admitted again at once (its quota is free)."""
        out: list[tuple[float, float | None, float | None]] = []
        a = self.admitted
        k = 0
        while a is not None and a < duration and k < 100:
            ev = a + PODS_READY_TIMEOUT_S + 1
            if ev >= duration:
                out.append((a, None, None))
                break
            rq = ev + min(60.0 * 2 ** min(k, 6), 3600.0)
            out.append((a, ev, rq))
            a, k = rq + 1, k + 1
        return out

    def oom_loop(self) -> list[tuple[float, float]]:
        """The crashing rank's container under restartPolicy OnFailure: (terminated at, restarted at) per crash.
        The kubelet backs off 10 s, doubling to 5 min; restartCount (the CRI's attempt number) reaches
        backoffLimit at the last restart, when the Job controller fails the Job."""
        out = []
        t, delay = self.onset or 0.0, 10.0
        for _ in range(3 if self.crash_recovers else self.backoff_limit):
            out.append((t, t + delay))
            t, delay = t + delay + OOM_RUN_S, min(delay * 2, 300.0)
        return out

    @property
    def failed_at(self) -> float | None:
        """When the Job controller marks the crash-looping Job FailureTarget (backoffLimit reached)."""
        return self.oom_loop()[-1][1] + 1 if self.crash == "oom" and self.backoff_limit and not self.crash_recovers \
            else None

    @property
    def restart_at(self) -> float | None:
        """A JobSet restart after the NCCL watchdog abort: when the failed ranks exit (the hang + 10 min)."""
        return self.stall + NCCL_TIMEOUT_S + 2 if self.crash == "nccl" and self.stall is not None else None


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

    # telemetry: xid | gpu_lost | ecc_dbe | nvlink_degraded | ib_flap | exporter_silent | nvlink_missing |
    #   throttle (one GPU's SM clock x factor, hot; clock-event bits ``reasons`` where the exporter has them) |
    #   hot_gpu (~87 C, clocks hold) | clock_dip (one scrape); node objects (and telemetry): node_lost (the kubelet
    #   stops posting status; its exporters go silent) | cordon | drain (cordon, then its pods evicted) |
    #   gpu_unhealthy (the device plugin reports one GPU Unhealthy: allocatable 8 -> 7, NVSentinel quarantine)
    kind: str
    node: Node
    at: float
    until: float | None = None
    gpu: int | None = None
    xid: int | None = None
    device: int | None = None  # IB device index
    factor: float = 1.0  # what is left of the link's bandwidth (throttle: of the GPU's SM clock)
    slows: float = 1.0  # throughput factor of every job using the node while the fault lasts
    reasons: int = 0  # throttle: DCGM clock-event bit mask (0x4 SW_POWER_CAP, 0x8 HW_SLOWDOWN, 0x40 HW_THERMAL, ...)


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
    45: "Preemptive cleanup, due to previous errors", 48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event", 79: "GPU has fallen off the bus",
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


# --- issue 31: failures beyond scheduling and interconnect, and the normal life that must stay quiet ------------

def _startup_failure(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, pods: int = 2,
                     others: bool = True, fixed: bool = False) -> None:
    # A tag that does not exist: ErrImagePull / ImagePullBackOff for the whole hour, Kueue's PodsReadyTimeout
    # evicts the Workload 30 min after admission, re-queues and re-admits it, and the new pods fail the same way.
    j = SimJob("llama-8b-sft", "ml-research", pods, a.take(pods), 10 * MIN, "startup_failure", startup="image_pull",
               image="nvcr.io/nvidia/pytorch:25.19-py3")
    j.onset = (j.placed or 0.0) + 3  # the first failed pull
    if fixed:  # the registry is down for 25 min, then the kubelet's next pull succeeds: a failure that is fixed
        j.startup, j.fixed_at = "registry", (j.placed or 0.0) + 25 * MIN
    jobs.append(j)
    if not others:
        return
    # A missing Secret (CreateContainerConfigError: cannot clear by itself) in a coscheduled JobSet.
    k = SimJob("rlhf-reward-model", "team-c", 2, a.take(2), 12 * MIN, "startup_failure", kind="JobSet",
               gang="coscheduling", kueue=False, required=None, startup="config_error", children=True)
    k.onset = (k.placed or 0.0) + 2
    # A ConfigMap volume that never mounts: ContainerCreating with FailedMount Events.
    m = SimJob("data-curation", "ml-platform", 1, a.take(1), 14 * MIN, "startup_failure", kueue=False,
               required=None, startup="mount")
    m.onset = (m.placed or 0.0) + 2
    jobs += [k, m]


def _workload_crash(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, pods: int = 2,
                    nccl: bool = True, recovers: bool = False) -> None:
    # restartPolicy OnFailure: the last rank is OOM-killed again and again until the Job's backoffLimit (or, when it
    # recovers, three times before the restarted rank stays up: no progress meanwhile, then training goes on).
    j = SimJob("moe-expert-ft", "ml-research", pods, a.take(pods), 2 * MIN, "workload_crash", 20 * MIN,
               restart_policy="OnFailure", backoff_limit=4, crash="oom", crash_rank=pods - 1, stall=20 * MIN,
               crash_recovers=recovers)
    if recovers:
        j.stall = None
        j.slowdowns = [(20 * MIN, j.oom_loop()[-1][1] + 60.0, 0.0)]
    jobs.append(j)
    if not nccl:
        return
    # A collective hangs for the NCCL watchdog's 10 min, the ranks abort (exit 1), the JobSet restarts and runs on.
    jobs.append(SimJob("llama-405b-pretrain", "ml-research", 2, a.take(2), 90, "workload_crash", 25 * MIN,
                       kind="JobSet", crash="nccl", crash_rank=1, stall=25 * MIN, hang=True, children=True))


LOST_EVICT_S = 345.0  # node lost -> NotReady (+40 s) -> NoExecute taint (+42) -> taint manager (+342) -> Kueue (+345)


def _node_failure(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, pods: int = 2,
                  others: bool = True) -> None:
    # A node stops posting status under a Job outside Kueue: NotReady, unreachable taints, the taint manager deletes
    # the pod after 300 s, its replacement cannot schedule; the surviving rank waits.
    j = SimJob("falcon-40b-pretrain", "ml-platform", pods, a.take(pods), 70, "node_failure", 25 * MIN, kueue=False,
               required=None, backoff_limit=6)
    j.disrupted = ("lost", pods - 1, 25 * MIN)
    faults.append(Fault("node_lost", j.nodes[pods - 1], 25 * MIN))
    jobs.append(j)
    if not others:
        return
    # The same under Kueue TAS: unhealthyNodes, then Evicted NodeFailures (no replacement node) and re-queued.
    k = SimJob("llama-tas-70b", "ml-research", 2, a.take(2), 80, "node_failure", 28 * MIN, backoff_limit=6,
               evicted=28 * MIN + LOST_EVICT_S, evict_reason="NodeFailures")
    k.disrupted = ("lost", 0, 28 * MIN)
    faults.append(Fault("node_lost", k.nodes[0], 28 * MIN))
    # A drain: cordon, then the job's pod on the node evicted through the Eviction API; its replacement waits.
    d = SimJob("bert-drain-ft", "ml-research", 2, a.take(2), 100, "node_failure", 30 * MIN, required=None,
               backoff_limit=6, ignore_disruptions=True)
    d.disrupted = ("drain", 1, 30 * MIN)
    faults.append(Fault("drain", d.nodes[1], 30 * MIN))
    # A GPU marked unhealthy (allocatable 8 -> 7 under a pod holding 8) after XID 63: the XID makes it gpu_fault,
    # first in precedence; the job runs on (row remapping is not fatal).
    g = SimJob("gemma-27b-ft", "ml-platform", 2, a.take(2), 110, "gpu_fault", 33 * MIN, kueue=False, required=None)
    faults += [Fault("xid", g.nodes[0], 33 * MIN, gpu=5, xid=63), Fault("gpu_unhealthy", g.nodes[0], 33 * MIN + 2,
                                                                       gpu=5)]
    jobs += [k, d, g]


def _gpu_throttle(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, pods: int = 2,
                  opt_in: bool = True) -> None:
    # Default counters only: one GPU's SM clock to 0.65 x its peers, hot; the job runs at its slowest rank's pace.
    j = SimJob("qwen-72b-pretrain", "ml-research", pods, a.take(pods), 55, "gpu_throttle", 25 * MIN, kind="JobSet")
    faults.append(Fault("throttle", j.nodes[pods - 1], 25 * MIN, gpu=3, factor=0.65, slows=0.7))
    jobs.append(j)
    if not opt_in:
        return
    # Exporters with the opt-in fields: clock-event bits SW_POWER_CAP | HW_SLOWDOWN and violation counters ...
    k = SimJob("mistral-22b-ft", "team-c", 2, a.take(2), 65, "gpu_throttle", 28 * MIN, kueue=False,
               gang="coscheduling", required=None)
    k.nodes[0].dcgm = "clock_events"
    faults.append(Fault("throttle", k.nodes[0], 28 * MIN, gpu=6, factor=0.7, slows=0.72, reasons=0x4 | 0x8))
    # ... and a DCGM 3.x CSV: the deprecated DCGM_FI_DEV_CLOCK_THROTTLE_REASONS with HW_THERMAL.
    c = SimJob("gemma-9b-pretrain", "ml-platform", 2, a.take(2), 85, "gpu_throttle", 31 * MIN, kueue=False,
               gang="volcano", required=None)
    c.nodes[1].dcgm = "throttle_reasons"
    faults.append(Fault("throttle", c.nodes[1], 31 * MIN, gpu=1, factor=0.62, slows=0.7, reasons=0x40))
    jobs += [k, c]


def _training_stalled(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float, pods: int = 2,
                      modes: bool = True, created: float = 40.0, at: float = 30 * MIN) -> None:
    # A hung collective before any watchdog: pods Running, GPUs busy spinning, no progress. The gauge falls to 0 ...
    jobs.append(SimJob("gpt-neox-20b", "ml-research", pods, a.take(pods), created, "training_stalled", at, stall=at,
                       hang=True))
    if not modes:
        return
    # ... a tokens counter stops rising ...
    jobs.append(SimJob("roberta-large-pt", "ml-platform", 2, a.take(2), 75, "training_stalled", 32 * MIN,
                       kind="JobSet", gang="coscheduling", kueue=False, required=None, stall=32 * MIN, hang=True,
                       counter=True, stall_mode="counter", children=True))
    # ... a gauge's series disappears while the pods stay Running.
    jobs.append(SimJob("t5-xxl-ft", "ml-platform", 2, a.take(2), 95, "training_stalled", 35 * MIN, gang="native",
                       kueue=False, required=None, stall=35 * MIN, hang=True, stall_mode="gone"))


def checkpoints(start: float, dur: float) -> list[tuple[float, float]]:
    """Checkpoint saves every ~12.5 min, 75-170 s each: throughput near 0, normal life (< stall_s)."""
    lengths = (75.0, 150.0, 105.0, 170.0, 90.0, 130.0)
    out, t, i = [], start + 11 * MIN, 0
    while t < dur:
        out.append((t, t + lengths[i % len(lengths)]))
        t, i = t + 12.5 * MIN + 20 * (i % 3), i + 1
    return out


def _normal_life(a: _Alloc, jobs: list[SimJob], faults: list[Fault], dur: float) -> None:
    ckpt = SimJob("olmo-7b-pretrain", "ml-research", 2, a.take(2), 30, kind="JobSet")
    ckpt.pauses = checkpoints(ckpt.running or 0.0, dur)
    # A cold node pulls a 19 GB image for 4.5 min, then the containers run: start-up time, not a failure.
    pull = SimJob("vit-huge-ft", "ml-platform", 2, a.take(2), 8 * MIN, kueue=False, gang="coscheduling",
                  required=None, pull_s=272.0, startup="slow_pull")
    # An evaluation Job that completes (exit 0, Job Complete, Workload Finished): its throughput stops.
    done = SimJob("eval-sweep", "ml-research", 1, a.take(1), 3 * MIN, end=35 * MIN)
    # A node cordoned under a running job (no drain follows), uncordoned later.
    cord = SimJob("phi-3-ft", "ml-platform", 2, a.take(2), 50, gang="native", kueue=False, required=None)
    faults.append(Fault("cordon", cord.nodes[1], 25 * MIN, until=45 * MIN))
    # A hot GPU whose clocks hold, and a one-scrape SM clock dip.
    hot = SimJob("sdxl-finetune", "ml-research", 2, a.take(2), 60)
    faults += [Fault("hot_gpu", hot.nodes[0], 15 * MIN, gpu=4), Fault("clock_dip", hot.nodes[1], 33 * MIN, gpu=2)]
    jobs += [ckpt, pull, done, cord, hot]
    # Nodes that hold none of any job's pods: one goes NotReady (and comes back), one is cordoned.
    if len(a.free) >= 2:
        spare = a._use(a.free[-2:])
        faults += [Fault("node_lost", spare[0], 20 * MIN, until=40 * MIN), Fault("cordon", spare[1], 12 * MIN)]


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
    # Issue 31: one job of each new class, one pod each. The start-up failure (a registry outage) and the crash loop
    # end by themselves: their findings open and resolve.
    _startup_failure(a, jobs, faults, dur, pods=1, others=False, fixed=True)
    _node_failure(a, jobs, faults, dur, pods=1, others=False)
    _gpu_throttle(a, jobs, faults, dur, pods=1, opt_in=False)
    _workload_crash(a, jobs, faults, dur, pods=1, nccl=False, recovers=True)
    crashed = jobs[-1]
    crashed.end = crashed.oom_loop()[-1][1] + 4 * MIN  # it then completes, freeing its node for the stalled job
    a.free.insert(0, crashed.nodes[0])
    _training_stalled(a, jobs, faults, dur, pods=1, modes=False, created=32 * MIN, at=48 * MIN)
    if crashed.nodes[0] in a.free:  # a bigger cluster had another free node: leave this one to the crashed job
        a.free.remove(crashed.nodes[0])
    assert jobs[-1].placed is not None and jobs[-1].placed > crashed.end


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
    "node_failure": ("a node lost under a Job (taint-manager eviction) and under Kueue TAS (NodeFailures), a drain "
                     "through the Eviction API, a GPU marked unhealthy after XID 63 (gpu_fault by precedence)",
                     _single(_node_failure)),
    "gpu_throttle": ("one GPU's SM clock below its peers' with default counters; clock-event reasons and violation "
                     "counters where the exporter has them (new and deprecated field names)", _single(_gpu_throttle)),
    "startup_failure": ("an image that never pulls (Kueue PodsReadyTimeout eviction, re-admission), a missing Secret "
                        "(CreateContainerConfigError), a volume that never mounts (FailedMount)",
                        _single(_startup_failure)),
    "workload_crash": ("a rank OOM-killed in a crash loop until the Job's backoffLimit; an NCCL watchdog abort that "
                       "restarts a JobSet", _single(_workload_crash)),
    "training_stalled": ("hung collectives with every pod Running: a gauge at 0, a counter that stops rising, a "
                         "series that disappears", _single(_training_stalled)),
    "normal_life": ("healthy jobs living normally: checkpoint pauses, a slow image pull, a completed Job, cordoned and "
                    "NotReady nodes holding nothing, a node cordoned under a running job, a hot GPU, a clock dip",
                    _single(_normal_life)),
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
