"""The control-plane story of a scenario as a Kubernetes watch stream (CONTRACT section 2 replay format).

Each job walks the life a real cluster gives it: Job (suspended) → Kueue Workload → QuotaReserved /
Admitted (or a pending reason) → Pods with the TAS scheduling gate → bound → Running → PodsReady, with
the gang objects (coscheduling / Volcano / native PodGroup) following along, Events with the real reasons
and message templates, and evictions, re-admissions, completions and deletions where the scenario says.
"""

from __future__ import annotations

import copy
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from collectors.simulate import objects as o
from collectors.simulate import stories
from collectors.simulate.cluster import HOST_LABEL, det_uuid, node_object
from collectors.simulate.scenarios import MIN, STUCK, Scenario, SimJob

SETUP_AGE = timedelta(days=12)


class Timeline:
    """Collects watch events at scenario times, then writes them in time order with rising resourceVersions."""

    def __init__(self, start: datetime, rng: random.Random):
        self.start = start
        self.rng = rng
        self.items: list[tuple[float, int, str, dict[str, Any]]] = []
        self.nodes: dict[str, dict[str, Any]] = {}  # the Node objects, as last emitted (node stories change them)

    def ts(self, t: float) -> str:
        return (self.start + timedelta(seconds=int(t))).strftime("%Y-%m-%dT%H:%M:%SZ")

    def emit(self, t: float, etype: str, obj: dict[str, Any]) -> None:
        self.items.append((t, len(self.items), etype, copy.deepcopy(obj)))
        if obj.get("apiVersion") == "scheduling.k8s.io/v1beta1":
            # 1.37 serves one stored Workload / PodGroup as v1beta1 and v1alpha3: a capture may hold both views.
            self.items.append((t, len(self.items), etype, {**copy.deepcopy(obj),
                                                           "apiVersion": "scheduling.k8s.io/v1alpha3"}))

    def uid(self) -> str:
        return det_uuid(self.rng)

    def event(self, t: float, involved: dict[str, Any], etype: str, reason: str, message: str, component: str,
              repeat_every: float | None = None, until: float | None = None, action: str | None = None,
              host: str | None = None, field_path: str | None = None) -> None:
        ev = o.event(involved, etype, reason, message, self.ts(t), self.uid(), component, action=action, host=host,
                     field_path=field_path)
        self.emit(t, "ADDED", ev)
        if repeat_every and until:
            n, tt = 1, t + repeat_every
            while tt < until:
                n += 1
                ev["count"], ev["lastTimestamp"] = n, self.ts(tt)
                self.emit(tt, "MODIFIED", ev)
                tt += repeat_every

    def series(self, times: list[float], involved: dict[str, Any], etype: str, reason: str, message: str,
               component: str, host: str | None = None, field_path: str | None = None,
               every: float = 60.0) -> None:
        """One Event occurring at each of ``times``: ADDED at the first, then ``count`` and ``lastTimestamp``
        advancing, written at most once per ``every`` seconds (and at the last occurrence), as the event
        correlator aggregates repeats into updates of one object."""
        if not times:
            return
        ev = o.event(involved, etype, reason, message, self.ts(times[0]), self.uid(), component, host=host,
                     field_path=field_path)
        self.emit(times[0], "ADDED", ev)
        last = times[0]
        for n, tt in enumerate(times[1:], start=2):
            if tt - last >= every or n == len(times):
                ev["count"], ev["lastTimestamp"] = n, self.ts(tt)
                self.emit(tt, "MODIFIED", ev)
                last = tt

    def start_capture_at(self, t: float) -> None:
        """First contact: gangscope starts watching at ``t``. Every object that exists then arrives ADDED in
        the initial list, in its state at ``t`` (its history only in its own timestamps); what happened
        before is not in the stream, what happens after is watched as usual."""
        self.items.sort(key=lambda x: (x[0], x[1]))
        state: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
        for tt, _, etype, obj in self.items:
            if tt > t:
                break
            md = obj["metadata"]
            key = (obj["apiVersion"], obj["kind"], md.get("namespace"), md["name"])
            if etype == "DELETED":
                state.pop(key, None)
            else:
                state[key] = obj
        later = [x for x in self.items if x[0] > t]
        self.items = [(t, i, "ADDED", obj) for i, obj in enumerate(state.values())]
        self.items += [(tt, len(self.items) + i, etype, obj) for i, (tt, _, etype, obj) in enumerate(later)]

    def write(self, path: Path, first_rv: int = 4_812_000) -> int:
        self.items.sort(key=lambda x: (x[0], x[1]))
        rv = first_rv
        last = self.start
        with path.open("w") as f:
            for t, _, etype, obj in self.items:
                rv += 1 + self.rng.randrange(3)
                obj["metadata"]["resourceVersion"] = str(rv)
                # watch delivery lag, never reordering the stream
                observed = max(last, self.start + timedelta(seconds=t, milliseconds=40 + self.rng.randrange(400)))
                last = observed
                f.write(json.dumps({"type": etype, "object": obj,
                                    "observedAt": observed.isoformat(timespec="milliseconds").replace("+00:00", "Z")},
                                   separators=(",", ":")))
                f.write("\n")
        return len(self.items)


