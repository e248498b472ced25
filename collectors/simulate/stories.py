"""The Kubernetes side of what stops real runs beyond scheduling and interconnect (issue 31), and of normal life.

Each story writes what the real components write, in the shapes of ``shared/reference/field/`` (field-notes.md
names each source): the kubelet's container states, messages and Events (image pulls, config errors, volume
mounts, crash loops), the Job and JobSet controllers' conditions and restarts, the node-lifecycle and
taint-eviction controllers on a lost node, a drain through the Eviction API, a GPU the device plugin reports
Unhealthy (NVSentinel's quarantine), and Kueue's PodsReadyTimeout and NodeFailures evictions. The timing is
the scenario's (``SimJob`` / ``Fault``), so the telemetry tells the same story.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from collectors.simulate import objects as o
from collectors.simulate import timeline as T
from collectors.simulate.scenarios import (
    DRAIN_EVICT_S,
    DRAIN_GRACE_S,
    MIN,
    NCCL_TIMEOUT_S,
    RESTART_PLACE_S,
    RESTART_RUN_S,
    Fault,
    Scenario,
    SimJob,
)

NOT_READY_S = 40.0  # nodeMonitorGracePeriod: the node-lifecycle controller marks a silent node Unknown
TOLERATION_S = 300.0  # DefaultTolerationSeconds on the unreachable NoExecute taint
TAINT_EVICT_S = NOT_READY_S + 2 + TOLERATION_S  # the taint manager deletes the pods (NoExecute taint at +42 s)
QUARANTINE_LABEL = "k8saas.nvidia.com/"  # NVSentinel fault-quarantine's default label prefix
PULL_BACKOFF = (10.0, 20.0, 40.0, 80.0, 160.0, 300.0)  # the kubelet's image pull back-off, 5 min cap
KUBELET = "kubelet"


@dataclass
class Life:
    """One job run's objects as the timeline built them, passed from story to story."""

    j: SimJob
    job: dict[str, Any]
    wl: dict[str, Any] | None
    pg: dict[str, Any] | None
    pods: list[dict[str, Any]]
    scn: Scenario
    child: dict[str, Any] | None  # a JobSet's child Job (``SimJob.children``)


def _ctr(p: dict) -> dict:
    return p["status"]["containerStatuses"][0]


def _cond(obj: dict, ctype: str) -> dict | None:
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == ctype), None)


def _set_pod_cond(p: dict, ctype: str, status: str, ts: str, reason: str | None = None,
                  message: str | None = None) -> None:
    """Change a pod condition's status (its transition time only when the status changes)."""
    c = _cond(p, ctype)
    if c is None:
        p["status"].setdefault("conditions", []).append(o.pod_condition(ctype, status, ts, reason, message))
        return
    if c["status"] != status:
        c.update(status=status, lastTransitionTime=ts)
    for k, v in (("reason", reason), ("message", message)):
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v


def _ref(p: dict) -> str:
    """format.Pod: ``name_namespace(uid)``, as the kubelet names a pod in its messages."""
    md = p["metadata"]
    return f"{md['name']}_{md['namespace']}({md['uid']})"


def go_duration(s: float) -> str:
    """Go's time.Duration.String() for whole seconds: 10s, 1m20s, 5m0s."""
    s = int(s)
    return f"{s // 60}m{s % 60}s" if s >= 60 else f"{s}s"


def _job_cond(job: dict, ctype: str, status: str, reason: str, message: str, ts: str) -> None:
    """A batch/v1 Job condition (with lastProbeTime, as the Job controller writes it)."""
    c = {"type": ctype, "status": status, "reason": reason, "message": message, "lastProbeTime": ts,
         "lastTransitionTime": ts}
    conds = job["status"].setdefault("conditions", [])
    for i, x in enumerate(conds):
        if x["type"] == ctype:
            conds[i] = c if x["status"] != status else dict(c, lastTransitionTime=x["lastTransitionTime"])
            return
    conds.append(c)


# --- JobSet child Jobs ---------------------------------------------------------------------------------------

def child(tl: T.Timeline, j: SimJob, t: float) -> dict | None:
    """The JobSet controller creates the child Job once the JobSet is not suspended (``SimJob.children``)."""
    if j.kind != "JobSet" or not j.children or j.delegated or j.pending is not None:
        return None
    c = o.child_job(j, tl.ts(t), j.child_uid, 0)
    tl.emit(t, "ADDED", c)
    tl.event(t, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                 "metadata": {"name": j.name, "namespace": j.namespace, "uid": j.uid}},
             "Normal", "SuccessfulCreate", f"Created Job: {c['metadata']['name']}", "jobset")
    return c


def running(tl: T.Timeline, life: Life, t: float) -> None:
    """Every pod runs: the child Job counts them ready, the JobSet its replicated job."""
    j = life.j
    if life.child is not None:
        life.child["status"].update(active=j.pods, ready=j.pods)
        tl.emit(t, "MODIFIED", life.child)
    if j.kind == "Job" and j.crash == "oom":
        life.job["status"].update(active=j.pods, ready=j.pods)
        tl.emit(t, "MODIFIED", life.job)


# --- start-up: pulls, config errors, volumes -----------------------------------------------------------------

def _pull_error(image: str) -> str:
    return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": failed to resolve '
            f'reference "{image}": {image}: not found')


