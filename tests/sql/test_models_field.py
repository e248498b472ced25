"""Healthy is earned (issue 31): the failures that stop real training runs beyond scheduling and interconnect, told
with the upstream shapes of tests/fixtures/reference/field/, each watched live and met in the middle of life (first
seen in an initial list at minute CAPTURE), with the decoys of a training job's normal life beside them. Real
DuckLake, real models.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from reports import diagnose
from tests.sql import fieldfix as ff
from tests.sql.fieldfix import NS, Story, bind, job_pod, pod_event, ref, run, running_pod, terminate, waiting
from tests.sql.lakefix import build_lake, cond, iso, node

CAPTURE = 50.0
END = 70.0
PULL = "pod_image-pull-backoff.yaml"
OOM = "pod_crashloop-oomkilled.yaml"


# --- start-up -------------------------------------------------------------------------------------------------------

def _image_pull(s: Story) -> None:
    """Both pods bound at 5, the image never pulls: ErrImagePull, then ImagePullBackOff for the rest of the hour."""
    pull = [d for d in ff.docs(PULL) if d.get("kind") == "Pod"]
    evs = [d for d in ff.docs(PULL) if d.get("kind") == "Event"]
    for i, n in enumerate(("f1", "f2")):
        p = job_pod("img-pull", i, 5)
        s.add(5, p)
        s.emit(5.05, bind(p, n, 5.05))
        err = pull[1]["status"]["containerStatuses"][0]["state"]["waiting"]
        s.emit(5.2, waiting(p, err["reason"], err["message"]))
        back = pull[0]["status"]["containerStatuses"][0]["state"]["waiting"]
        s.emit(5.5, waiting(p, back["reason"], back["message"]))
        for e in evs:
            s.add(5.1, pod_event(p, e, 5.1, 5.1, 1))
            s.emit(END - 1, pod_event(p, e, 5.1, END - 1, 40))


def _config_error(s: Story) -> None:
    """Bound at 62, a missing Secret: CreateContainerConfigError, an error that cannot clear by itself."""
    bad = ref("pod_create-config-and-mount-errors.yaml", "Pod", 0)["status"]["containerStatuses"][0]["state"]["waiting"]
    ev = ref("pod_create-config-and-mount-errors.yaml", "Event", 0)
    p = job_pod("cfg-err", 0, 62)
    s.add(62, p)
    s.emit(62.05, bind(p, "f3", 62.05))
    s.emit(62.2, waiting(p, bad["reason"], bad["message"]))
    s.add(62.2, pod_event(p, ev, 62.2, 62.2, 1))


def _mount(s: Story) -> None:
    """Bound at 20, ContainerCreating for good: the kubelet's FailedMount Events say why."""
    evs = [d for d in ff.docs("pod_create-config-and-mount-errors.yaml") if d.get("reason") == "FailedMount"]
    p = job_pod("mount-wait", 0, 20)
    s.add(20, p)
    s.emit(20.05, bind(p, "f4", 20.05))
    for e in evs:
        s.add(20.1, pod_event(p, e, 20.1, 20.1, 1))
        s.emit(END - 0.5, pod_event(p, e, 20.1, END - 0.5, 30))


def _slow_pull(s: Story) -> None:
    """Decoy: a cold image pull of 3 minutes (Pulling, then Pulled), then running."""
    p = job_pod("slow-pull", 0, 10)
    s.add(10, p)
    s.emit(10.05, bind(p, "f5", 10.05))
    pulling = next(d for d in ff.docs(PULL) if d.get("reason") == "Pulling")
    s.add(10.1, pod_event(p, pulling, 10.1, 10.1, 1))
    s.emit(13.2, run(p, 13.2))


def _ready_timeout(s: Story) -> None:
    """Kueue: admitted at 2, pods bound, image never pulls; waitForPodsReady evicts at 32 (PodsReadyTimeout), the
    pods are deleted, the Workload is admitted again at 34 and its new pods fail the same way."""
    wl = ff.kueue_workload("ready-timeout", 1, 2, 1)
    wl["metadata"]["name"] = "job-ready-timeout-5a2b3"
    s.add(1, wl)
    back = [d for d in ff.docs(PULL) if d.get("kind") == "Pod"][0]["status"]["containerStatuses"][0]
    p = job_pod("ready-timeout", 0, 2.05)
    p["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": wl["metadata"]["name"]}
    s.add(2.05, p)
    s.emit(2.1, bind(p, "f6", 2.1))
    s.emit(2.3, waiting(p, "ImagePullBackOff", back["state"]["waiting"]["message"]))
    evicted = ref("kueue_podsready-timeout-eviction.yaml", "Workload", 1)
    w2 = copy.deepcopy(wl)
    msg = f"Exceeded the PodsReady timeout {NS}/{wl['metadata']['name']}"
    w2["status"] = {"requeueState": {"count": 1, "requeueAt": iso(33)}, "conditions": [
        cond(c["type"], c["status"], c["reason"], msg if "PodsReady timeout" in c["message"] else c["message"],
             32 if c["type"] == "Evicted" else 32.05 if c["type"] != "PodsReady" else 2)
        for c in evicted["status"]["conditions"]]}
    s.emit(32, w2)
    p["metadata"]["deletionTimestamp"] = iso(32.5)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(32.05, p)
    s.emit(32.6, p, "DELETED")
    w3 = copy.deepcopy(w2)
    w3["status"]["conditions"] = [c for c in w3["status"]["conditions"]
                                  if c["type"] not in ("QuotaReserved", "Admitted")]
    w3["status"]["conditions"] += [
        cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq", 34),
        cond("Admitted", "True", "Admitted", "The workload is admitted", 34)]
    w3["status"]["admission"] = wl["status"]["admission"]
    s.emit(34, w3)
    q = job_pod("ready-timeout", 0, 34.05)
    q["metadata"]["name"] = "ready-timeout-0-b9c8d"
    q["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": wl["metadata"]["name"]}
    s.add(34.05, q)
    s.emit(34.1, bind(q, "f6", 34.1))
    s.emit(34.3, waiting(q, "ImagePullBackOff", back["state"]["waiting"]["message"]))


# --- crashes --------------------------------------------------------------------------------------------------------

def _oom_loop(s: Story) -> None:
    """restartPolicy OnFailure: rank 1 OOMKilled at 20, restarted, OOMKilled again ... CrashLoopBackOff from 30."""
    final = ref(OOM, "Pod")["status"]["containerStatuses"][0]
    backoff = ref(OOM, "Event", 0)
    running_pod(s, "oom-loop", 0, "f7", 3, restart_policy="OnFailure")
    p = running_pod(s, "oom-loop", 1, "f8", 3, restart_policy="OnFailure")
    for restarts, t in enumerate((20, 24, 30), start=1):
        terminate(p, t, 137, "OOMKilled")
        s.emit(t, p)
        last = p["status"]["containerStatuses"][0]["state"]["terminated"]
        cs = p["status"]["containerStatuses"][0]
        cs.update(restartCount=restarts, lastState={"terminated": last},
                  state={"waiting": {"reason": "CrashLoopBackOff", "message": final["state"]["waiting"]["message"]
                                     .replace("llama-train-worker-0-0-x7k2p_team-a", f"oom-loop-1-x7k2p_{NS}")}})
        s.emit(t + 0.1, p)
        if t < 30:
            run(p, t + 0.5, restarts)
            p["status"]["containerStatuses"][0]["lastState"] = {"terminated": last}
            s.emit(t + 0.5, p)
    s.add(20.2, pod_event(p, backoff, 20.2, 20.2, 1,
                          f"Back-off restarting failed container trainer in pod oom-loop-1-x7k2p_{NS}(uid)"))
    s.emit(END - 1, pod_event(p, backoff, 20.2, END - 1, 41,
                              f"Back-off restarting failed container trainer in pod oom-loop-1-x7k2p_{NS}(uid)"))


def _oom_once(s: Story) -> None:
    """restartPolicy OnFailure: rank 0 OOMKilled once at 20, restarted at 20.2, up since: the crash is over."""
    p = running_pod(s, "oom-once", 0, "f36", 3, restart_policy="OnFailure")
    s.emit(20, terminate(p, 20, 137, "OOMKilled"))
    last = p["status"]["containerStatuses"][0]["state"]["terminated"]
    run(p, 20.2, 1)
    p["status"]["containerStatuses"][0]["lastState"] = {"terminated": last}
    s.emit(20.2, p)