def build(scn: Scenario, start: datetime) -> Timeline:
    tl = Timeline(start, random.Random(f"{scn.seed}:{scn.name}:k8s"))
    setup = (start - SETUP_AGE).strftime("%Y-%m-%dT%H:%M:%SZ")
    for n in scn.cluster.nodes:
        tl.nodes[n.name] = node_object(n, setup, tl.ts(0))
        tl.emit(0, "ADDED", tl.nodes[n.name])
    tl.emit(0, "ADDED", o.topology(setup, tl.uid()))
    tl.emit(0, "ADDED", o.resource_flavor(setup, tl.uid()))
    gpus = scn.cluster.gpus
    queues = {"team-a": ("team-a-cq", "ml-research", gpus * 2, False), "team-b": ("team-b-cq", "team-b", 16, False),
              "team-c": ("team-c-cq", "team-c", 16, True)}
    for lq, (cq, ns, quota, preempt) in queues.items():
        tl.emit(0, "ADDED", o.cluster_queue(cq, quota, setup, tl.uid(), preempt))
        tl.emit(0, "ADDED", o.local_queue(lq, ns, cq, setup, tl.uid()))
    tl.emit(0, "ADDED", o.local_queue("team-a", "ml-platform", "team-a-cq", setup, tl.uid()))
    for j in sorted(scn.jobs, key=lambda j: j.created):
        _job(tl, j, scn)
    stories.nodes(tl, scn)
    return tl