def _registry_error(image: str) -> str:
    """The image manager's rewrite of a pull that failed because the registry did not answer (field notes 1)."""
    host = image.split("/", 1)[0]
    return (f"image pull failed for {image} because the registry is unavailable: rpc error: code = Unavailable "
            f'desc = failed to pull and unpack image "{image}": failed to resolve reference "{image}": failed to do '
            f'request: Head "https://{host}/v2/": dial tcp 10.96.0.25:443: connect: connection refused')


def _pending_status(tl: T.Timeline, j: SimJob, p: dict, i: int, bound: float, sandbox: bool,
                    waiting: dict) -> None:
    """A bound pod whose container has not started: phase Pending, ContainersNotReady, the waiting state."""
    node = j.nodes[i]
    b = tl.ts(bound + 1)
    p["status"].update({"phase": "Pending", "hostIP": node.ip, "hostIPs": [{"ip": node.ip}], "startTime": b})
    if sandbox:
        p["status"].update(podIP=f"192.168.{node.index % 256}.{10 + i}",
                           podIPs=[{"ip": f"192.168.{node.index % 256}.{10 + i}"}])
    unready = "containers with unready status: [trainer]"
    p["status"]["conditions"] = [
        o.pod_condition("PodReadyToStartContainers", "True" if sandbox else "False", tl.ts(bound + 2)),
        o.pod_condition("Initialized", "True", b),
        o.pod_condition("Ready", "False", b, "ContainersNotReady", unready),
        o.pod_condition("ContainersReady", "False", b, "ContainersNotReady", unready),
        o.pod_condition("PodScheduled", "True", tl.ts(bound)),
    ]
    p["status"]["containerStatuses"] = [{"name": "trainer", "image": j.image, "imageID": "", "ready": False,
                                         "started": False, "restartCount": 0, "state": {"waiting": waiting}}]


def _backoff_syncs(t0: float, t1: float, every: float = 15.0) -> list[float]:
    out, t = [], t0
    while t < t1:
        out.append(t)
        t += every
    return out


def _fails_to_start(tl: T.Timeline, j: SimJob, p: dict, i: int, bound: float, until: float) -> None:
    """The kubelet's side of a pod whose containers never start, from binding until ``until``."""
    node = j.nodes[i].name
    fp = "spec.containers{trainer}"
    if j.startup in ("image_pull", "registry"):
        err = _pull_error(j.image) if j.startup == "image_pull" else _registry_error(j.image)
        name = "ErrImagePull" if j.startup == "image_pull" else "RegistryUnavailable"
        _pending_status(tl, j, p, i, bound, True, {"reason": "ContainerCreating"})
        tl.emit(bound + 1, "MODIFIED", p)
        pulls, fails, backoffs = [], [], []
        t, k = bound + 3, 0
        while t < until:
            pulls.append(t)
            fail = t + 2
            if fail >= until:
                break
            fails.append(fail)
            _ctr(p)["state"] = {"waiting": {"reason": name, "message": err}}
            tl.emit(fail, "MODIFIED", p)
            if fail + 1 < until:
                # 1.33+ kubelets append the last pull error (prevPullErrMsg) to the back-off message.
                _ctr(p)["state"] = {"waiting": {"reason": "ImagePullBackOff", "message":
                                                f'Back-off pulling image "{j.image}": {name}: {err}'}}
                tl.emit(fail + 1, "MODIFIED", p)
            nxt = fail + PULL_BACKOFF[min(k, len(PULL_BACKOFF) - 1)]
            backoffs += _backoff_syncs(fail + 1, min(nxt, until))
            t, k = nxt, k + 1
        tl.series(pulls, p, "Normal", "Pulling", f'Pulling image "{j.image}"', KUBELET, node, fp)
        tl.series(fails, p, "Warning", "Failed", f'Failed to pull image "{j.image}": {err}', KUBELET, node, fp)
        tl.series(fails, p, "Warning", "Failed", f"Error: {name}", KUBELET, node, fp)
        tl.series(backoffs, p, "Normal", "BackOff", f'Back-off pulling image "{j.image}"', KUBELET, node, fp)
        tl.series(backoffs, p, "Warning", "Failed", "Error: ImagePullBackOff", KUBELET, node, fp)
    elif j.startup == "config_error":
        msg = f'secret "{o.MISSING_SECRET}" not found'
        _pending_status(tl, j, p, i, bound, True, {"reason": "CreateContainerConfigError", "message": msg})
        tl.emit(bound + 2, "MODIFIED", p)
        tries = _backoff_syncs(bound + 2, until, 13.0)
        tl.series(tries, p, "Normal", "Pulled", f'Container image "{j.image}" already present on machine',
                  KUBELET, node, fp)
        tl.series(tries, p, "Warning", "Failed", f"Error: {msg}", KUBELET, node, fp)
    elif j.startup == "mount":
        _pending_status(tl, j, p, i, bound, False, {"reason": "ContainerCreating"})
        tl.emit(bound + 1, "MODIFIED", p)
        setups, t, d = [], bound + 2, 0.5
        while t < until:  # the operation executor's exponential back-off, capped at 2m2s
            setups.append(t)
            t, d = t + d, min(d * 2, 122.0)
        tl.series(setups, p, "Warning", "FailedMount",
                  f'MountVolume.SetUp failed for volume "{o.CONFIG_VOLUME}" : configmap "{o.MISSING_CONFIGMAP}" '
                  "not found", KUBELET, node)
        tl.series(_backoff_syncs(bound + 125, until, 123.0), p, "Warning", "FailedMount",
                  f"Unable to attach or mount volumes: unmounted volumes=[{o.CONFIG_VOLUME}], unattached volumes=[], "
                  "failed to process volumes=[]: timed out waiting for the condition", KUBELET, node)