def _backoff_limit(s: Story) -> None:
    """restartPolicy Never, backoffLimit 0: rank 0 exits 1 at 25; the Job controller fails the Job and deletes rank 1,
    which exits 143 after its deletion (stopped, not crashed)."""
    job = ff.batch_job("bad-exit", 2)
    s.add(2, job)
    p0 = running_pod(s, "bad-exit", 0, "f9", 2)
    p1 = running_pod(s, "bad-exit", 1, "f10", 2)
    s.emit(25, terminate(p0, 25, 1, "Error", "Failed"))
    failed = ref("job_backofflimit-exceeded.yaml", "Job")["status"]["conditions"]
    job["status"] = {"failed": 1, "active": 0, "startTime": iso(2),
                     "conditions": [dict(c, lastTransitionTime=iso(25.1), lastProbeTime=iso(25.1)) for c in failed]}
    s.emit(25.1, job)
    p1["metadata"]["deletionTimestamp"] = iso(25.6)
    p1["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(25.1, p1)
    s.emit(25.3, terminate(p1, 25.3, 143, "Error", "Failed"))


def _jobset_restarts(s: Story) -> None:
    """A JobSet whose worker exits 1; it restarted 3 times, then failed (ReachedMaxRestarts) at 40."""
    js = ref("jobset_failed-max-restarts.yaml", "JobSet")
    js["metadata"] = {"name": "js-restarts", "namespace": NS, "uid": "uid-js-restarts", "creationTimestamp": iso(1)}
    status = js["status"]
    js["status"] = {"restarts": 0}
    s.add(1, js)
    p = running_pod(s, "js-restarts", 0, "f11", 30, kind="JobSet")
    s.emit(39.8, terminate(p, 39.8, 1, "Error", "Failed"))
    status["conditions"] = [dict(c, lastTransitionTime=iso(40),
                                 message=c["message"].replace("llama-train", "js-restarts"))
                            for c in status["conditions"]]
    js["status"] = status
    s.emit(40, js)


def _finisher(s: Story) -> None:
    """Decoy: a Job whose pods complete with exit 0 at 40 (its throughput stops because it finished)."""
    job = ff.batch_job("finisher", 2, completions=1)
    s.add(2, job)
    p = running_pod(s, "finisher", 0, "f12", 2)
    ff.throughput(s, p["metadata"]["name"], 3, 40, lambda t: 1000.0)
    s.emit(40.1, terminate(p, 40.1, 0, "Completed", "Succeeded"))
    job["status"] = {"succeeded": 1, "active": 0, "completionTime": iso(40.2), "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
         "message": "Reached expected number of succeeded pods", "lastTransitionTime": iso(40.2)},
        {"type": "Complete", "status": "True", "reason": "CompletionsReached",
         "message": "Reached expected number of succeeded pods", "lastTransitionTime": iso(40.2)}]}
    s.emit(40.2, job)


# --- nodes ----------------------------------------------------------------------------------------------------------

def _node_lost(s: Story) -> None:
    """f14 stops posting status at 48 (Ready Unknown, unreachable taints); the taint manager deletes the job's pod
    there at 53 (tolerationSeconds 300); its replacement runs on f15 from 54."""
    running_pod(s, "node-lost", 0, "f13", 3)
    p = running_pod(s, "node-lost", 1, "f14", 3)
    lost = ref("node_notready-taint-eviction.yaml", "Node")
    n = node("f14", "rack-1")
    n["spec"]["taints"] = [dict(t, timeAdded=iso(48 + k / 60)) for k, t in enumerate(lost["spec"]["taints"])]
    n["status"]["conditions"] = [dict(c, lastTransitionTime=iso(48), lastHeartbeatTime=iso(47.3))
                                 for c in lost["status"]["conditions"]]
    s.emit(48, n)
    for c in p["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", lastTransitionTime=iso(48.02))
    s.emit(48.02, p)
    evicted = ref("node_notready-taint-eviction.yaml", "Pod")
    disruption = next(c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget")
    p["status"]["conditions"].append(dict(disruption, lastTransitionTime=iso(53)))
    p["metadata"]["deletionTimestamp"] = iso(53.5)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(53, p)
    s.emit(54, p, "DELETED")
    r = job_pod("node-lost", 1, 54.05)
    r["metadata"]["name"] = "node-lost-1-q2w3e"
    s.add(54.05, r)
    s.emit(54.1, bind(r, "f15", 54.1))
    s.emit(54.6, run(r, 54.6))


def _kueue_node_lost(s: Story) -> None:
    """Kueue TAS: admitted at 2 on f37 / f38; f37 stops posting status at 20; the taint manager deletes the pod there
    at 25 (it stays Terminating: no kubelet confirms); the Workload gets f37 in unhealthyNodes, finds no replacement
    and is evicted NodeFailures at 25.05, requeued (Requeued True NodeFailures), and waits on a full cluster for
    the rest of the hour (QuotaReserved False, topology doesn't fit): the requeue wait is the node's incident."""
    wl = ff.kueue_workload("tas-lost", 1, 2, 2)
    wl["spec"]["podSets"][0]["topologyRequest"] = {"required": "cloud.provider.com/topology-rack"}
    s.add(1, wl)
    for n in ("f37", "f38"):
        s.add(0, node(n, "rack-4"))
    pods = []
    for i, n in enumerate(("f37", "f38")):
        p = job_pod("tas-lost", i, 2.05)
        p["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": wl["metadata"]["name"]}
        s.add(2.05, p)
        s.emit(2.1, bind(p, n, 2.1))
        s.emit(2.6, run(p, 2.6))
        pods.append(p)
    lost = ref("node_notready-taint-eviction.yaml", "Node")
    n = node("f37", "rack-4")
    n["spec"]["taints"] = [dict(t, timeAdded=iso(20 + k / 60)) for k, t in enumerate(lost["spec"]["taints"])]
    n["status"]["conditions"] = [dict(c, lastTransitionTime=iso(20), lastHeartbeatTime=iso(19.3))
                                 for c in lost["status"]["conditions"]]
    s.emit(20, n)
    p = pods[0]
    for c in p["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", lastTransitionTime=iso(20.02))
    s.emit(20.02, p)
    disruption = next(c for c in ref("node_notready-taint-eviction.yaml", "Pod")["status"]["conditions"]
                      if c["type"] == "DisruptionTarget")
    p["status"]["conditions"].append(dict(disruption, lastTransitionTime=iso(25)))
    p["metadata"]["deletionTimestamp"] = iso(25.5)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(25, p)
    wl["status"]["unhealthyNodes"] = [{"name": "f37"}]
    s.emit(25.03, wl)
    # kueue-0.19-reasons.md: Evicted NodeFailures (pkg/scheduler: no replacement), copied to Requeued True
    msg = "Workload was evicted as there was no replacement for unhealthy node(s): f37"
    wl["status"]["conditions"].append(cond("Evicted", "True", "NodeFailures", msg, 25.05))
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "NodeFailures", "underlyingCause": "", "count": 1}]}
    s.emit(25.05, wl)
    name = wl["metadata"]["name"]
    s.add(25.05, {"apiVersion": "v1", "kind": "Event", "type": "Normal", "reason": "EvictedDueToNodeFailures",
                  "message": msg, "metadata": {"name": f"{name}.evicted2505", "namespace": NS},
                  "involvedObject": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": name,
                                     "namespace": NS},
                  "source": {"component": "kueue-admission"}, "count": 1,
                  "firstTimestamp": iso(25.05), "lastTimestamp": iso(25.05)})
    # the Job suspended: its pod on f38 deleted, the one on the lost node stays Terminating
    q = pods[1]
    q["metadata"]["deletionTimestamp"] = iso(25.6)
    q["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(25.1, q)
    s.emit(25.7, q, "DELETED")
    wl["status"].pop("admission", None)
    wl["status"].pop("unhealthyNodes", None)
    kept = [c for c in wl["status"]["conditions"] if c["type"] not in ("QuotaReserved", "Admitted", "PodsReady")]
    wl["status"]["conditions"] = kept + [
        cond("QuotaReserved", "False", "Pending", msg, 25.1),
        cond("Admitted", "False", "NoReservation", "The workload has no reservation", 25.1),
        cond("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", 25.1),
        cond("Requeued", "True", "NodeFailures", msg, 25.1)]
    wl["status"]["requeueState"] = {"count": 1}
    s.emit(25.1, wl)
    # back in the queue on a full cluster (v0.19, gate off: Pending); the condition keeps its transition time
    fit = 'couldn\'t assign flavors to pod set main: topology "default" doesn\'t allow to fit any of 2 pod(s)'
    wl["status"]["conditions"] = [cond("QuotaReserved", "False", "Pending", fit, 25.1)
                                  if c["type"] == "QuotaReserved" else c for c in wl["status"]["conditions"]]
    s.emit(25.15, wl)
    warn = {"apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "Pending", "message": fit,
            "metadata": {"name": f"{name}.pending2515", "namespace": NS},
            "involvedObject": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": name,
                               "namespace": NS},
            "source": {"component": "kueue-admission"}, "count": 1,
            "firstTimestamp": iso(25.15), "lastTimestamp": iso(25.15)}
    s.add(25.15, warn)
    s.emit(END - 1, dict(warn, count=9, lastTimestamp=iso(END - 1)))