def _job(tl: Timeline, j: SimJob, scn: Scenario) -> None:
    end = scn.duration
    c = j.created
    job = o.batch_job(j, tl.ts(c)) if j.kind == "Job" else o.jobset(j, tl.ts(c))
    tl.emit(c, "ADDED", job)
    wl = pg = nwl = None
    if j.kueue:
        wl = o.workload(j, tl.ts(c + 1))
        tl.emit(c + 1, "ADDED", wl)
        tl.event(c + 1, job, "Normal", "CreatedWorkload", f"Created Workload: {j.namespace}/{j.workload}",
                 _kueue_job_controller(j))
    if j.gang == "coscheduling":
        pg = o.coscheduling_podgroup(j, tl.ts(c + 1))
    elif j.gang == "volcano":
        pg = o.volcano_podgroup(j, tl.ts(c + 1))
    elif j.gang == "native":
        nwl = o.native_workload(j, tl.ts(c + 1))
        tl.emit(c + 1, "ADDED", nwl)
        if j.composite:
            tl.emit(c + 1, "ADDED", o.native_composite(j, tl.ts(c + 1)))
        if j.delegated:
            tl.emit(c + 1, "ADDED", o.delegated_child_job(j, tl.ts(c + 1)))
        if j.k8s != "1.35":  # 1.35 has no PodGroup object: pods name the Workload
            pg = o.native_podgroup(j, tl.ts(c + 1))
    if pg is not None:
        tl.emit(c + 1, "ADDED", pg)

    if j.pending is not None and wl is not None:
        reason, msg = j.pending
        if j.kueue_gate == "off":  # v0.19 default: the scheduler writes Pending, the controller Inadmissible
            reason = "Inadmissible" if reason in ("Misconfigured", "Suspended") else "Pending"
        wl["status"]["resourceRequests"] = o.resource_requests(j)
        o.set_condition(wl, o.condition("QuotaReserved", "False", reason, msg, tl.ts(c + 3)))
        o.set_condition(wl, o.condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded",
                                        tl.ts(c + 3)))
        tl.emit(c + 3, "MODIFIED", wl)
        tl.event(c + 3, wl, "Warning", reason, msg, "kueue-admission", repeat_every=5 * MIN, until=end)
        return

    a = j.admitted if j.kueue else c
    assert a is not None
    if wl is not None:
        _admit(tl, j, wl, job, a, c)
    pods = _create_pods(tl, j, job, a + 2, j.pod_names, j.pod_uids)
    if pg is not None and j.gang == "coscheduling":
        pg["status"] = {"phase": "Scheduling", "occupiedBy": f"{j.namespace}/{j.name}"}
        tl.emit(a + 3, "MODIFIED", pg)
    if pg is not None and j.gang == "volcano":
        pg["status"] = {"phase": "Inqueue", "conditions": []}
        tl.emit(a + 3, "MODIFIED", pg)

    placed = j.placed
    if j.volcano_unschedulable and pg is not None:
        _volcano_unschedulable(tl, j, pg, pods, a + 5, end)
        return
    if placed is not None:
        _bind(tl, j, pods, placed)
    if len(j.nodes) < j.pods:
        _unschedulable(tl, j, pods[len(j.nodes):], (placed or a) + 1, end)
        if pg is not None and j.gang == "native" and j.k8s == "1.37" and not placed:
            _native_unschedulable(tl, j, pg, (placed or a) + 1)
    life = stories.Life(j, job, wl, pg, pods, scn, stories.child(tl, j, a + 1))
    if j.startup in STUCK and placed is not None:
        stories.stuck(tl, life)
        if j.fixed_at is None or j.running is None:
            return
        stories.fixed(tl, life)
    if j.running is None:
        if j.nodes:
            _run(tl, j, pods[:len(j.nodes)], placed + j.pull_s if placed else a + 30, placed)
        return
    r = j.running
    if j.startup == "slow_pull" and placed is not None:
        stories.slow_pull(tl, life, placed, r)
    _run(tl, j, pods, r, placed)
    if wl is not None:
        o.set_condition(wl, o.condition("PodsReady", "True", "Started",
                                        "All pods reached readiness and the workload is running", tl.ts(r + 1)))
        tl.emit(r + 1, "MODIFIED", wl)
    _gang_running(tl, j, pg, r + 2)
    stories.running(tl, life, r + 1)
    if j.crash == "oom":
        stories.oom(tl, life)
    elif j.crash == "nccl":
        pods = stories.nccl(tl, life)
    if j.disrupted is not None:
        stories.disrupted(tl, life)

    if j.evicted is not None and wl is None:
        _scheduler_preemption(tl, j, job, pods, j.evicted)
    if j.evicted is not None and wl is not None and j.evict_reason == "Preempted":
        _evict(tl, j, wl, job, pods, j.evicted, scn)
        if j.readmit is not None:
            _admit(tl, j, wl, job, j.readmit, j.evicted, requeued=True)
            pods = _create_pods(tl, j, job, j.readmit + 2, j.pod_names2, j.pod_uids2)
            _bind(tl, j, pods, j.readmit + 6)
            _run(tl, j, pods, j.readmit + 30, j.readmit + 6)
            o.set_condition(wl, o.condition("PodsReady", "True", "Started",
                                            "All pods reached readiness and the workload is running",
                                            tl.ts(j.readmit + 31)))
            tl.emit(j.readmit + 31, "MODIFIED", wl)
    if j.end is not None and j.end < end:
        _finish(tl, j, wl, job, pods, pg, j.end)
    if j.deleted is not None and j.deleted < end:
        for p in pods:
            tl.emit(j.deleted, "DELETED", p)
        for obj in (pg, nwl, wl, job):
            if obj is not None:
                tl.emit(j.deleted + 1, "DELETED", obj)


def _kueue_job_controller(j: SimJob) -> str:
    """The recorder Kueue's integration reconciler reports its Job Events with (``<framework>-kueue-controller``)."""
    return "batch/job-kueue-controller" if j.kind == "Job" else "jobset.x-k8s.io/jobset-kueue-controller"