def stuck(tl: T.Timeline, life: Life) -> None:
    """Bound pods whose containers never start. Under Kueue (waitForPodsReady, on by default since v0.19) the
    Workload is evicted PodsReadyTimeout 30 min after admission, re-queued after its back-off, re-admitted,
    and its new pods fail the same way, until the scenario ends."""
    j, end = life.j, life.j.stuck_until(life.scn.duration)
    if j.gang == "native":
        T._gang_running(tl, j, life.pg, (j.placed or 0.0) + 1)  # the scheduler placed the whole group
    if life.wl is None:
        for i, p in enumerate(life.pods[:len(j.nodes)]):
            _fails_to_start(tl, j, p, i, (j.placed or 0.0) + 0.2 * i, end)
        return
    wl, job = life.wl, life.job
    pods, ev_prev = life.pods, 0.0
    for k, (a, ev, rq) in enumerate(j.timeout_cycles(end)):
        if k:
            T._admit(tl, j, wl, job, a, ev_prev, requeued=("BackoffFinished", "The workload backoff was finished"))
            _job_cond(job, "Suspended", "False", "JobResumed", "Job resumed", tl.ts(a + 1))
            tl.emit(a + 1, "MODIFIED", job)
            tl.event(a + 1, job, "Normal", "Resumed", "Job resumed", "job-controller")
            names, uids = j.generation(k)
            pods = T._create_pods(tl, j, job, a + 2, names, uids)
            T._bind(tl, j, pods, a + 6)
        for i, p in enumerate(pods):
            _fails_to_start(tl, j, p, i, a + 6 + 0.2 * i, ev if ev is not None else end)
        if ev is None or rq is None:
            return
        _pods_ready_timeout(tl, life, pods, ev, rq, k + 1)
        ev_prev = ev


def fixed(tl: T.Timeline, life: Life) -> None:
    """The start-up failure's cause removed (the registry back): the kubelet's next pull succeeds, the containers
    start (the running story follows in the timeline)."""
    j = life.j
    assert j.fixed_at is not None and j.running is not None
    for i, p in enumerate(life.pods[:len(j.nodes)]):
        t = j.fixed_at + 3 + 0.3 * i
        tl.event(t, p, "Normal", "Pulling", f'Pulling image "{j.image}"', KUBELET, host=j.nodes[i].name,
                 field_path="spec.containers{trainer}")
        tl.event(j.running - 2 + 0.3 * i, p, "Normal", "Pulled", f'Successfully pulled image "{j.image}" in 19.2s '
                 "(19.2s including waiting). Image size: 9876543210 bytes.", KUBELET, host=j.nodes[i].name,
                 field_path="spec.containers{trainer}")


def _pods_ready_timeout(tl: T.Timeline, life: Life, pods: list[dict], ev: float, rq: float, count: int) -> None:
    """Kueue v0.19 reconcileNotReadyTimeout, then the job framework stops the Job (field-notes section 4)."""
    j, wl = life.j, life.wl
    assert wl is not None
    msg = f"Exceeded the PodsReady timeout {j.namespace}/{j.workload}"
    o.set_condition(wl, o.condition("Evicted", "True", "PodsReadyTimeout", msg, tl.ts(ev)))
    wl["status"]["requeueState"] = {"count": count, "requeueAt": tl.ts(rq)}
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart",
                                                      "count": count}]}
    tl.emit(ev, "MODIFIED", wl)
    tl.event(ev, wl, "Normal", "EvictedDueToPodsReadyTimeout", msg, "kueue-workload-controller",
             action="EvictedDueToPodsReadyTimeout")
    _stop(tl, life, pods, ev + 1, msg)
    wl["status"].pop("admission", None)
    o.set_condition(wl, o.condition("QuotaReserved", "False", "Pending", msg, tl.ts(ev + 2)))
    o.set_condition(wl, o.condition("Admitted", "False", "NoReservation", "The workload has no reservation",
                                    tl.ts(ev + 2)))
    o.set_condition(wl, o.condition("Requeued", "False", "PodsReadyTimeout", msg, tl.ts(ev + 2)))
    tl.emit(ev + 2, "MODIFIED", wl)
    o.set_condition(wl, o.condition("Requeued", "True", "BackoffFinished", "The workload backoff was finished",
                                    tl.ts(rq)))
    wl["status"]["requeueState"] = {"count": count}
    tl.emit(rq, "MODIFIED", wl)


