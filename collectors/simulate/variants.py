"""Variants of the scenarios: the same cluster and faults, met the way a real installation meets them.

A real first `gangscope run` (or a restart after an outage) starts in the middle of a cluster's life: jobs
have run for hours, workloads have waited since yesterday, PodGroups carry names of their own, and a cold
node pulls a 15 GB image for minutes. A variant (``<scenario>@<how>``) replays its base scenario that way:

* ``@before`` / ``@onset`` / ``@after``: gangscope starts watching 2 minutes before the first fault, 1 minute
  after its onset, or 15 minutes after it. Every object that exists then arrives ADDED in the initial list
  (``Timeline.start_capture_at``); the metrics keep their history, as a Prometheus dump replayed beside it.
* ``@running``: the watch and the metrics both start at minute 20, while every job runs (no history at all).
* ``normal_life@pause`` / ``@pulling``: the watch (and, for ``@pause``, the metrics) start in the middle of a
  checkpoint pause, or while a cold node pulls an image: normal life met at its most alarming-looking moment.
* every capture variant names the gang object of a Kueue-managed gang ``<job>-pg`` (its pods carry that name
  in their pod-group label or annotation), so a job is never found by name equality.
* ``healthy@slow_pull``: containers start 65-102 s after their pods are bound (a cold image pull) while the
  coscheduling timeout is 60 s: a start-up delay, not a gang fault.
* ``<scenario>@k8s-1.37`` / ``@k8s-1.37-gate-on``: Kubernetes 1.37 + Kueue v0.19 shapes (``scenarios.to_137``);
  ``@k8s-1.37-delegated``: with every gang outside Kueue a JobSet whose child Job delegates to its Workload
  (``scenarios.delegate``); ``@k8s-1.35``: v1alpha1 Workloads with replica keys (``scenarios.to_135``).
* ``<scenario>@ray`` / ``@trainjob`` / ``@pytorchjob`` / ``@mpijob`` / ``@lws`` / ``@podgroup``: every job submitted as
  a RayCluster, TrainJob (running a JobSet), PyTorchJob, MPIJob (launcher Job + workers), LeaderWorkerSet or Kueue
  plain-pod group, with their controllers' labels and owners (``kinds.rekind``); same pods, times and faults.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from collectors.simulate.kinds import KINDS
from collectors.simulate.scenarios import MIN, SCENARIOS, Scenario, SimJob, delegate, to_135, to_137


@dataclass(frozen=True)
class Variant:
    scenario: str
    text: str
    capture: str | None = None  # before | onset | after | running | pause | pulling
    metrics_history: bool = True
    pg_suffix: str | None = "-pg"
    slow_pull: bool = False
    kueue_gate: str | None = None  # set: Kubernetes 1.37 + Kueue v0.19 shapes (scenarios.to_137), gate on / off
    delegated: bool = False  # 1.37: gangs outside Kueue as JobSets whose child Jobs delegate (scenarios.delegate)
    k8s_135: bool = False  # Kubernetes 1.35 v1alpha1 Workloads, replica keys (scenarios.to_135)
    kind: str | None = None  # every job submitted as this kind (kinds.KINDS: ray, trainjob, ..., podgroup)

    def capture_at(self, scn: Scenario) -> float | None:
        """Seconds after the scenario start at which gangscope starts watching (None: from the start)."""
        if self.capture is None:
            return None
        if self.capture == "pause":  # in the middle of a checkpoint pause (the second, 2.5 min long)
            lo, hi = next(j.pauses for j in scn.jobs if j.pauses)[1]
            return (lo + hi) / 2
        if self.capture == "pulling":  # while a cold node pulls the image
            j = next(j for j in scn.jobs if j.startup == "slow_pull")
            return (j.placed or 0.0) + j.pull_s / 2
        onsets = [j.onset for j in scn.jobs if j.root_cause != "healthy" and j.onset is not None]
        first = min(onsets) if onsets else 20 * MIN
        return {"before": max(MIN, first - 2 * MIN), "onset": first + MIN, "after": first + 15 * MIN,
                "running": 20 * MIN}[self.capture]

    def apply(self, scn: Scenario, seed: int) -> None:
        rng = random.Random(f"{seed}:{self.scenario}:variant")
        for j in scn.jobs:
            if self.pg_suffix and j.kueue and j.gang in ("coscheduling", "volcano"):
                j.pg_name = j.name + self.pg_suffix
            if self.slow_pull:
                j.pull_s = round(65 + 37 * rng.random())
        if self.k8s_135:
            to_135(scn)
        if self.delegated:
            delegate(scn)
        if self.kueue_gate:
            to_137(scn, self.kueue_gate)


_POINTS = {"before": "capture starts 2 min before the first fault",
           "onset": "capture starts 1 min after the first fault's onset",
           "after": "capture starts 15 min after the first fault's onset"}

VARIANTS: dict[str, Variant] = {
    f"{name}@{point}": Variant(name, f"{name}: {text}; metrics keep their history; PodGroups named <job>-pg",
                               capture=point)
    for name in SCENARIOS if name not in ("healthy", "normal_life", "mixed") for point, text in _POINTS.items()
}
VARIANTS.update({
    "healthy@running": Variant("healthy", "healthy: watch and metrics start at minute 20 while every job runs; "
                               "PodGroups named <job>-pg", capture="running", metrics_history=False),
    "unexplained_slowdown@running": Variant("unexplained_slowdown", "unexplained_slowdown: watch and metrics start "
                                            "at minute 20, the slowdown comes at minute 30", capture="running",
                                            metrics_history=False),
    "healthy@slow_pull": Variant("healthy", "healthy: containers start 65-102 s after binding (cold image pull), "
                                 "coscheduling timeout 60 s", pg_suffix=None, slow_pull=True),
    # Normal life met in the middle: while every job runs, in the middle of a checkpoint pause (throughput ~0, no
    # history to compare it with), while a cold node pulls an image (ContainerCreating, Pulling).
    "normal_life@running": Variant("normal_life", "normal_life: watch and metrics start at minute 20; PodGroups named "
                                   "<job>-pg", capture="running", metrics_history=False),
    "normal_life@pause": Variant("normal_life", "normal_life: watch and metrics start in the middle of a checkpoint "
                                 "pause (throughput ~0 in the first samples)", capture="pause", metrics_history=False),
    "normal_life@pulling": Variant("normal_life", "normal_life: watch starts while a cold node pulls an image "
                                   "(ContainerCreating, a Pulling Event); metrics keep their history",
                                   capture="pulling"),
})


# Kubernetes 1.37 + Kueue v0.19 (issue 19): every scenario as such a cluster shows it, Kueue's
# UnadmittedWorkloadsObservability gate off (the v0.19 default) and on.
VARIANTS.update({
    f"{name}@k8s-1.37{suffix}": Variant(
        name, f"{name}: Kubernetes 1.37 native objects (v1beta1 + v1alpha3, Job controller's Workload/PodGroup, "
        f"basic by default, CompositePodGroup over a JobSet), Kueue v0.19 gate {gate}, HA metrics",
        pg_suffix=None, kueue_gate=gate)
    for name in SCENARIOS if name != "mixed" for suffix, gate in (("", "off"), ("-gate-on", "on"))
})
# The faults outside Kueue (a Volcano gang's IB flap, coscheduling / Volcano gangs that cannot schedule, healthy
# native gangs) on delegated child Jobs (1.37) and on 1.35 v1alpha1 Workload replicas.
VARIANTS.update({
    f"{name}@k8s-1.37-delegated": Variant(
        name, f"{name}: Kubernetes 1.37, every gang outside Kueue a JobSet whose child Job gets a PodGroup pointing at "
        "the JobSet's Workload (delegated), Kueue v0.19 gate off", pg_suffix=None, kueue_gate="off", delegated=True)
    for name in SCENARIOS if name != "mixed"
})
VARIANTS.update({
    f"{name}@k8s-1.35": Variant(
        name, f"{name}: Kubernetes 1.35, every gang outside Kueue a v1alpha1 Workload (basic driver + workers gang "
        "groups), pods joining through spec.workloadRef with a podGroupReplicaKey, two replicas per JobSet",
        pg_suffix=None, k8s_135=True)
    for name in SCENARIOS if name != "mixed"
})


# The jobs teams submit (issue 33): every scenario's jobs as the kinds that make them.
VARIANTS.update({
    f"{name}@{how}": Variant(name, f"{name}: every job submitted as a {kind} (its controller's labels and owner "
                             "references on the same pods)", pg_suffix=None, kind=how)
    for name in SCENARIOS if name != "mixed" for how, kind in KINDS.items()
})


def visible(j: SimJob, at: float | None) -> bool:
    """Whether gangscope, starting to watch at ``at``, can meet this run of a job: not when its objects were all
    deleted before then (a finished earlier run; a scheduler-preempted Job whose failed pods were deleted)."""
    if at is None:
        return True
    if j.deleted is not None and j.deleted <= at:
        return False
    return not (not j.kueue and j.evicted is not None and j.evicted + 31 <= at)