def _admit(tl: Timeline, j: SimJob, wl: dict, job: dict, a: float, queued: float,
           requeued: bool | tuple[str, str] = False) -> None:
    """Kueue reserves quota and admits; ``requeued``: a re-admission after an eviction (its Requeued condition
    written at the eviction), or the (reason, message) Requeued carries by now (BackoffFinished)."""
    cq = j.cq
    wl["status"].pop("resourceRequests", None)
    wl["status"]["admission"] = o.admission(j, cq)
    if isinstance(requeued, tuple):
        o.set_condition(wl, o.condition("Requeued", "True", *requeued, tl.ts(a - 1)))
    o.set_condition(wl, o.condition("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}",
                                    tl.ts(a)))
    o.set_condition(wl, o.condition("Admitted", "True", "Admitted", "The workload is admitted", tl.ts(a)))
    o.set_condition(wl, o.condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded",
                                    tl.ts(a)))
    if requeued:
        for c in wl["status"]["conditions"]:
            if c["type"] == "Evicted":
                c.update(status="False", reason="QuotaReserved", message=f"Previously: {c['message']}",
                         lastTransitionTime=tl.ts(a))
    tl.emit(a, "MODIFIED", wl)
    tl.event(a, wl, "Normal", "QuotaReserved",
             f"Quota reserved in ClusterQueue {cq}, wait time since queued was {a - queued:.0f}s", "kueue-admission")
    tl.event(a, wl, "Normal", "Admitted", f"Admitted by ClusterQueue {cq}, wait time since reservation was 0s",
             "kueue-admission")
    if j.kind == "Job":
        job["spec"]["suspend"] = False
        job["status"] = {"active": j.pods, "startTime": tl.ts(a + 1), "ready": 0}
    else:
        job["spec"]["suspend"] = False
        job["status"] = {"replicatedJobsStatus": [{"name": "workers", "active": 1, "ready": 0, "succeeded": 0,
                                                    "failed": 0, "suspended": 0}]}
    tl.emit(a + 1, "MODIFIED", job)
    tl.event(a + 1, job, "Normal", "Started", f"Admitted by clusterQueue {cq}", _kueue_job_controller(j))


def _create_pods(tl: Timeline, j: SimJob, job: dict, t: float, names: list[str], uids: list[str],
                 only: list[int] | None = None, owner: dict | None = None) -> list[dict]:
    """Create the job's pods (``only`` some indexes: replacements), owned by the Job (or the given child Job)."""
    pods = []
    for i in range(j.pods) if only is None else only:
        p = o.pod(j, i, names[i], uids[i], tl.ts(t), j.cq if j.kueue else None)
        if owner is not None:
            p["metadata"]["ownerReferences"] = [o.owner("batch/v1", "Job", owner["metadata"]["name"],
                                                        owner["metadata"]["uid"])]
            attempt = owner["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
            p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] = attempt
        p["status"]["conditions"] = [o.pod_condition("PodScheduled", "False", tl.ts(t), "SchedulingGated",
                                                     "Scheduling is blocked due to non-empty scheduling gates")] \
            if p["spec"].get("schedulingGates") else []
        tl.emit(t + 0.01 * i, "ADDED", p)
        if j.kind == "Job":  # the Job controller's record of each pod (a JobSet's child Jobs are not modelled)
            tl.event(t + 0.01 * i, job, "Normal", "SuccessfulCreate", f"Created pod: {names[i]}", "job-controller")
        pods.append(p)
    return pods


def _scheduler(j: SimJob) -> str:
    return {"coscheduling": "scheduler-plugins-scheduler", "volcano": "volcano"}.get(j.gang, "default-scheduler")


def _bind(tl: Timeline, j: SimJob, pods: list[dict], t: float) -> None:
    for i, p in enumerate(pods[:len(j.nodes)]):
        node = j.nodes[i]
        tt = t + 0.2 * i
        if p["spec"].pop("schedulingGates", None) is not None:
            # The TopologyUngater merges the pod's domain into its nodeSelector as it removes the gate.
            p["spec"]["nodeSelector"] = dict(p["spec"].get("nodeSelector", {}), **{HOST_LABEL: node.name})
            p["status"]["conditions"] = []
            tl.emit(tt - 1, "MODIFIED", p)
        p["spec"]["nodeName"] = node.name
        p["status"]["conditions"] = [o.pod_condition("PodScheduled", "True", tl.ts(tt))]
        tl.emit(tt, "MODIFIED", p)
        tl.event(tt, p, "Normal", "Scheduled", f"Successfully assigned {j.namespace}/{p['metadata']['name']} to "
                 f"{node.name}", _scheduler(j), action="Binding")