def _stop(tl: T.Timeline, life: Life, pods: list[dict], t: float, msg: str, keep: tuple[int, ...] = ()) -> None:
    """Kueue stops the Job (suspend, Event Stopped); the Job controller suspends it and deletes its pods: running
    containers get SIGTERM (exit 143), pods that never started go at once; pods in ``keep`` (on a lost node) stay
    Terminating."""
    j, job = life.j, life.job
    job["spec"]["suspend"] = True
    tl.emit(t, "MODIFIED", job)
    tl.event(t, job, "Normal", "Stopped", msg, T._kueue_job_controller(j))
    if j.kind == "Job":
        job["status"].update(active=0, ready=0)
        _job_cond(job, "Suspended", "True", "JobSuspended", "Job suspended", tl.ts(t + 1))
        tl.emit(t + 1, "MODIFIED", job)
        tl.event(t + 1, job, "Normal", "Suspended", "Job suspended", "job-controller")
    for i, p in enumerate(pods):
        if "deletionTimestamp" not in p["metadata"]:
            p["metadata"]["deletionTimestamp"] = tl.ts(t + 31)
            p["metadata"]["deletionGracePeriodSeconds"] = 30
            tl.emit(t + 1, "MODIFIED", p)
        if i in keep:
            continue
        cs = p["status"].get("containerStatuses", [{}])[0]
        if "running" in cs.get("state", {}):
            node = p["spec"].get("nodeName")
            tl.event(t + 1, p, "Normal", "Killing", "Stopping container trainer", KUBELET, host=node,
                     field_path="spec.containers{trainer}")
            _terminate(tl, p, t + 4, 143, "Error")
            tl.emit(t + 5, "DELETED", p)
        else:
            tl.emit(t + 2, "DELETED", p)


def _terminate(tl: T.Timeline, p: dict, t: float, code: int, reason: str, phase: str = "Failed") -> None:
    cs = _ctr(p)
    started = cs["state"].get("running", {}).get("startedAt")
    cs.update(ready=False, started=False, state={"terminated": {
        "exitCode": code, "reason": reason, "startedAt": started, "finishedAt": tl.ts(t),
        "containerID": cs.get("containerID")}})
    p["status"]["phase"] = phase
    why = "PodFailed" if phase == "Failed" else "PodCompleted"
    for c in ("Ready", "ContainersReady"):
        _set_pod_cond(p, c, "False", tl.ts(t), why)
    tl.emit(t, "MODIFIED", p)


def slow_pull(tl: T.Timeline, life: Life, bound: float, run: float) -> None:
    """A cold node pulls a big image: ContainerCreating and Pulling, then Pulled with the time it took."""
    j = life.j
    took = run - 3 - (bound + 2) + 0.412  # Go prints a Duration to the millisecond here: 4m27.412s
    took_s = f"{int(took) // 60}m{took % 60:.3f}s"
    for i, p in enumerate(life.pods):
        node = j.nodes[i].name
        _pending_status(tl, j, p, i, bound + 0.2 * i, True, {"reason": "ContainerCreating"})
        tl.emit(bound + 1 + 0.2 * i, "MODIFIED", p)
        tl.event(bound + 2, p, "Normal", "Pulling", f'Pulling image "{j.image}"', KUBELET, host=node,
                 field_path="spec.containers{trainer}")
        tl.event(run - 3, p, "Normal", "Pulled",
                 f'Successfully pulled image "{j.image}" in {took_s} ({took_s} including waiting). '
                 "Image size: 18834567890 bytes.",
                 KUBELET, host=node, field_path="spec.containers{trainer}")


# --- crashes -------------------------------------------------------------------------------------------------