def _drained(s: Story) -> None:
    """f17 cordoned at 49 and the job's pod there evicted through the Eviction API; its replacement runs on f18."""
    running_pod(s, "drained", 0, "f16", 4)
    p = running_pod(s, "drained", 1, "f17", 4)
    ref_node = ref("node_drain-eviction.yaml", "Node")
    n = node("f17", "rack-2")
    n["spec"]["unschedulable"] = True
    n["spec"]["taints"] = [dict(t, timeAdded=iso(49)) for t in ref_node["spec"]["taints"]]
    s.emit(49, n)
    disruption = ref("node_drain-eviction.yaml", "Pod")["status"]["conditions"][0]
    p["status"]["conditions"].append(dict(disruption, lastTransitionTime=iso(49.05)))
    p["metadata"]["deletionTimestamp"] = iso(49.55)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(49.05, p)
    s.emit(50.5, terminate(p, 50.4, 143, "Error", "Failed"))
    s.emit(50.6, p, "DELETED")
    r = job_pod("drained", 1, 50.7)
    r["metadata"]["name"] = "drained-1-m4n5b"
    s.add(50.7, r)
    s.emit(50.75, bind(r, "f18", 50.75))
    s.emit(51.2, run(r, 51.2))


def _gpu_sick(s: Story) -> None:
    """f19 loses a GPU at 40: allocatable 7 of 8 (the device plugin marked it unhealthy), NVSentinel's condition and
    cordon; the job holds 8 GPUs there."""
    running_pod(s, "gpu-sick", 0, "f19", 5)
    sick = ref("node_gpu-unhealthy-nvsentinel.yaml", "Node")
    n = node("f19", "rack-2")
    n["metadata"]["labels"].update(sick["metadata"]["labels"])
    n["spec"] = {"unschedulable": True, "taints": [dict(t, timeAdded=iso(40.05)) if "timeAdded" in t else t
                                                   for t in sick["spec"]["taints"]]}
    n["status"]["allocatable"]["nvidia.com/gpu"] = sick["status"]["allocatable"]["nvidia.com/gpu"]
    n["status"]["conditions"] = [dict(c, lastTransitionTime=iso(40), lastHeartbeatTime=iso(40))
                                 if "lastTransitionTime" in c else c for c in sick["status"]["conditions"]]
    s.emit(40.05, n)