def _run(tl: Timeline, j: SimJob, pods: list[dict], t: float, bound: float | None) -> None:
    """Containers start at ``t`` (+0.3 s per pod); pod ``i`` was bound at ``bound`` + 0.2 s x i (``_bind``)."""
    for i, p in enumerate(pods):
        node = j.nodes[i]
        tt = t + 0.3 * i
        ts = tl.ts(tt)
        bt = (bound if bound is not None else t - 20) + 0.2 * i
        p["status"].update({
            "phase": "Running", "hostIP": node.ip, "hostIPs": [{"ip": node.ip}],
            "podIP": f"192.168.{node.index % 256}.{10 + i}", "startTime": tl.ts(bt + 1),
            "containerStatuses": [{"name": "trainer", "image": o.IMAGE, "imageID": "", "ready": True,
                                   "restartCount": 0, "started": True, "state": {"running": {"startedAt": ts}},
                                   "containerID": f"containerd://{tl.uid().replace('-', '')}"}],
        })
        p["status"]["conditions"] = [
            o.pod_condition("PodReadyToStartContainers", "True", tl.ts(tt - 5)),
            o.pod_condition("Initialized", "True", tl.ts(bt + 1)),
            o.pod_condition("Ready", "True", ts), o.pod_condition("ContainersReady", "True", ts),
            o.pod_condition("PodScheduled", "True", tl.ts(bt)),
        ]
        tl.emit(tt, "MODIFIED", p)
        tl.event(tt - 2, p, "Normal", "Started", "Started container trainer", "kubelet")


def _gang_running(tl: Timeline, j: SimJob, pg: dict | None, t: float) -> None:
    if pg is None:
        return
    if j.gang == "coscheduling":
        pg["status"] = {"phase": "Running", "running": j.pods, "occupiedBy": f"{j.namespace}/{j.name}"}
        tl.emit(t, "MODIFIED", pg)
    elif j.gang == "volcano":
        pg["status"] = {"phase": "Running", "running": j.pods, "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready to be scheduled",
             "message": "", "transitionID": tl.uid(), "lastTransitionTime": tl.ts(t)}]}
        tl.emit(t, "MODIFIED", pg)
        tl.event(t, pg, "Normal", "Scheduled", "pod group is ready", "volcano")
    elif j.gang == "native":
        placed = j.placed or t
        ctype = "PodGroupInitiallyScheduled" if j.k8s == "1.37" else "PodGroupScheduled"
        pg["status"] = {"conditions": [o.condition(ctype, "True", "Scheduled", "", tl.ts(placed))]}
        tl.emit(placed + 0.5, "MODIFIED", pg)


def _unschedulable(tl: Timeline, j: SimJob, pods: list[dict], t: float, end: float) -> None:
    msg = j.unschedulable or "0/0 nodes are available"
    for p in pods:
        p["spec"].pop("schedulingGates", None)
        p["status"]["conditions"] = [o.pod_condition("PodScheduled", "False", tl.ts(t), "Unschedulable", msg)]
        tl.emit(t, "MODIFIED", p)
        tl.event(t, p, "Warning", "FailedScheduling", msg, _scheduler(j), repeat_every=5 * MIN, until=end,
                 action="Scheduling")
    if j.gang == "coscheduling" and j.schedule_timeout:
        wait = j.schedule_timeout
        wait_s = f"{wait // 60}m{wait % 60}s" if wait >= 60 else f"{wait}s"
        tl.event(t + wait, pods[0], "Warning", "FailedScheduling",
                 f"rejected due to timeout after waiting {wait_s} at plugin Coscheduling", _scheduler(j),
                 repeat_every=5 * MIN, until=end, action="Scheduling")


def _native_unschedulable(tl: Timeline, j: SimJob, pg: dict, t: float) -> None:
    """The 1.37 scheduler's verdict on a gang that no placement holds (the count of the pod it was placing left
    out of "remaining", as kube-scheduler 1.37.2 writes it)."""
    msg = (f"pod group is unschedulable, 0/1 placements are available, first placement status: minCount ({j.pods}) "
           f"cannot be satisfied: 0 scheduled, {j.pods - 1} remaining")
    pg["status"] = {"conditions": [o.condition("PodGroupInitiallyScheduled", "False", "Unschedulable", msg,
                                               tl.ts(t))]}
    tl.emit(t + 0.5, "MODIFIED", pg)