def oom(tl: T.Timeline, life: Life) -> None:
    """restartPolicy OnFailure: the kubelet restarts the OOM-killed container with a growing back-off; the Job
    controller fails the Job when the containers' restartCount reaches backoffLimit (FailureTarget, the pods
    deleted, then Failed), and Kueue marks the Workload Finished."""
    j, job, wl = life.j, life.job, life.wl
    p = life.pods[j.crash_rank]
    node = j.nodes[j.crash_rank].name
    fp = "spec.containers{trainer}"
    backoffs: list[float] = []
    restarts: list[float] = []
    delay = 10.0
    loop = j.oom_loop()
    for k, (term, restart) in enumerate(loop):
        cs = _ctr(p)
        started = cs["state"]["running"]["startedAt"]
        cs.update(ready=False, started=False, restartCount=k,
                  lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": started,
                                            "finishedAt": tl.ts(term), "containerID": cs["containerID"]}},
                  state={"waiting": {"reason": "CrashLoopBackOff", "message":
                                     f"back-off {go_duration(delay)} restarting failed container=trainer "
                                     f"pod={_ref(p)}"}})
        unready = "containers with unready status: [trainer]"
        for c in ("Ready", "ContainersReady"):
            _set_pod_cond(p, c, "False", tl.ts(term), "ContainersNotReady", unready)
        tl.emit(term, "MODIFIED", p)
        job["status"]["ready"] = j.pods - 1
        tl.emit(term + 0.5, "MODIFIED", job)
        if wl is not None:
            o.set_condition(wl, o.condition("PodsReady", "False", "WaitForRecovery",
                                            "At least one pod has failed, waiting for recovery", tl.ts(term + 1)))
            tl.emit(term + 1, "MODIFIED", wl)
        backoffs += _backoff_syncs(term + 1, restart, 10.0)
        restarts.append(restart)
        cs.update(ready=True, started=True, restartCount=k + 1, state={"running": {"startedAt": tl.ts(restart)}},
                  containerID=f"containerd://{tl.uid().replace('-', '')}")
        for c in ("Ready", "ContainersReady"):
            _set_pod_cond(p, c, "True", tl.ts(restart))
        tl.emit(restart, "MODIFIED", p)
        if k + 1 < len(loop):
            job["status"]["ready"] = j.pods
            tl.emit(restart + 0.5, "MODIFIED", job)
            if wl is not None:
                o.set_condition(wl, o.condition("PodsReady", "True", "Recovered",
                                                "All pods reached readiness and the workload is running",
                                                tl.ts(restart + 1)))
                tl.emit(restart + 1, "MODIFIED", wl)
        delay = min(delay * 2, 300.0)
    tl.series(backoffs, p, "Warning", "BackOff", f"Back-off restarting failed container trainer in pod {_ref(p)}",
              KUBELET, node, fp)
    tl.series(restarts, p, "Normal", "Pulled", f'Container image "{j.image}" already present on machine', KUBELET,
              node, fp)
    tl.series(restarts, p, "Normal", "Started", "Started container trainer", KUBELET, node, fp)
    if j.crash_recovers:  # the restarted rank stays up: the loop ended by itself
        return
    # restartCount reached backoffLimit (the sum over the Job's pods, restartPolicy OnFailure): the Job fails.
    f = j.failed_at
    assert f is not None
    msg = "Job has reached the specified backoff limit"
    _job_cond(job, "FailureTarget", "True", "BackoffLimitExceeded", msg, tl.ts(f))
    job["status"].update(terminating=j.pods)
    tl.emit(f, "MODIFIED", job)
    for i, q in enumerate(life.pods):
        q["metadata"]["deletionTimestamp"] = tl.ts(f + 31)
        q["metadata"]["deletionGracePeriodSeconds"] = 30
        tl.emit(f + 1, "MODIFIED", q)
        tl.event(f + 1, q, "Normal", "Killing", "Stopping container trainer", KUBELET, host=j.nodes[i].name,
                 field_path=fp)
        _terminate(tl, q, f + 3, 143, "Error")
        tl.emit(f + 4, "DELETED", q)
    job["status"].update(active=0, ready=0, terminating=0, failed=j.pods)
    _job_cond(job, "Failed", "True", "BackoffLimitExceeded", msg, tl.ts(f + 5))
    tl.emit(f + 5, "MODIFIED", job)
    tl.event(f + 5, job, "Warning", "BackoffLimitExceeded", msg, "job-controller")
    if wl is not None:
        o.set_condition(wl, o.condition("Finished", "True", "Failed", msg, tl.ts(f + 6)))
        tl.emit(f + 6, "MODIFIED", wl)
        tl.event(f + 6, job, "Normal", "FinishedWorkload", f"Workload '{j.namespace}/{j.workload}' is declared "
                 "finished", T._kueue_job_controller(j))


def nccl(tl: T.Timeline, life: Life) -> list[dict]:
    """A collective hangs at ``stall``; 10 min later the ProcessGroupNCCL watchdog aborts every rank and torchrun
    exits 1 (restartPolicy Never: the pods fail); the child Job fails (backoffLimit 0), the JobSet's default
    failure policy restarts it: new child Job (restart-attempt 1), new pods, running again. Returns them."""
    j, wl, c = life.j, life.wl, life.child
    assert j.stall is not None and j.restart_at is not None and c is not None
    abort = j.stall + NCCL_TIMEOUT_S
    r = j.crash_rank
    order = [r] + [i for i in range(j.pods) if i != r]
    for n, i in enumerate(order):
        _terminate(tl, life.pods[i], abort + n * 0.5, 1, "Error")
    child_name = c["metadata"]["name"]
    if wl is not None:
        o.set_condition(wl, o.condition("PodsReady", "False", "WaitForRecovery",
                                        "At least one pod has failed, waiting for recovery", tl.ts(abort + 1)))
        tl.emit(abort + 1, "MODIFIED", wl)
    msg = "Job has reached the specified backoff limit"
    c["status"].update(active=0, ready=0, failed=j.pods, terminating=0)
    _job_cond(c, "FailureTarget", "True", "BackoffLimitExceeded", msg, tl.ts(abort + 1))
    tl.emit(abort + 1, "MODIFIED", c)
    _job_cond(c, "Failed", "True", "BackoffLimitExceeded", msg, tl.ts(abort + 1.5))
    tl.emit(abort + 1.5, "MODIFIED", c)
    tl.event(abort + 1.5, c, "Warning", "BackoffLimitExceeded", msg, "job-controller")
    t = j.restart_at
    js = life.job
    action = f"applying RestartJobSet failure policy action (first failed job: {child_name})"
    js["status"].update(restarts=1, restartsCountTowardsMax=1)
    js["status"]["conditions"] = [c2 for c2 in js["status"].get("conditions", []) if c2["type"] != "RestartingJobSet"]
    js["status"]["conditions"].append({"type": "RestartingJobSet", "status": "True", "reason": "DefaultFailurePolicy",
                                       "message": action, "lastTransitionTime": tl.ts(t)})
    tl.emit(t, "MODIFIED", js)
    tl.event(t, js, "Warning", "RestartJobSetFailurePolicyAction", action, "jobset")
    for p in life.pods:
        tl.emit(t + 1, "DELETED", p)
    tl.emit(t + 1, "DELETED", c)
    c2 = o.child_job(j, tl.ts(t + 2), str(uuid.uuid5(uuid.UUID(j.child_uid), "1")), 1)
    tl.emit(t + 2, "ADDED", c2)
    tl.event(t + 2, js, "Normal", "SuccessfulCreate", f"Created Job: {child_name}", "jobset")
    names, uids = j.generation(1)
    pods = T._create_pods(tl, j, js, t + 3, names, uids, owner=c2)
    T._bind(tl, j, pods, t + RESTART_PLACE_S)
    T._run(tl, j, pods, t + RESTART_RUN_S, t + RESTART_PLACE_S)
    up = t + RESTART_RUN_S + 1
    c2["status"].update(ready=j.pods)
    tl.emit(up, "MODIFIED", c2)
    for x in js["status"]["conditions"]:
        if x["type"] == "RestartingJobSet":
            x.update(status="False", reason="JobsReady", message="all jobs are ready", lastTransitionTime=tl.ts(up))
    tl.emit(up, "MODIFIED", js)
    if wl is not None:
        o.set_condition(wl, o.condition("PodsReady", "True", "Recovered",
                                        "All pods reached readiness and the workload is running", tl.ts(up + 1)))
        tl.emit(up + 1, "MODIFIED", wl)
    life.child = c2
    return pods