def _node_decoys(s: Story) -> None:
    """Decoys: f20 goes NotReady at 20 holding no pod at all; f21 is cordoned at 30 while its job keeps running."""
    n = node("f20", "rack-2")
    n["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                  "message": "container runtime is down", "lastTransitionTime": iso(20)}]
    n["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": iso(20)}]
    s.emit(20, n)
    running_pod(s, "cordon-ok", 0, "f21", 6)
    c = node("f21", "rack-2")
    c["spec"] = {"unschedulable": True, "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                                                    "timeAdded": iso(30)}]}
    s.emit(30, c)


# --- GPUs, throughput -----------------------------------------------------------------------------------------------

def _gpus(s: Story, node_name: str, pod_name: str, clock_at, temp_at=lambda t, g: 63.0,
          extra_at=None, start: float = 3.0, step: float = 0.5) -> None:
    """dcgm-exporter's default clock and temperature fields for the 8 GPUs of a node held by ``pod_name``."""
    t = start
    while t < END:
        for g in range(8):
            ff.dcgm(s, t, node_name, g, "DCGM_FI_DEV_SM_CLOCK", clock_at(t, g), pod_name)
            ff.dcgm(s, t, node_name, g, "DCGM_FI_DEV_GPU_TEMP", temp_at(t, g), pod_name)
            ff.dcgm(s, t, node_name, g, "DCGM_FI_DEV_GPU_UTIL", 100.0, pod_name)
            if extra_at:
                extra_at(t, g)
        t += step


def _throttled(s: Story) -> None:
    """GPU 3 of f22 runs at 1410 MHz against 1980 from minute 30, at 84 C; the job falls to 70 %. Only the default
    counters (no clock-event reasons, no violation counters)."""
    p0 = running_pod(s, "throttled", 0, "f22", 2)["metadata"]["name"]
    p1 = running_pod(s, "throttled", 1, "f23", 2)["metadata"]["name"]
    _gpus(s, "f22", p0, lambda t, g: 1410.0 if g == 3 and t >= 30 else 1980.0 - g,
          lambda t, g: 84.0 if g == 3 and t >= 30 else 63.0)
    _gpus(s, "f23", p1, lambda t, g: 1980.0 - g)
    ff.throughput(s, p0, 3, END, lambda t: 700.0 if t >= 30 else 1000.0)


def _throttled_bits(s: Story) -> None:
    """A site with the opt-in fields: GPU 5 of f24 reports HW slowdown + HW thermal (field 112) and thermal violation
    time from minute 30, its clock 1500 against 1980; power capping bits on every GPU all along (normal)."""
    p = running_pod(s, "throttle-bits", 0, "f24", 2)["metadata"]["name"]
    viol = {"v": 0.0}

    def extra(t: float, g: int) -> None:
        bits = 0x4 | (0x8 | 0x40 if g == 5 and t >= 30 else 0)
        ff.dcgm(s, t, "f24", g, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", float(bits), p)
        if g == 5:
            viol["v"] += 12e9 if t >= 30 else 0.0
            ff.dcgm(s, t, "f24", g, "DCGM_FI_DEV_THERMAL_VIOLATION", viol["v"], p)

    _gpus(s, "f24", p, lambda t, g: 1500.0 if g == 5 and t >= 30 else 1980.0, extra_at=extra)
    ff.throughput(s, p, 3, END, lambda t: 750.0 if t >= 30 else 1000.0)


def _hot_gpu(s: Story) -> None:
    """Decoy: GPU 2 of f25 at 87 C all hour, its clock holds; throughput steady."""
    p = running_pod(s, "hot-gpu", 0, "f25", 2)["metadata"]["name"]
    _gpus(s, "f25", p, lambda t, g: 1980.0, lambda t, g: 87.0 if g == 2 else 64.0)
    ff.throughput(s, p, 3, END, lambda t: 1000.0)


def _clock_blip(s: Story) -> None:
    """A slowdown to 60 % from minute 30 with no infrastructure cause; GPU 1's clock dips for one scrape at 31."""
    p = running_pod(s, "clock-blip", 0, "f26", 2)["metadata"]["name"]
    _gpus(s, "f26", p, lambda t, g: 900.0 if g == 1 and t == 31.0 else 1980.0)
    ff.throughput(s, p, 3, END, lambda t: 600.0 if t >= 30 else 1000.0)


def _hung(s: Story) -> None:
    """Throughput reported at 0 from minute 30 while both pods stay Running, GPUs busy (a hung collective)."""
    p = running_pod(s, "hung", 0, "f27", 2)["metadata"]["name"]
    running_pod(s, "hung", 1, "f28", 2)
    _gpus(s, "f27", p, lambda t, g: 1980.0, step=1.0)
    ff.throughput(s, p, 3, END, lambda t: 0.0 if t >= 30 else 1000.0)


def _vanished(s: Story) -> None:
    """The throughput series stops at minute 35 while the pod stays Running (its GPUs keep reporting)."""
    p = running_pod(s, "vanished", 0, "f29", 2)["metadata"]["name"]
    _gpus(s, "f29", p, lambda t, g: 1980.0, step=1.0)
    ff.throughput(s, p, 3, END, lambda t: None if t >= 35 else 1000.0)


def _checkpointer(s: Story) -> None:
    """Decoy: a checkpoint every 10 minutes, throughput at 0 for 2 minutes each time."""
    p = running_pod(s, "checkpointer", 0, "f30", 2)["metadata"]["name"]
    ff.throughput(s, p, 3, END, lambda t: 0.0 if t >= 12 and (t - 12) % 10 < 2 else 1000.0)


def _xid_crash(s: Story) -> None:
    """XID 79 on GPU 4 of f31 at minute 30; the process dies (exit 1) at 30.5 and the container crash-loops."""
    p = running_pod(s, "xid-crash", 0, "f31", 2, restart_policy="OnFailure")
    name = p["metadata"]["name"]
    _gpus(s, "f31", name, lambda t, g: 1980.0, step=1.0,
          extra_at=lambda t, g: ff.dcgm(s, t, "f31", g, "DCGM_FI_DEV_XID_ERRORS", 79.0 if g == 4 and t >= 30 else 0.0,
                                        name, {"err_code": "79" if g == 4 and t >= 30 else "0"}))
    ff.throughput(s, name, 3, 30, lambda t: 1000.0)
    terminate(p, 30.5, 1, "Error")
    s.emit(30.5, p)
    last = p["status"]["containerStatuses"][0]["state"]["terminated"]
    loop = f"back-off 40s restarting failed container=trainer pod={name}_{NS}(u)"
    p["status"]["containerStatuses"][0].update(restartCount=3, lastState={"terminated": last},
                                               state={"waiting": {"reason": "CrashLoopBackOff", "message": loop}})
    s.emit(33, p)


def _sick_node(name: str, at: float, code: int) -> dict:
    """``name`` as NVSentinel and the device plugin leave it after XID ``code`` at ``at``: 7 of 8 GPUs allocatable,
    the SysLogsXIDError condition, cordoned (node_gpu-unhealthy-nvsentinel.yaml)."""
    sick = ref("node_gpu-unhealthy-nvsentinel.yaml", "Node")
    n = node(name, "rack-5")
    n["metadata"]["labels"].update(sick["metadata"]["labels"])
    n["spec"] = {"unschedulable": True, "taints": [dict(t, timeAdded=iso(at + 0.05)) if "timeAdded" in t else t
                                                   for t in sick["spec"]["taints"]]}
    n["status"]["allocatable"]["nvidia.com/gpu"] = sick["status"]["allocatable"]["nvidia.com/gpu"]
    n["status"]["conditions"] = [dict(c, lastTransitionTime=iso(at), lastHeartbeatTime=iso(at),
                                      message=c["message"].replace("79", str(code)))
                                 if "lastTransitionTime" in c else c for c in sick["status"]["conditions"]]
    return n


def _xid_gpu(s: Story, node_name: str, pod_name: str, gpu: int, code: int, at: float) -> None:
    _gpus(s, node_name, pod_name, lambda t, g: 1980.0, step=1.0,
          extra_at=lambda t, g: ff.dcgm(s, t, node_name, g, "DCGM_FI_DEV_XID_ERRORS",
                                        float(code) if g == gpu and t >= at else 0.0, pod_name,
                                        {"err_code": str(code) if g == gpu and t >= at else "0"}))


def _xid_unhealthy(s: Story) -> None:
    """XID 63 on GPU 6 of f39 at 40; the device plugin marks it unhealthy (allocatable 7 of 8) and NVSentinel
    cordons the node at 40.05; the job keeps running there. One GPU, one incident: gpu_fault."""
    s.add(0, node("f39", "rack-5"))
    p = running_pod(s, "xid-sick", 0, "f39", 2)["metadata"]["name"]
    _xid_gpu(s, "f39", p, 6, 63, 40)
    s.emit(40.05, _sick_node("f39", 40, 63))


def _xid_and_more_unhealthy(s: Story) -> None:
    """Control: XID 63 on GPU 1 of f42 at 40, but 2 of its 8 GPUs marked unhealthy (allocatable 6): more than the
    fault names, so the node's loss is not only that GPU."""
    s.add(0, node("f42", "rack-5"))
    p = running_pod(s, "xid-two", 0, "f42", 2)["metadata"]["name"]
    _xid_gpu(s, "f42", p, 1, 63, 40)
    n = _sick_node("f42", 40, 63)
    n["status"]["allocatable"]["nvidia.com/gpu"] = "6"
    s.emit(40.05, n)


def _xid_and_node_lost(s: Story) -> None:
    """Control: XID 79 on GPU 2 of f40 at 44 with its allocatable drop, while f41, the job's other node, stops
    posting status at 48 and the taint manager deletes the pod there at 53: two incidents."""
    for n in ("f40", "f41"):
        s.add(0, node(n, "rack-5"))
    p0 = running_pod(s, "xid-lost", 0, "f40", 2)["metadata"]["name"]
    p = running_pod(s, "xid-lost", 1, "f41", 2)
    _xid_gpu(s, "f40", p0, 2, 79, 44)
    s.emit(44.05, _sick_node("f40", 44, 79))
    lost = ref("node_notready-taint-eviction.yaml", "Node")
    n = node("f41", "rack-5")
    n["spec"]["taints"] = [dict(t, timeAdded=iso(48 + k / 60)) for k, t in enumerate(lost["spec"]["taints"])]
    n["status"]["conditions"] = [dict(c, lastTransitionTime=iso(48), lastHeartbeatTime=iso(47.3))
                                 for c in lost["status"]["conditions"]]
    s.emit(48, n)
    disruption = next(c for c in ref("node_notready-taint-eviction.yaml", "Pod")["status"]["conditions"]
                      if c["type"] == "DisruptionTarget")
    p["status"]["conditions"].append(dict(disruption, lastTransitionTime=iso(53)))
    p["metadata"]["deletionTimestamp"] = iso(53.5)
    s.emit(53, p)
    s.emit(54, p, "DELETED")


def _throttle_and_links(s: Story) -> None:
    """A throttled GPU and an NVLink fault at once (f32): interconnect degradation comes first."""
    p = running_pod(s, "throttle-ic", 0, "f32", 2)["metadata"]["name"]
    crc = {"v": 0.0}

    def links(t: float, g: int) -> None:
        ff.dcgm(s, t, "f32", g, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 50_000.0 if t >= 30 else 180_000.0, p)
        if g == 0:
            crc["v"] += 40 if t >= 30 else 0
            ff.dcgm(s, t, "f32", g, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", crc["v"], p)

    _gpus(s, "f32", p, lambda t, g: 1400.0 if g == 6 and t >= 30 else 1980.0, extra_at=links)
    ff.throughput(s, p, 3, END, lambda t: 600.0 if t >= 30 else 1000.0)


def _oom_failed(s: Story) -> None:
    """Kueue Job, OnFailure, backoffLimit 2: rank 0 OOMKilled at 30 and 36; at 42 the Job fails
    (BackoffLimitExceeded), the controller deletes its pods (gone before CAPTURE) and Kueue finishes the Workload."""
    job = ff.batch_job("oom-failed", 2, backoff_limit=2, completions=1)
    s.add(2, job)
    wl = ff.kueue_workload("oom-failed", 1.9, 2, 1)
    s.add(1.9, wl)
    p = running_pod(s, "oom-failed", 0, "f33", 2, restart_policy="OnFailure")
    p["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": wl["metadata"]["name"]}
    for restarts, t in enumerate((30, 36), start=1):
        s.emit(t, terminate(p, t, 137, "OOMKilled"))
        last = p["status"]["containerStatuses"][0]["state"]["terminated"]
        run(p, t + 0.3, restarts)
        p["status"]["containerStatuses"][0]["lastState"] = {"terminated": last}
        s.emit(t + 0.3, p)
    failed = ref("job_backofflimit-exceeded.yaml", "Job")["status"]["conditions"]
    job["status"] = {"failed": 0, "active": 0, "startTime": iso(2),
                     "conditions": [dict(c, lastTransitionTime=iso(42), lastProbeTime=iso(42)) for c in failed]}
    s.emit(42, job)
    p["metadata"]["deletionTimestamp"] = iso(42.5)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(42.05, p)
    s.emit(42.6, p, "DELETED")
    done = ref("kueue_workload-finished-failed.yaml", "Workload")["status"]["conditions"][0]
    wl["status"]["conditions"].append(dict(done, lastTransitionTime=iso(42.7)))
    s.emit(42.7, wl)


def _drained_early(s: Story) -> None:
    """f35 drained at 40: the job's pod there evicted and gone at 41 (before CAPTURE); its replacement stays Pending
    (unschedulable). Met later, only the kubelet's Killing Event and the Job's SuccessfulCreate Events tell it."""
    job = ff.batch_job("drained-early", 4)
    s.add(4, job)
    for i, n in enumerate(("f34", "f35")):
        p = running_pod(s, "drained-early", i, n, 4)
        s.add(4, {"apiVersion": "v1", "kind": "Event",
                  "metadata": {"name": f"drained-early.create{i}", "namespace": NS},
                  "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": "drained-early", "namespace": NS},
                  "type": "Normal", "reason": "SuccessfulCreate", "message": f"Created pod: {p['metadata']['name']}",
                  "source": {"component": "job-controller"}, "count": 1, "firstTimestamp": iso(4),
                  "lastTimestamp": iso(4)})
    n = node("f35", "rack-3")
    n["spec"] = {"unschedulable": True, "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                                                    "timeAdded": iso(40)}]}
    s.emit(40, n)
    disruption = ref("node_drain-eviction.yaml", "Pod")["status"]["conditions"][0]
    p["status"]["conditions"].append(dict(disruption, lastTransitionTime=iso(40.05)))
    p["metadata"]["deletionTimestamp"] = iso(40.55)
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(40.05, p)
    kill = next(d for d in ff.docs("node_drain-eviction.yaml") if d.get("reason") == "Killing")
    s.add(40.06, pod_event(p, dict(kill, source={"component": "kubelet", "host": "f35"}), 40.06, 40.06, 1))
    s.emit(41, terminate(p, 40.9, 143, "Error", "Failed"))
    s.emit(41.1, p, "DELETED")
    r = job_pod("drained-early", 1, 41.2)
    r["metadata"]["name"] = "drained-early-1-z9y8x"
    r["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "lastTransitionTime": iso(41.3),
                                  "message": "0/35 nodes are available: 1 node(s) were unschedulable, 34 Insufficient "
                                             "nvidia.com/gpu."}]
    s.add(41.2, r)


def _not_jobs(s: Story) -> None:
    """Node agents and services are not jobs: dcgm-exporter's DaemonSet pod, a controller's pod without GPUs."""
    from tests.sql.lakefix import pod

    agent = pod(NS, "dcgm-exporter-x2v9k", "DaemonSet", "dcgm-exporter", "f1", "Running", gpus=0)
    svc = pod(NS, "kueue-controller-manager-7f9c-abcde", "ReplicaSet", "kueue-controller-manager-7f9c", "f2",
              "Running", gpus=0)
    for p in (agent, svc):
        p["metadata"]["creationTimestamp"] = iso(0)
        s.add(0.5, run(ff.bind(p, p["spec"]["nodeName"], 0.2), 0.5))


def _story() -> Story:
    s = Story()
    ff.setup(s, 36)
    for fn in (_image_pull, _config_error, _mount, _slow_pull, _ready_timeout, _oom_loop, _backoff_limit,
               _jobset_restarts, _finisher, _node_lost, _kueue_node_lost, _drained, _gpu_sick, _node_decoys, _throttled,
               _throttled_bits, _hot_gpu, _clock_blip, _hung, _vanished, _checkpointer, _xid_crash,
               _throttle_and_links, _oom_failed, _drained_early, _oom_once, _xid_unhealthy, _xid_and_node_lost,
               _xid_and_more_unhealthy, _not_jobs):
        fn(s)
    s.add(END, node("f32", "rack-3"))  # the data's "now"
    return s


STORY = _story()


@pytest.fixture(scope="module", params=["watched", "listed"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    capture = None if request.param == "watched" else CAPTURE
    _, con, _ = build_lake(tmp_path_factory.mktemp(f"field-{request.param}") / "data",
                           lambda raw: STORY.write(raw, capture))
    yield request.param, con
    con.close()


def _rows(con) -> dict[tuple[str, str], dict]:
    return {(r["job"], r["root_cause"]): r for r in diagnose.findings(con, include_healthy=True)}


def _primary(con) -> dict[str, str]:
    return dict(con.execute("SELECT job, root_cause FROM marts.jobs WHERE namespace = ?", [NS]).fetchall())


EXPECTED = {
    "img-pull": "startup_failure", "cfg-err": "startup_failure", "mount-wait": "startup_failure",
    "slow-pull": "healthy", "ready-timeout": "startup_failure", "oom-loop": "workload_crash",
    "bad-exit": "workload_crash", "js-restarts": "workload_crash", "finisher": "healthy",
    "node-lost": "node_failure", "drained": "node_failure", "gpu-sick": "node_failure", "cordon-ok": "healthy",
    "throttled": "gpu_throttle", "throttle-bits": "gpu_throttle", "hot-gpu": "healthy",
    "clock-blip": "unexplained_slowdown", "hung": "training_stalled", "vanished": "training_stalled",
    "checkpointer": "healthy", "xid-crash": "gpu_fault", "throttle-ic": "interconnect_degradation",
    "oom-failed": "workload_crash", "drained-early": "node_failure", "oom-once": "workload_crash",
    "tas-lost": "node_failure", "xid-sick": "gpu_fault", "xid-lost": "gpu_fault",
    "xid-two": "gpu_fault",
}
# second findings that are a separate incident of the same job
SECOND = {("xid-lost", "node_failure"), ("xid-two", "node_failure")}


def test_every_job_gets_its_class_and_no_job_is_invented(built) -> None:
    _, con = built
    assert _primary(con) == EXPECTED


def test_one_incident_one_finding(built) -> None:
    """The crash the XID caused is the GPU fault's; the throttled GPU during a link fault is the link's; the node
    decoys hold no job; the clock blip is no throttle; pauses are no slowdown."""
    _, con = built
    rows = _rows(con)
    assert ("xid-crash", "workload_crash") not in rows and ("xid-crash", "training_stalled") not in rows
    assert ("throttle-ic", "gpu_throttle") not in rows
    assert ("clock-blip", "gpu_throttle") not in rows
    assert not [k for k in rows if k[0] == "checkpointer" and k[1] != "healthy"]
    assert not [k for k in rows if k[0] in ("hung", "vanished") and k[1] in ("unexplained_slowdown",)]
    assert con.execute("SELECT count(*) FROM marts.findings WHERE list_contains(nodes, 'f20')").fetchone()[0] == 0
    # a member replaced after its node was lost: the node's incident, not a gang that fails to assemble
    assert ("node-lost", "gang_assembly") not in rows and ("drained", "gang_assembly") not in rows
    # every finding but the primary is a separate incident: only xid-lost has a second one (its other node lost)
    extra = [k for k in rows if k[1] not in (EXPECTED[k[0]], "healthy") and k not in SECOND]
    assert extra == [], extra


def test_gpu_marked_unhealthy_after_its_xid_is_one_incident(built) -> None:
    """The allocatable drop that follows a GPU's XID on the same node is the GPU fault's, not a lost node; a node
    really lost beside it (NotReady, its pod deleted) is still its own incident (watched and first seen at 50)."""
    _, con = built
    rows = _rows(con)
    assert sorted(c for j, c in rows if j == "xid-sick") == ["gpu_fault"]
    assert rows[("xid-sick", "gpu_fault")]["evidence"]["faults"][0]["xid"] == 63
    assert sorted(c for j, c in rows if j == "xid-lost") == ["gpu_fault", "node_failure"]
    f = rows[("xid-lost", "node_failure")]
    assert f["nodes"] == ["f41"] and [loss["how"] for loss in f["evidence"]["losses"]] == ["not_ready"]
    assert rows[("xid-lost", "gpu_fault")]["nodes"] == ["f40"]
    # two GPUs marked unhealthy where the fault names one: the node is not only that GPU's trouble
    assert sorted(c for j, c in rows if j == "xid-two") == ["gpu_fault", "node_failure"]
    assert rows[("xid-two", "node_failure")]["evidence"]["losses"][0]["gpus_allocatable"] == 6


def test_image_that_never_pulls(built) -> None:
    _, con = built
    f = _rows(con)[("img-pull", "startup_failure")]
    ev = f["evidence"]
    assert f["started_at"] == iso(15.05)  # bound at 5.05 (PodScheduled) + the 10 min threshold, both ways
    assert f["ended_at"] is None and f["severity"] == "critical"
    assert ev["pods_stuck"] == 2 and ev["gpus_held"] == 16
    fp = ev["first_pod"]
    assert fp["reason"] == "ImagePullBackOff" and fp["image"] == ff.IMAGE
    assert fp["message"].startswith(f'Back-off pulling image "{ff.IMAGE}": ErrImagePull: rpc error: code = NotFound')
    assert ff.IMAGE in f["summary"] and "ImagePullBackOff" in f["summary"]
    assert {e["reason"] for e in ev["events"]} >= {"Failed", "BackOff"}


def test_missing_secret_is_a_failure_at_once(built) -> None:
    _, con = built
    f = _rows(con)[("cfg-err", "startup_failure")]
    assert f["started_at"] == iso(62.2)  # 8 minutes before the data's now: no threshold for what cannot clear
    assert f["evidence"]["first_pod"]["immediate"] is True
    assert 'secret "wandb-api-key" not found' in f["summary"]


def test_volume_that_never_mounts(built) -> None:
    _, con = built
    f = _rows(con)[("mount-wait", "startup_failure")]
    assert f["started_at"] == iso(30.05)
    assert f["evidence"]["first_pod"]["reason"] == "FailedMount"
    assert "MountVolume.SetUp failed" in f["summary"] or "Unable to attach or mount" in f["summary"]


def test_slow_pull_that_finishes_is_start_up_time(built) -> None:
    _, con = built
    f = _rows(con)[("slow-pull", "healthy")]
    assert 180 <= f["evidence"]["start_up_s"] <= 200


def test_kueue_pods_ready_timeout(built) -> None:
    mode, con = built
    rows = _rows(con)
    f = rows[("ready-timeout", "startup_failure")]
    # watched: the first pods' binding + 10 min; listed: those pods are gone, Kueue's eviction still says it
    assert f["started_at"] == (iso(12.1) if mode == "watched" else iso(32))
    assert f["evidence"]["kueue_eviction"]["reason"] == "PodsReadyTimeout"
    # requeued after the timeout: in the queue, not a quota problem; the new pods were bound, not a gang problem
    assert not [k for k in rows if k[0] == "ready-timeout" and k[1] not in ("startup_failure",)]


def test_oom_crash_loop(built) -> None:
    mode, con = built
    f = _rows(con)[("oom-loop", "workload_crash")]
    ev = f["evidence"]
    first = ev["first_failure"]
    assert first["pod"] == "oom-loop-1-x7k2p" and first["rank"] == "1" and first["node"] == "f8"
    assert first["exit_code"] == 137 and first["reason"] == "OOMKilled" and first["oom_killed"] is True
    # watched: the first OOM kill itself; listed: the kubelet's BackOff Event that outlived it
    assert f["started_at"] == (iso(20) if mode == "watched" else iso(20.2))
    assert ev["restarts"] == 3 and ev["crash_looping"] == 1 and f["severity"] == "critical"
    assert "out of memory" in f["summary"] and "OOMKilled" in f["summary"] and f["nodes"] == ["f8"]


def test_crash_that_held_its_restart_is_over(built) -> None:
    _, con = built
    f = _rows(con)[("oom-once", "workload_crash")]
    assert f["started_at"] == iso(20) and f["ended_at"] == iso(20.2) and f["severity"] == "warning"


def test_backoff_limit_names_the_rank_that_failed_first(built) -> None:
    _, con = built
    f = _rows(con)[("bad-exit", "workload_crash")]
    ev = f["evidence"]
    assert ev["first_failure"]["pod"] == "bad-exit-0-x7k2p" and ev["first_failure"]["exit_code"] == 1
    assert ev["failures"] == 1  # rank 1's exit 143 came after its deletion: stopped, not crashed
    assert ev["controller"]["reason"] == "BackoffLimitExceeded" and ev["controller"]["kind"] == "Job"
    assert f["started_at"] == iso(25) and f["ended_at"] is None


def test_failed_job_whose_pods_are_gone_is_a_crash_not_a_gang(built) -> None:
    mode, con = built
    rows = _rows(con)
    f = rows[("oom-failed", "workload_crash")]
    ev = f["evidence"]
    assert ev["controller"]["reason"] == "BackoffLimitExceeded"
    if mode == "watched":  # the pod was seen failing: its OOM kills
        assert ev["first_failure"]["reason"] == "OOMKilled" and f["started_at"] == iso(30)
    else:  # gone before the capture: the Job's own decision is all that is left
        assert ev["first_failure"]["pod"] is None and f["started_at"] == iso(42)
    assert con.execute("SELECT state FROM marts.jobs WHERE job = 'oom-failed'").fetchone()[0] == "finished"


def test_drain_met_after_the_pod_is_gone(built) -> None:
    mode, con = built
    f = _rows(con)[("drained-early", "node_failure")]
    loss = f["evidence"]["losses"][0]
    assert loss["how"] == "drain" and loss["node"] == "f35" and loss["cordoned"] is True
    assert loss["reason"] == ("EvictionByEvictionAPI" if mode == "watched" else "Killing")
    assert f["started_at"] == iso(40.05 if mode == "watched" else 40.06)


def test_jobset_that_reached_max_restarts(built) -> None:
    _, con = built
    ev = _rows(con)[("js-restarts", "workload_crash")]["evidence"]
    assert ev["controller"]["reason"] == "ReachedMaxRestarts" and ev["controller"]["jobset_restarts"] == 3


def test_node_lost_under_the_job(built) -> None:
    _, con = built
    f = _rows(con)[("node-lost", "node_failure")]
    loss = f["evidence"]["losses"][0]
    assert f["nodes"] == ["f14"] and f["started_at"] == iso(48)
    assert loss["how"] == "not_ready" and loss["ready"] == "Unknown" and loss["reason"] == "NodeStatusUnknown"
    assert [p["reason"] for p in loss["pods"]] == ["DeletionByTaintManager"]
    assert "taint manager" in f["summary"]
    assert f["ended_at"] == iso(54.6)  # the replacement runs on f15


def test_node_lost_under_kueue_is_no_preemption(built) -> None:
    """Kueue's NodeFailures eviction and the requeue wait after it are the lost node's incident: node_failure, open
    until the job runs again; no preemption and no admission wait is invented for it (watched and first seen in an
    initial list at minute 50, 25 minutes into the wait)."""
    _, con = built
    rows = _rows(con)
    f = rows[("tas-lost", "node_failure")]
    assert f["started_at"] == iso(20) and f["ended_at"] is None and f["nodes"] == ["f37"]
    losses = {loss["how"]: loss for loss in f["evidence"]["losses"]}
    assert losses["kueue"]["reason"] == "NodeFailures" and "unhealthy node(s): f37" in losses["kueue"]["message"]
    assert losses["kueue"]["lost_at"] == iso(25.05)
    assert losses["not_ready"]["node"] == "f37" and losses["not_ready"]["ready"] == "Unknown"
    assert sorted(c for j, c in rows if j == "tas-lost") == ["node_failure"]


def test_drain(built) -> None:
    _, con = built
    f = _rows(con)[("drained", "node_failure")]
    loss = f["evidence"]["losses"][0]
    assert loss["how"] == "drain" and loss["cordoned"] is True and loss["node"] == "f17"
    assert f["started_at"] == iso(49.05) and f["ended_at"] == iso(51.2)
    assert ("drained", "workload_crash") not in _rows(con)  # exit 143 after the eviction is no crash


def test_gpus_marked_unhealthy(built) -> None:
    _, con = built
    f = _rows(con)[("gpu-sick", "node_failure")]
    loss = f["evidence"]["losses"][0]
    assert loss["how"] == "gpus_unhealthy" and (loss["gpus_allocatable"], loss["gpus_capacity"], loss["gpus_held"]) \
        == (7, 8, 8)
    assert f["started_at"] == iso(40)
    assert loss["health_conditions"][0]["type"] == "SysLogsXIDError"


def test_throttled_gpu_against_its_peers(built) -> None:
    _, con = built
    f = _rows(con)[("throttled", "gpu_throttle")]
    (g,) = f["evidence"]["throttled_gpus"]
    assert (g["node"], g["gpu"], g["sm_clock"], g["gpu_temp"]) == ("f22", "3", 1410, 84.0)
    assert 1975 <= g["peers_clock"] <= 1980 and g["reasons"] == []
    assert f["nodes"] == ["f22"] and "1410 MHz" in f["summary"]


def test_throttle_reasons_when_the_exporter_has_them(built) -> None:
    _, con = built
    (g,) = _rows(con)[("throttle-bits", "gpu_throttle")]["evidence"]["throttled_gpus"]
    assert g["gpu"] == "5" and set(g["reasons"]) == {"sw_power_cap", "hw_slowdown", "hw_thermal"}
    assert g["thermal_throttle"] > 0.1


def test_training_stalled(built) -> None:
    _, con = built
    rows = _rows(con)
    f = rows[("hung", "training_stalled")]
    assert f["started_at"] == iso(30) and f["ended_at"] is None and f["severity"] == "critical"
    assert f["evidence"]["how"] == "reported_zero" and f["evidence"]["gpu_util"] == 100.0
    v = rows[("vanished", "training_stalled")]
    assert v["started_at"] == iso(35) and v["evidence"]["how"] == "stopped_reporting"
    assert "2/2 pods stay Running" in f["summary"]


def test_healthy_says_whether_progress_is_seen(built) -> None:
    _, con = built
    rows = _rows(con)
    assert rows[("checkpointer", "healthy")]["evidence"]["throughput_reported"] is True
    assert rows[("cordon-ok", "healthy")]["evidence"]["throughput_reported"] is False


@pytest.mark.parametrize("job,cause,names", [
    ("img-pull", "startup_failure", ["registry.example.com/ml/trainer:v2.3.1", "imagePullSecrets",
                                     "kubectl describe pod -n field img-pull-0-x7k2p"]),
    ("cfg-err", "startup_failure", ['secret "wandb-api-key" not found', "Create the missing Secret"]),
    ("oom-loop", "workload_crash", ["Raise the memory limit of oom-loop-1-x7k2p",
                                    "kubectl logs -n field oom-loop-1-x7k2p -c trainer --previous"]),
    ("node-lost", "node_failure", ["f14", "kubectl describe node f14", "DeletionByTaintManager"]),
    ("drained", "node_failure", ["kubectl uncordon f17", "PodDisruptionBudget"]),
    ("gpu-sick", "node_failure", ["7 of 8 GPUs", "kubectl drain f19"]),
    ("throttled", "gpu_throttle", ["GPU 3 (GPU-f22-3) on f22", "1,410 MHz", "nvidia-smi -q -d PERFORMANCE"]),
    ("hung", "training_stalled", ["py-spy dump", "100 % busy", "grep -iE 'nccl|watchdog|timeout'"]),
])
def test_next_steps_name_the_objects(built, job: str, cause: str, names: list[str]) -> None:
    from reports import nextsteps

    _, con = built
    out = nextsteps.explain(_rows(con)[(job, cause)])
    text = " ".join(out.sentences) + " " + " ".join(f"{s.action} {s.check} {s.act}" for s in out.steps)
    for name in names:
        assert name in text, (name, text)


# --- waitForPodsReady backoff ---------------------------------------------------------------------------------------
# A second cluster, configured as many are: waitForPodsReady.timeout 5m and requeuingStrategy backoffBaseSeconds 240
# (backoffMaxSeconds 3600), so Kueue's backoffs grow 4, 8, 16, 32 min (base * 2^(count-1)). Shapes:
# kueue_podsready-timeout-eviction.yaml and Kueue v0.19 workload_controller.go / pkg/workload SetQuotaReservation:
# evicted, the Workload gets Requeued False (the eviction's reason and message) until requeueAt, then Requeued True
# BackoffFinished; a new reservation turns Evicted False reason QuotaReserved, message "Previously: <message>".
B_CAPTURE = {"listed": 24.5, "listed_in_backoff": 40.0}
B_END = 48.0
BASE_MIN = 4.0
ASSIGN = "couldn't assign flavors to pod set main: "
B_QUOTA = ASSIGN + "insufficient unused quota for nvidia.com/gpu in flavor gpu, 8 more needed"


def _b_workload(job: str, created: float, cq: str) -> dict:
    wl = ff.kueue_workload(job, created, created, 1)
    wl["status"] = {"conditions": []}
    wl["metadata"]["name"] = f"job-{job}-5a2b3"
    wl["spec"]["queueName"] = cq.replace("-cq", "-lq")
    return wl


def _set(wl: dict, *conds: dict) -> None:
    """Kueue's SetStatusCondition: one condition per type, the newest wins."""
    new = {c["type"] for c in conds}
    wl["status"]["conditions"] = [c for c in wl["status"]["conditions"] if c["type"] not in new] + list(conds)


def _admit(s: Story, wl: dict, cq: str, at: float) -> None:
    _set(wl, cond("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", at),
         cond("Admitted", "True", "Admitted", "The workload is admitted", at))
    ev = next((c for c in wl["status"]["conditions"] if c["type"] == "Evicted"), None)
    if ev is not None:
        _set(wl, cond("Evicted", "False", "QuotaReserved", "Previously: " + ev["message"], at))
    if not any(c["type"] == "PodsReady" for c in wl["status"]["conditions"]):
        _set(wl, cond("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", at))
    wl["status"]["admission"] = {"clusterQueue": cq, "podSetAssignments": [
        {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "gpu"}}]}
    s.emit(at, wl)


def _pending(s: Story, wl: dict, at: float, until: float, first: bool = True) -> None:
    """The scheduler finds no quota (v0.19, gate off: Pending); a condition staying False keeps its transition time."""
    old = next((c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved"), None)
    q = cond("QuotaReserved", "False", "Pending", B_QUOTA, at)
    if old is not None and old["status"] == "False":
        q["lastTransitionTime"] = old["lastTransitionTime"]
    _set(wl, q)
    s.emit(at, wl)
    name = wl["metadata"]["name"]
    warn = {"apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "Pending", "message": B_QUOTA,
            "metadata": {"name": f"{name}.pending{int(at * 100)}", "namespace": NS},
            "involvedObject": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": name,
                               "namespace": NS},
            "source": {"component": "kueue-admission"}, "count": 1,
            "firstTimestamp": iso(at), "lastTimestamp": iso(at)}
    s.add(at, warn)
    if until > at + 0.5:
        s.emit(until, dict(warn, count=int(until - at) + 1, lastTimestamp=iso(until)))


def _never_ready(s: Story, wl: dict, job: str, k: int, node_name: str, admitted: float) -> dict:
    """The k-th admission's pod: bound, then ErrImagePull / ImagePullBackOff until Kueue evicts."""
    back = ref(PULL, "Pod", 0)["status"]["containerStatuses"][0]["state"]["waiting"]
    p = job_pod(job, 0, admitted + 0.05)
    p["metadata"]["name"] = f"{job}-0-a{k}x2p"
    p["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": wl["metadata"]["name"]}
    s.add(admitted + 0.05, p)
    s.emit(admitted + 0.1, bind(p, node_name, admitted + 0.1))
    err = ref(PULL, "Pod", 1)["status"]["containerStatuses"][0]["state"]["waiting"]
    s.emit(admitted + 0.2, waiting(p, err["reason"], err["message"]))
    s.emit(admitted + 0.5, waiting(p, back["reason"], back["message"]))
    return p


def _evict(s: Story, wl: dict, pod_: dict, at: float) -> float:
    """waitForPodsReady times out: Evicted PodsReadyTimeout, requeueState bumped, the Job stopped, its pod deleted,
    Requeued False until requeueAt. Returns requeueAt."""
    name = wl["metadata"]["name"]
    msg = f"Exceeded the PodsReady timeout {NS}/{name}"
    count = wl["status"].get("requeueState", {}).get("count", 0) + 1
    requeue_at = at + BASE_MIN * 2 ** (count - 1)
    wl["status"]["requeueState"] = {"count": count, "requeueAt": iso(requeue_at)}
    _set(wl, cond("Evicted", "True", "PodsReadyTimeout", msg, at))
    s.emit(at, wl)
    tpl = ref("kueue_podsready-timeout-eviction.yaml", "Event", 0)
    s.add(at, {"apiVersion": "events.k8s.io/v1", "kind": "Event", "type": "Normal",
               "reason": tpl["reason"], "action": tpl["action"], "note": msg,
               "metadata": {"name": f"{name}.ev{int(at * 100)}", "namespace": NS},
               "regarding": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": name,
                             "namespace": NS},
               "reportingController": "kueue-admission", "eventTime": iso(at)})
    wl["status"].pop("admission", None)
    _set(wl, cond("QuotaReserved", "False", "Pending", msg, at + 0.05),
         cond("Admitted", "False", "NoReservation", "The workload has no reservation", at + 0.05),
         cond("Requeued", "False", "PodsReadyTimeout", msg, at + 0.05))
    s.emit(at + 0.05, wl)
    pod_["metadata"]["deletionTimestamp"] = iso(at + 0.1)
    pod_["metadata"]["deletionGracePeriodSeconds"] = 30
    s.emit(at + 0.05, pod_)
    s.emit(at + 0.1, pod_, "DELETED")
    return requeue_at


def _backoff_ends(s: Story, wl: dict, at: float) -> None:
    wl["status"]["requeueState"].pop("requeueAt", None)
    _set(wl, cond("Requeued", "True", "BackoffFinished", "The workload backoff was finished", at))
    s.emit(at, wl)


def _img_backoff(s: Story) -> None:
    """The image never pulls: admitted at 2, evicted PodsReadyTimeout at 7, 16.05 and 29.1 with backoffs of 4, 8 and
    16 min; back in the queue at 45.1 its quota was taken meanwhile (holder-a): it waits for quota, 2.9 min by the
    data's now."""
    wl = _b_workload("img-backoff", 1.5, "team-a-cq")
    s.add(1.5, wl)
    admitted = 2.0
    for k in (1, 2, 3):
        _admit(s, wl, "team-a-cq", admitted)
        p = _never_ready(s, wl, "img-backoff", k, "f43", admitted)
        requeue_at = _evict(s, wl, p, admitted + 5)
        _backoff_ends(s, wl, requeue_at)
        admitted = requeue_at + 0.05
    _pending(s, wl, 45.15, B_END - 0.5)


def _holder(s: Story, job: str, cq: str, created: float, admitted: float, node_name: str) -> None:
    """A job of the same queue that waits under 10 min for the quota an eviction released, then runs."""
    wl = _b_workload(job, created, cq)
    s.add(created, wl)
    _pending(s, wl, created + 0.05, admitted - 0.1)
    _admit(s, wl, cq, admitted)
    p = job_pod(job, 0, admitted + 0.05)
    p["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": wl["metadata"]["name"]}
    s.add(admitted + 0.05, p)
    s.emit(admitted + 0.1, bind(p, node_name, admitted + 0.1))
    s.emit(admitted + 0.6, run(p, admitted + 0.6))


def _backoff_quota(s: Story) -> None:
    """Control: admitted at 20, the image never pulls, evicted PodsReadyTimeout at 25 (backoff 4 min); holder-b takes
    the quota at 25.15; back in the queue at 29 the Workload waits on that quota for the rest of the capture (19 min
    since its backoff ended, 23 since its pod was gone)."""
    wl = _b_workload("backoff-quota", 19.5, "team-b-cq")
    s.add(19.5, wl)
    _admit(s, wl, "team-b-cq", 20)
    p = _never_ready(s, wl, "backoff-quota", 1, "f44", 20)
    requeue_at = _evict(s, wl, p, 25)
    _backoff_ends(s, wl, requeue_at)
    _pending(s, wl, requeue_at + 0.05, B_END - 0.5)


def _b_story() -> Story:
    s = Story()
    for n in ("f43", "f44", "f45", "f46"):
        s.add(0, node(n, "rack-5"))
    _img_backoff(s)
    _backoff_quota(s)
    _holder(s, "holder-a", "team-a-cq", 27, 29.2, "f45")  # img-backoff's quota, released at 29.1
    _holder(s, "holder-b", "team-b-cq", 22, 25.15, "f46")  # backoff-quota's, released at 25
    s.add(B_END, node("f47", "rack-5"))  # the data's "now"
    return s


B_STORY = _b_story()


@pytest.fixture(scope="module", params=["watched", "listed", "listed_in_backoff"])
def backoff(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """Watched; first seen at 24.5 (both jobs' pods bound and waiting); first seen at 40, inside img-backoff's 16 min
    backoff and backoff-quota's quota wait, when Kueue has deleted every pod either job had."""
    capture = B_CAPTURE.get(request.param)
    _, con, _ = build_lake(tmp_path_factory.mktemp(f"backoff-{request.param}") / "data",
                           lambda raw: B_STORY.write(raw, capture))
    yield request.param, con
    con.close()


def test_pods_ready_backoff_is_the_startup_failure(backoff) -> None:
    """Evicted PodsReadyTimeout three times with growing backoff (the last 16 min), then back in the queue and
    waiting for quota for 2.9 min: one finding, startup_failure with Kueue's eviction, open while the job keeps
    failing; the backoff is no admission wait, nothing is a preemption (watched, first seen at 24.5 with its third
    pod waiting, and first seen at 40 with no pod left: Kueue's word alone is no healthy job)."""
    mode, con = backoff
    rows = _rows(con)
    assert sorted(c for j, c in rows if j == "img-backoff") == ["startup_failure"]
    f = rows[("img-backoff", "startup_failure")]
    ev = f["evidence"]["kueue_eviction"]
    assert ev["reason"] == "PodsReadyTimeout" and ev["requeue_count"] == 3
    if mode == "listed_in_backoff":
        assert f["evidence"]["first_pod"]["pod"] is None and "never became ready" in f["summary"]
    assert ev["message"] == f"Exceeded the PodsReady timeout {NS}/job-img-backoff-5a2b3"
    # each pod waited 5 min (under the 10 min start-up threshold): Kueue's eviction says it, the first one seen
    assert f["started_at"] == (iso(7) if mode == "watched" else iso(29.1))
    assert f["ended_at"] is None
    assert _primary(con)["img-backoff"] == "startup_failure"


def test_quota_wait_after_the_backoff_is_its_own(backoff) -> None:
    """Control: evicted PodsReadyTimeout once; its backoff over, the Workload waits 19 min on quota another job took:
    admission_quota, counted from the end of the backoff (the backoff is Kueue holding it out, not the queue),
    beside the startup_failure of the pods that never became ready (watched; first seen at 24.5 with its pod
    bound and waiting, and at 40 with its pod gone). The jobs that took the released quota waited under the
    threshold: healthy."""
    mode, con = backoff
    rows = _rows(con)
    a = rows[("backoff-quota", "admission_quota")]
    assert a["evidence"]["queued_at"] == iso(29) and a["started_at"] == iso(39) and a["ended_at"] is None
    assert a["evidence"]["cause"] == "quota" and "8 more needed" in a["summary"]
    s = rows[("backoff-quota", "startup_failure")]
    assert s["evidence"]["kueue_eviction"]["reason"] == "PodsReadyTimeout" and s["started_at"] == iso(25)
    assert sorted(c for j, c in rows if j == "backoff-quota") == ["admission_quota", "startup_failure"]
    assert not [k for k in rows if k[0] == "backoff-quota" and k[1] == "preemption"]
    assert _primary(con)["backoff-quota"] == "admission_quota"
    assert {j: c for j, c in _primary(con).items() if j.startswith("holder")} == {"holder-a": "healthy",
                                                                                   "holder-b": "healthy"}