def _volcano_unschedulable(tl: Timeline, j: SimJob, pg: dict, pods: list[dict], t: float, end: float) -> None:
    n = j.pods
    msg = (f"{n}/{n} tasks in gang unschedulable: pod group is not ready, {n} Pending, {n} minAvailable; "
           f"Pending: {n} Unschedulable")
    pg["status"] = {"phase": "Pending", "conditions": [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": msg,
         "transitionID": tl.uid(), "lastTransitionTime": tl.ts(t)}]}
    tl.emit(t, "MODIFIED", pg)
    tl.event(t, pg, "Warning", "Unschedulable", msg, "volcano", repeat_every=5 * MIN, until=end)
    _unschedulable(tl, j, pods, t + 1, end)


def _evict(tl: Timeline, j: SimJob, wl: dict, job: dict, pods: list[dict], t: float, scn: Scenario) -> None:
    pre = j.preemptor
    pre_wl = pre.workload if pre else "unknown"
    msg = (f"Preempted to accommodate a workload (UID: {pre.wl_uid if pre else ''}, JobUID: {pre.uid if pre else ''}) "
           f"due to prioritization in the ClusterQueue; preemptor path: /{j.cq}; preemptee path: /{j.cq}")
    wl["status"].pop("admission", None)
    o.set_condition(wl, o.condition("Evicted", "True", "Preempted", msg, tl.ts(t)))
    o.set_condition(wl, o.condition("Preempted", "True", "InClusterQueue", msg, tl.ts(t)))
    need = j.pods * j.gpus_per_pod
    o.set_condition(wl, o.condition("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set "
                                    f"{o.podset_name(j)}: insufficient unused quota for nvidia.com/gpu in flavor "
                                    f"tas-flavor, {need} more needed", tl.ts(t + 1)))
    o.set_condition(wl, o.condition("Admitted", "False", "NoReservation", "The workload has no reservation",
                                    tl.ts(t + 1)))
    o.set_condition(wl, o.condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded",
                                    tl.ts(t + 1)))
    # Requeued at once, with the eviction's message; no requeueState (that is waitForPodsReady's backoff).
    o.set_condition(wl, o.condition("Requeued", "True", "Preempted", msg, tl.ts(t)))
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]}
    wl["status"]["accumulatedPastExecutionTimeSeconds"] = max(0, int(t - (j.admitted or j.created)))
    tl.emit(t, "MODIFIED", wl)
    prio = f"preemptor effective priority: {pre.priority if pre else 0} (base: {pre.priority if pre else 0}, " \
           f"boost: 0); preemptee effective priority: {j.priority} (base: {j.priority}, boost: 0)"
    tl.event(t, wl, "Normal", "Preempted", f"{msg}; {prio}", "kueue-admission")
    tl.event(t, wl, "Normal", "EvictedDueToPreempted", msg, "kueue-admission")
    if pre is not None:
        tl.event(t, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                     "metadata": {"name": pre_wl, "namespace": pre.namespace, "uid": pre.wl_uid}},
                 "Normal", "PreemptedWorkload", f"Preempted workload {j.namespace}/{j.workload} (UID: {j.wl_uid}) in "
                 f"ClusterQueue "
                 f"{j.cq}; {prio}", "kueue-admission")
    job["spec"]["suspend"] = True
    tl.emit(t + 1, "MODIFIED", job)
    tl.event(t + 1, job, "Normal", "Stopped", msg, _kueue_job_controller(j))
    for p in pods:
        p["metadata"]["deletionTimestamp"] = tl.ts(t + 2)
        p["metadata"]["deletionGracePeriodSeconds"] = 30
        tl.emit(t + 2, "MODIFIED", p)
        tl.event(t + 2, p, "Normal", "Killing", "Stopping container trainer", "kubelet")
        p["status"]["phase"] = "Failed"
        _not_ready(p, tl.ts(t + 20), "PodFailed")
        for cs in p["status"].get("containerStatuses", []):
            cs.update(ready=False, state={"terminated": {"exitCode": 143, "reason": "Error",
                                                         "startedAt": cs["state"].get("running", {}).get("startedAt"),
                                                         "finishedAt": tl.ts(t + 20)}})
        tl.emit(t + 20, "MODIFIED", p)
        tl.emit(t + 22, "DELETED", p)