# --- a node lost or drained under a job -----------------------------------------------------------------------

def _fit_message(scn: Scenario, t: float) -> str:
    """kube-scheduler's FitError for an 8-GPU pod at ``t``: every node busy, lost or cordoned (reasons sorted)."""
    n = len(scn.cluster.nodes)
    lost = sum(1 for f in scn.faults if f.kind == "node_lost" and f.at + NOT_READY_S + 1 <= t
               and (f.until is None or t < f.until))
    cordoned = sum(1 for f in scn.faults if f.kind in ("cordon", "drain", "gpu_unhealthy") and f.at <= t
                   and (f.until is None or t < f.until))
    busy = n - lost - cordoned
    reasons = []
    if lost:
        reasons.append(f"{lost} node(s) had untolerated taint {{node.kubernetes.io/unreachable: }}")
    if cordoned:
        reasons.append(f"{cordoned} node(s) were unschedulable")
    if busy:
        reasons.append(f"{busy} Insufficient nvidia.com/gpu")
    pre = [f"{lost + cordoned} Preemption is not helpful for scheduling"] if lost + cordoned else []
    pre += [f"{busy} No preemption victims found for incoming pod"] if busy else []
    return (f"0/{n} nodes are available: {', '.join(sorted(reasons))}. preemption: 0/{n} nodes are available: "
            f"{', '.join(sorted(pre))}.")


def _replace(tl: T.Timeline, life: Life, i: int, t: float) -> dict:
    """The Job controller creates index ``i``'s replacement; no node can take it."""
    j = life.j
    names, uids = j.generation(1)
    (p,) = T._create_pods(tl, j, life.job, t, names, uids, only=[i])
    if not p["spec"].get("schedulingGates"):
        msg = _fit_message(life.scn, t + 1)
        p["status"]["conditions"] = [o.pod_condition("PodScheduled", "False", tl.ts(t + 1), "Unschedulable", msg)]
        tl.emit(t + 1.5, "MODIFIED", p)
        tl.event(t + 1.5, p, "Warning", "FailedScheduling", msg, T._scheduler(j), repeat_every=5 * MIN,
                 until=life.scn.duration, action="Scheduling")
    return p


def disrupted(tl: T.Timeline, life: Life) -> None:
    j = life.j
    assert j.disrupted is not None
    kind, i, at = j.disrupted
    if kind == "lost":
        _lost(tl, life, i, at)
    else:
        _drained(tl, life, i, at)


def _lost(tl: T.Timeline, life: Life, i: int, at: float) -> None:
    """Node-lifecycle controller: the pod NotReady (MarkPodsNotReady); taint manager after 300 s: DisruptionTarget
    and DELETE (the pod stays Terminating: no kubelet confirms); the Job controller replaces it (Kueue TAS: the
    Workload gets the node in unhealthyNodes, finds no replacement and is evicted NodeFailures)."""
    j, p = life.j, life.pods[i]
    node = j.nodes[i].name
    t = at + NOT_READY_S + 1
    _set_pod_cond(p, "Ready", "False", tl.ts(t), (_cond(p, "Ready") or {}).get("reason"),
                  (_cond(p, "Ready") or {}).get("message"))
    tl.emit(t, "MODIFIED", p)
    tl.event(t, p, "Warning", "NodeNotReady", "Node is not ready", "node-controller")
    if life.wl is None and j.kind == "Job":
        j_ready = j.pods - 1
        life.job["status"].update(ready=j_ready)
        tl.emit(t + 0.5, "MODIFIED", life.job)
    d = at + TAINT_EVICT_S
    p["status"]["conditions"].insert(0, o.pod_condition("DisruptionTarget", "True", tl.ts(d), "DeletionByTaintManager",
                                                        "Taint manager: deleting due to NoExecute taint"))
    p["metadata"]["deletionTimestamp"] = tl.ts(d + 30)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    tl.emit(d, "MODIFIED", p)
    tl.event(d, p, "Normal", "TaintManagerEviction", f"Marking for deletion Pod {j.namespace}/{p['metadata']['name']}",
             "taint-eviction-controller")
    repl = _replace(tl, life, i, d + 1)
    life.job["status"].update(active=j.pods, terminating=1, ready=j.pods - 1)
    tl.emit(d + 1.5, "MODIFIED", life.job)
    if life.wl is None:
        return
    # Kueue TAS (TASFailedNodeReplacement, FailFast, ReplaceNodeOnPodTermination: on in v0.19): the pod on the
    # NotReady node is terminating, so the node is unhealthy; no free node can replace it: evicted.
    wl = life.wl
    wl["status"]["unhealthyNodes"] = [{"name": node}]
    tl.emit(d + 2, "MODIFIED", wl)
    ev = j.evicted
    assert ev is not None
    msg = f"Workload was evicted as there was no replacement for unhealthy node(s): {node}"
    o.set_condition(wl, o.condition("Evicted", "True", "NodeFailures", msg, tl.ts(ev)))
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "NodeFailures", "underlyingCause": "", "count": 1}]}
    tl.emit(ev, "MODIFIED", wl)
    tl.event(ev, wl, "Normal", "EvictedDueToNodeFailures", msg, "kueue-admission", action="EvictedDueToNodeFailures")
    _stop(tl, life, [*life.pods, repl], ev + 1, msg, keep=(i,))
    wl["status"].pop("admission", None)
    wl["status"].pop("unhealthyNodes", None)
    o.set_condition(wl, o.condition("QuotaReserved", "False", "Pending", msg, tl.ts(ev + 2)))
    o.set_condition(wl, o.condition("Admitted", "False", "NoReservation", "The workload has no reservation",
                                    tl.ts(ev + 2)))
    o.set_condition(wl, o.condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded",
                                    tl.ts(ev + 2)))
    o.set_condition(wl, o.condition("Requeued", "True", "NodeFailures", msg, tl.ts(ev + 2)))
    wl["status"]["requeueState"] = {"count": 1}
    tl.emit(ev + 2, "MODIFIED", wl)
    # Back in the queue, on a full cluster: no topology domain fits it (v0.19 gate off: reason Pending).
    fit = (f"couldn't assign flavors to pod set {o.podset_name(j)}: topology \"{o.TOPOLOGY}\" doesn't allow to fit "
           f"any of {j.pods} pod(s)")
    reason = "TopologyPlacementFailed" if j.kueue_gate == "on" else "Pending"
    o.set_condition(wl, o.condition("QuotaReserved", "False", reason, fit, tl.ts(ev + 4)))
    wl["status"]["resourceRequests"] = o.resource_requests(j)
    tl.emit(ev + 4, "MODIFIED", wl)
    tl.event(ev + 4, wl, "Warning", reason, fit, "kueue-admission", repeat_every=5 * MIN, until=life.scn.duration)


def _drained(tl: T.Timeline, life: Life, i: int, at: float) -> None:
    """kubectl drain: the node is cordoned (``nodes``), then the pod evicted through the Eviction API: DisruptionTarget
    EvictionByEvictionAPI and a graceful delete; the trainer exits on SIGTERM; with podFailurePolicy Ignore on
    DisruptionTarget the Job does not count it failed and replaces it once it is Failed; the replacement cannot
    schedule (every other node is busy)."""
    j, p = life.j, life.pods[i]
    node = j.nodes[i].name
    e = at + DRAIN_EVICT_S
    p["status"]["conditions"].insert(0, o.pod_condition("DisruptionTarget", "True", tl.ts(e), "EvictionByEvictionAPI",
                                                        "Eviction API: evicting"))
    p["metadata"]["deletionTimestamp"] = tl.ts(e + 30)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    tl.emit(e, "MODIFIED", p)
    tl.event(e, p, "Normal", "Killing", "Stopping container trainer", KUBELET, host=node,
             field_path="spec.containers{trainer}")
    gone = e + DRAIN_GRACE_S
    _terminate(tl, p, gone, 143, "Error")
    tl.emit(gone + 1, "DELETED", p)
    if life.wl is not None:
        o.set_condition(life.wl, o.condition("PodsReady", "False", "WaitForRecovery",
                                             "At least one pod has failed, waiting for recovery", tl.ts(gone + 1)))
        tl.emit(gone + 1, "MODIFIED", life.wl)
    _replace(tl, life, i, gone + 1)
    life.job["status"].update(active=j.pods, ready=j.pods - 1, terminating=0, failed=0)
    tl.emit(gone + 1.5, "MODIFIED", life.job)


# --- the nodes ----------------------------------------------------------------------------------------------

def _node_event(tl: T.Timeline, t: float, node: dict, reason: str, component: str, host: str | None = None) -> None:
    status = {"NodeNotReady": "NodeNotReady", "NodeReady": "NodeReady", "NodeNotSchedulable": "NodeNotSchedulable",
              "NodeSchedulable": "NodeSchedulable"}[reason]
    tl.event(t, node, "Normal", reason, f"Node {node['metadata']['name']} status is now: {status}", component,
             host=host)


def _taint(node: dict, key: str, effect: str, ts: str | None, value: str | None = None) -> None:
    t: dict[str, Any] = {"key": key, "effect": effect}
    if value is not None:
        t["value"] = value
    if ts is not None:
        t["timeAdded"] = ts
    node["spec"].setdefault("taints", []).append(t)


def _untaint(node: dict, key: str) -> None:
    node["spec"]["taints"] = [t for t in node["spec"].get("taints", []) if t["key"] != key]