def _not_ready(p: dict, ts: str, reason: str) -> None:
    for c in p["status"].get("conditions", []):
        if c["type"] in ("Ready", "ContainersReady") and c["status"] == "True":
            c.update(status="False", reason=reason, lastTransitionTime=ts)


def _finish(tl: Timeline, j: SimJob, wl: dict | None, job: dict, pods: list[dict], pg: dict | None, t: float) -> None:
    for p in pods:
        p["status"]["phase"] = "Succeeded"
        for cs in p["status"].get("containerStatuses", []):
            cs.update(ready=False, state={"terminated": {"exitCode": 0, "reason": "Completed",
                                                         "startedAt": cs["state"].get("running", {}).get("startedAt"),
                                                         "finishedAt": tl.ts(t)}})
        _not_ready(p, tl.ts(t), "PodCompleted")
        tl.emit(t, "MODIFIED", p)
    if j.kind == "Job":
        job["status"] = {"succeeded": j.pods, "completionTime": tl.ts(t + 1), "startTime": job["status"].get(
            "startTime"), "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
             "message": "Reached expected number of succeeded pods", "lastTransitionTime": tl.ts(t + 1)},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached",
             "message": "Reached expected number of succeeded pods", "lastTransitionTime": tl.ts(t + 1)}]}
    else:
        job["status"] = {"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                                         "message": "jobset completed successfully",
                                         "lastTransitionTime": tl.ts(t + 1)}]}
    tl.emit(t + 1, "MODIFIED", job)
    if j.kind == "Job":
        tl.event(t + 1, job, "Normal", "Completed", "Job completed", "job-controller")
    if wl is not None:
        # Kueue's Finished message is the job's own terminal condition message (reference kueue_workload-finished)
        done = job["status"]["conditions"][-1]["message"]
        o.set_condition(wl, o.condition("Finished", "True", "Succeeded", done, tl.ts(t + 2)))
        tl.emit(t + 2, "MODIFIED", wl)
        tl.event(t + 2, job, "Normal", "FinishedWorkload", f"Workload '{j.namespace}/{j.workload}' is declared "
                 "finished", _kueue_job_controller(j))
    if pg is not None and j.gang == "coscheduling":
        pg["status"] = {"phase": "Finished", "succeeded": j.pods, "occupiedBy": f"{j.namespace}/{j.name}"}
        tl.emit(t + 2, "MODIFIED", pg)
    elif pg is not None and j.gang == "volcano":
        pg["status"]["phase"] = "Completed"
        tl.emit(t + 2, "MODIFIED", pg)


def _scheduler_preemption(tl: Timeline, j: SimJob, job: dict, pods: list[dict], t: float) -> None:
    """kube-scheduler preempts the last pod for a higher-priority pod; with backoffLimit 0 the Job fails."""
    victim, node = pods[-1], j.nodes[len(pods) - 1]
    pre = j.preemptor
    pre_uid = pre.pod_uids[0] if pre else tl.uid()
    victim["status"]["conditions"].append(o.pod_condition(
        "DisruptionTarget", "True", tl.ts(t), "PreemptionByScheduler",
        "default-scheduler: preempting to accommodate a higher priority pod"))
    victim["metadata"]["deletionTimestamp"] = tl.ts(t + 30)
    victim["metadata"]["deletionGracePeriodSeconds"] = 30
    tl.emit(t, "MODIFIED", victim)
    tl.event(t, victim, "Normal", "Preempted", f"Preempted by pod {pre_uid} on node {node.name}", "default-scheduler",
             action="Preempting")
    for p in pods:
        p["status"]["phase"] = "Failed"
        _not_ready(p, tl.ts(t + 15), "PodFailed")
        for cs in p["status"].get("containerStatuses", []):
            cs.update(ready=False, state={"terminated": {"exitCode": 143 if p is victim else 1, "reason": "Error",
                                                         "startedAt": cs["state"].get("running", {}).get("startedAt"),
                                                         "finishedAt": tl.ts(t + 15)}})
        tl.emit(t + 15, "MODIFIED", p)
    job["status"] = {"failed": j.pods, "startTime": tl.ts(j.created), "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit", "lastTransitionTime": tl.ts(t + 16)},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit", "lastTransitionTime": tl.ts(t + 16)}]}
    tl.emit(t + 16, "MODIFIED", job)
    tl.event(t + 16, job, "Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit",
             "job-controller")
    for p in pods:
        tl.emit(t + 31, "DELETED", p)