def nodes(tl: T.Timeline, scn: Scenario) -> None:
    """What happens to the Node objects: lost (kubelet silent), cordoned or drained, a GPU reported Unhealthy."""
    for f in sorted(scn.faults, key=lambda f: f.at):
        if f.kind not in ("node_lost", "cordon", "drain", "gpu_unhealthy"):
            continue
        node = tl.nodes[f.node.name]
        if f.kind == "node_lost":
            _node_lost(tl, node, f)
        elif f.kind == "gpu_unhealthy":
            _gpu_unhealthy(tl, node, f)
        else:
            _cordon(tl, node, f.at, f.until)


def _node_lost(tl: T.Timeline, node: dict, f: Fault) -> None:
    """nodeMonitorGracePeriod after the kubelet's last update, the node-lifecycle controller sets Ready,
    MemoryPressure, DiskPressure and PIDPressure Unknown and taints the node unreachable (NoSchedule, then
    NoExecute); if the kubelet comes back it posts Ready again and the taints go."""
    t = f.at + NOT_READY_S
    for c in node["status"]["conditions"]:
        c.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.",
                 lastHeartbeatTime=tl.ts(f.at - 3), lastTransitionTime=tl.ts(t))
    tl.emit(t, "MODIFIED", node)
    _node_event(tl, t, node, "NodeNotReady", "node-controller")
    _taint(node, "node.kubernetes.io/unreachable", "NoSchedule", tl.ts(t + 1))
    tl.emit(t + 1, "MODIFIED", node)
    _taint(node, "node.kubernetes.io/unreachable", "NoExecute", tl.ts(t + 2))
    tl.emit(t + 2, "MODIFIED", node)
    if f.until is None:
        return
    u = f.until
    fresh = {"MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
             "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
             "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
             "Ready": ("True", "KubeletReady", "kubelet is posting ready status")}
    for c in node["status"]["conditions"]:
        status, reason, msg = fresh[c["type"]]
        c.update(status=status, reason=reason, message=msg, lastHeartbeatTime=tl.ts(u), lastTransitionTime=tl.ts(u))
    tl.emit(u, "MODIFIED", node)
    _node_event(tl, u, node, "NodeReady", KUBELET, host=node["metadata"]["name"])
    _untaint(node, "node.kubernetes.io/unreachable")
    tl.emit(u + 1, "MODIFIED", node)


def _cordon(tl: T.Timeline, node: dict, at: float, until: float | None) -> None:
    """``kubectl cordon``: spec.unschedulable, mirrored as the unschedulable NoSchedule taint; the kubelet's
    NodeNotSchedulable Event. Uncordon undoes both (NodeSchedulable)."""
    name = node["metadata"]["name"]
    node["spec"]["unschedulable"] = True
    tl.emit(at, "MODIFIED", node)
    _taint(node, "node.kubernetes.io/unschedulable", "NoSchedule", tl.ts(at + 1))
    tl.emit(at + 1, "MODIFIED", node)
    _node_event(tl, at + 2, node, "NodeNotSchedulable", KUBELET, host=name)
    if until is None:
        return
    node["spec"].pop("unschedulable", None)
    tl.emit(until, "MODIFIED", node)
    _untaint(node, "node.kubernetes.io/unschedulable")
    tl.emit(until + 1, "MODIFIED", node)
    _node_event(tl, until + 2, node, "NodeSchedulable", KUBELET, host=name)


def _gpu_unhealthy(tl: T.Timeline, node: dict, f: Fault) -> None:
    """The device plugin reports the GPU Unhealthy (an XID it does not ignore): the kubelet's next status has
    allocatable nvidia.com/gpu 7 (capacity stays 8). NVSentinel writes its health condition and its
    fault-quarantine cordons the node with its labels and the configured taint (reference
    field/node_gpu-unhealthy-nvsentinel.yaml; the message layout is invented there too)."""
    gpu = f.gpu or 0
    n = f.node
    pci = n.pci_bus_ids[gpu][4:10].lower()  # 0000:ba:00
    node["status"]["conditions"].append({
        "type": "SysLogsXIDError", "status": "True", "reason": "SysLogsXIDErrorIsNotHealthy",
        "message": f"ErrorCode:63 PCI:{pci} GPU_UUID:{n.gpu_uuids[gpu]} MESSAGE=NVRM: Xid (PCI:{pci}): 63, "
                   "pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to "
                   "activate. Recommended Action=RESTART_BM;",
        "lastHeartbeatTime": tl.ts(f.at), "lastTransitionTime": tl.ts(f.at)})
    tl.emit(f.at, "MODIFIED", node)
    stamp = tl.start + timedelta(seconds=int(f.at + 4))
    node["metadata"]["labels"].update({f"{QUARANTINE_LABEL}cordon-by": "fault-quarantine",
                                       f"{QUARANTINE_LABEL}cordon-reason": "GPU-fatal-error-ruleset",
                                       f"{QUARANTINE_LABEL}cordon-timestamp": stamp.strftime("%Y-%m-%dT%H-%M-%SZ")})
    _taint(node, "nvidia.com/gpu-error", "NoSchedule", None, value="fatal")
    _cordon(tl, node, f.at + 4, None)
    cap = int(node["status"]["capacity"]["nvidia.com/gpu"])
    node["status"]["allocatable"]["nvidia.com/gpu"] = str(cap - 1)  # capacity = healthy + unhealthy
    tl.emit(f.at + 8, "MODIFIED", node)
