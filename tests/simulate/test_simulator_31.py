"""Simulator, issue 31: the failures beyond scheduling and interconnect and the normal life that must stay quiet,
with every object shaped as the upstream components write it (tests/fixtures/reference/field, copied from
shared/reference/field), watched live and as first seen in an initial list, and the telemetry telling the same
story (SM clocks, clock-event fields where the exporter has them, pauses, hangs, counters, silent lost nodes)."""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from collectors.simulate import generate
from gangscope.config import Thresholds
from gangscope.records import parse_rfc3339

FIELD = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "field"
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+) (\d{13})$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
NEW = ("startup_failure", "workload_crash", "node_failure", "gpu_throttle", "training_stalled", "normal_life")
TH = Thresholds()


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("sim31")
    dirs = {n: generate(n, out, seed=5, nodes=16, interval=60.0).directory for n in NEW}
    dirs["mixed"] = generate("mixed", out, seed=5, nodes=20, interval=60.0).directory
    return dirs


def ref(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((FIELD / name).read_text()) if d is not None]


def ref_events(name: str) -> list[dict]:
    out = []
    for d in ref(name):
        out += d["items"] if d.get("kind") == "EventList" else [d] if d.get("kind") == "Event" else []
    return out


def stream(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "k8s.jsonl").read_text().splitlines()]


def history(d: Path, kind: str, prefix: str) -> dict[str, list[tuple[datetime, str, dict]]]:
    """Watch events of the ``kind`` objects whose name starts with ``prefix``: name -> [(observed, type, obj)]."""
    out: dict[str, list[tuple[datetime, str, dict]]] = defaultdict(list)
    for e in stream(d):
        o = e["object"]
        if o["kind"] == kind and o["metadata"]["name"].startswith(prefix):
            out[o["metadata"]["name"]].append((parse_rfc3339(e["observedAt"]), e["type"], o))
    return out


def events_about(d: Path, name_prefix: str) -> dict[tuple[str, str], list[dict]]:
    """(reason, message) -> the Event object's versions, for Events about objects named ``name_prefix``..."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for e in stream(d):
        o = e["object"]
        if o["kind"] == "Event" and o["involvedObject"]["name"].startswith(name_prefix):
            versions = out[(o["reason"], o["message"])]
            if not versions or versions[0]["metadata"]["name"] == o["metadata"]["name"]:
                versions.append(o)  # the first such Event's versions
    return out


def cond(obj: dict, ctype: str) -> dict | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == ctype), None)


def samples(d: Path, metric: str) -> list[tuple[dict[str, str], float, int]]:
    out = []
    with (d / "metrics.prom").open() as f:
        for line in f:
            if line.startswith(metric + "{"):
                m = SAMPLE.match(line.rstrip("\n"))
                assert m, line
                out.append((dict(LABEL.findall(m.group(2))), float(m.group(3)), int(m.group(4))))
    return out


def truth(d: Path) -> dict:
    return json.loads((d / "truth.json").read_text())


def job_truth(d: Path, name: str) -> dict:
    return next(j for j in truth(d)["jobs"] if j["job"] == name)


def ms(ts: str) -> int:
    return int(parse_rfc3339(ts).timestamp() * 1000)


def tokens(d: Path, prefix: str) -> list[tuple[int, float]]:
    return sorted((ts, v) for lab, v, ts in samples(d, "train_tokens_per_second") if lab["pod"].startswith(prefix))


# --- startup_failure ----------------------------------------------------------------------------------------------

def test_image_pull_failure_has_the_kubelet_shapes(sims: dict[str, Path]) -> None:
    d = sims["startup_failure"]
    pods = history(d, "Pod", "llama-8b-sft-")
    image = "nvcr.io/nvidia/pytorch:25.19-py3"
    # The reference's messages with its image replaced by ours (containerd's NotFound text, 1.33+ prevPullErrMsg).
    ref_pod, ref_earlier, _ = ref("pod_image-pull-backoff.yaml")
    ref_image = ref_pod["spec"]["containers"][0]["image"]
    backoff_msg = ref_pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"].replace(ref_image, image)
    pull_err = ref_earlier["status"]["containerStatuses"][0]["state"]["waiting"]["message"].replace(ref_image, image)
    assert len(pods) == 4  # two pods, then two more after Kueue's eviction and re-admission
    for hist in pods.values():
        states = [o["status"]["containerStatuses"][0]["state"]["waiting"] for _, _, o in hist
                  if o["status"].get("containerStatuses")]
        reasons = [s["reason"] for s in states]
        assert reasons[0] == "ContainerCreating" and {"ErrImagePull", "ImagePullBackOff"} <= set(reasons)
        assert all(s["message"] == pull_err for s in states if s["reason"] == "ErrImagePull")
        assert all(s["message"] == backoff_msg for s in states if s["reason"] == "ImagePullBackOff")
        assert not any(o["status"]["phase"] == "Running" for _, _, o in hist)  # never starts
        last = hist[-1][2]
        assert [c["type"] for c in last["status"]["conditions"]] == [c["type"] for c in ref_pod["status"]["conditions"]]
        assert cond(last, "PodScheduled")["status"] == "True" and cond(last, "Ready")["reason"] == "ContainersNotReady"
    # kubelet Events: the reference's reasons, types and messages; counts rise and lastTimestamp advances.
    evs = events_about(d, "llama-8b-sft-")
    for r in ref_events("pod_image-pull-backoff.yaml"):
        versions = evs[(r["reason"], r["message"].replace(ref_image, image))]
        assert versions, (r["reason"], r["message"])
        first, last = versions[0], versions[-1]
        assert first["type"] == r["type"] and first["source"]["component"] == "kubelet" and first["source"]["host"]
        assert first["involvedObject"]["fieldPath"] == "spec.containers{trainer}"
        assert last["count"] > first["count"] >= 1 and last["lastTimestamp"] > first["lastTimestamp"]
        assert [v["count"] for v in versions] == sorted(v["count"] for v in versions)


def test_kueue_evicts_a_never_ready_workload_after_30_minutes(sims: dict[str, Path]) -> None:
    """Kueue v0.19 waitForPodsReady (on by default): reference kueue_podsready-timeout-eviction.yaml."""
    d = sims["startup_failure"]
    (wl_hist,) = history(d, "Workload", "job-llama-8b-sft-").values()
    ref_stage2 = ref("kueue_podsready-timeout-eviction.yaml")[1]["status"]
    admitted = parse_rfc3339(cond(next(o for _, _, o in wl_hist if cond(o, "Admitted")), "Admitted")
                             ["lastTransitionTime"])
    evicted = next(o for _, _, o in wl_hist if (c := cond(o, "Evicted")) and c["status"] == "True")
    ev = cond(evicted, "Evicted")
    name = evicted["metadata"]["name"]
    assert ev["reason"] == "PodsReadyTimeout" and ev["message"] == f"Exceeded the PodsReady timeout ml-research/{name}"
    assert abs((parse_rfc3339(ev["lastTransitionTime"]) - admitted).total_seconds() - 1800) <= 2
    rs = evicted["status"]["requeueState"]
    assert rs["count"] == 1 and (parse_rfc3339(rs["requeueAt"]) - parse_rfc3339(ev["lastTransitionTime"])) \
        == timedelta(seconds=60)
    stopped = next(o for _, _, o in wl_hist if (c := cond(o, "Requeued")) and c["status"] == "False")
    for c in ref_stage2["conditions"]:  # the stage-2 conditions with the reference's reasons and messages
        ours = cond(stopped, c["type"])
        assert ours and (ours["status"], ours["reason"]) == (c["status"], c["reason"]), c["type"]
    assert cond(stopped, "QuotaReserved")["message"] == ev["message"] and "admission" not in stopped["status"]
    backoff = next(o for _, _, o in wl_hist if (c := cond(o, "Requeued")) and c["reason"] == "BackoffFinished")
    assert cond(backoff, "Requeued")["message"] == "The workload backoff was finished"
    assert cond(wl_hist[-1][2], "Admitted")["status"] == "True"  # re-admitted
    assert cond(wl_hist[-1][2], "Evicted")["message"] == f"Previously: {ev['message']}"
    evs = events_about(d, name)
    (note,) = evs[("EvictedDueToPodsReadyTimeout", ev["message"])]
    assert note["type"] == "Normal" and note["action"] == "EvictedDueToPodsReadyTimeout"
    evs = events_about(d, "llama-8b-sft")
    assert ("Stopped", ev["message"]) in evs and ("Suspended", "Job suspended") in evs


def test_config_error_and_volume_that_never_mounts(sims: dict[str, Path]) -> None:
    d = sims["startup_failure"]
    cfg_ref, cfg_ev, mount_ref, mount_evs, _ = ref("pod_create-config-and-mount-errors.yaml")
    want = cfg_ref["status"]["containerStatuses"][0]["state"]["waiting"]
    for _, hist in history(d, "Pod", "rlhf-reward-model-").items():
        last = hist[-1][2]
        assert last["status"]["containerStatuses"][0]["state"]["waiting"] == want  # at once, and for good
        assert last["status"]["phase"] == "Pending" and cond(last, "PodScheduled")["status"] == "True"
        assert last["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "0"
    fails = events_about(d, "rlhf-reward-model-")[("Failed", cfg_ev["message"])]
    assert fails and fails[-1]["count"] > 100  # the kubelet retries every sync for the whole hour
    (child,) = history(d, "Job", "rlhf-reward-model-workers-0").values()
    assert child[0][2]["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    for _, hist in history(d, "Pod", "data-curation-").items():
        last = hist[-1][2]
        assert last["status"]["containerStatuses"][0]["state"]["waiting"] == \
            mount_ref["status"]["containerStatuses"][0]["state"]["waiting"]
        assert cond(last, "PodReadyToStartContainers")["status"] == "False"
        assert last["spec"]["volumes"][0]["configMap"]["name"] == "dataset-cfg"
    evs = events_about(d, "data-curation-")
    for r in mount_evs["items"]:
        versions = evs[(r["reason"], r["message"])]
        assert versions and versions[-1]["count"] > 1 and versions[0]["type"] == "Warning", r["message"]
    for name in ("llama-8b-sft", "rlhf-reward-model", "data-curation"):
        j = job_truth(d, name)
        assert j["root_cause"] == "startup_failure" and j["onset"] and j["nodes"]


# --- workload_crash -----------------------------------------------------------------------------------------------

def test_oom_crash_loop_until_the_backoff_limit(sims: dict[str, Path]) -> None:
    d = sims["workload_crash"]
    pods = history(d, "Pod", "moe-expert-ft-1-")
    (hist,) = pods.values()
    ref_pod = ref("pod_crashloop-oomkilled.yaml")[0]
    ref_ctr = ref_pod["status"]["containerStatuses"][0]
    back = re.compile(r"^back-off (?P<d>(\d+m)?\d+s) restarting failed container=trainer pod=(?P<pod>\S+)$")
    assert back.match(ref_ctr["state"]["waiting"]["message"])
    waits, restarts = [], []
    for _, _, o in hist:
        cs = (o["status"].get("containerStatuses") or [{}])[0]
        w = cs.get("state", {}).get("waiting")
        if w and w["reason"] == "CrashLoopBackOff":
            m = back.match(w["message"])
            md = o["metadata"]
            assert m and m["pod"] == f"{md['name']}_{md['namespace']}({md['uid']})"
            waits.append(m["d"])
            term = cs["lastState"]["terminated"]
            assert (term["exitCode"], term["reason"]) == (ref_ctr["lastState"]["terminated"]["exitCode"], "OOMKilled")
            assert set(term) == set(ref_ctr["lastState"]["terminated"])
            assert o["status"]["phase"] == "Running" and cond(o, "Ready")["status"] == "False"
        restarts.append(cs.get("restartCount", 0))
    assert waits == ["10s", "20s", "40s", "1m20s"]
    assert restarts == sorted(restarts) and max(restarts) == 4  # restartCount reaches backoffLimit
    assert hist[-1][1] == "DELETED"
    (job,) = history(d, "Job", "moe-expert-ft").values()
    final = job[-1][2]
    assert final["spec"]["backoffLimit"] == 4 and final["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    ref_job = ref("job_backofflimit-exceeded.yaml")[1]
    assert [(c["type"], c["reason"], c["message"]) for c in final["status"]["conditions"]] == \
        [(c["type"], c["reason"], c["message"]) for c in ref_job["status"]["conditions"]]
    failed_at = parse_rfc3339(cond(final, "Failed")["lastTransitionTime"])
    assert parse_rfc3339(cond(final, "FailureTarget")["lastTransitionTime"]) < failed_at
    assert hist[-1][0] <= failed_at + timedelta(seconds=1)  # Failed only once the pods are gone
    evs = events_about(d, "moe-expert-ft")
    assert ("BackoffLimitExceeded", "Job has reached the specified backoff limit") in evs
    backoff = [v for (r, _), v in evs.items() if r == "BackOff"]
    assert backoff and backoff[0][-1]["message"].startswith("Back-off restarting failed container trainer in pod ")
    (wl,) = history(d, "Workload", "job-moe-expert-ft-").values()
    fin = cond(wl[-1][2], "Finished")
    assert (fin["status"], fin["reason"], fin["message"]) == ("True", "Failed", "Job has reached the specified backoff "
                                                                                "limit")
    onset = ms(job_truth(d, "moe-expert-ft")["onset"])
    assert min(v for ts, v in tokens(d, "moe-expert-ft-0-") if ts > onset) < 1.0  # no progress once a rank died


def test_nccl_watchdog_abort_restarts_the_jobset(sims: dict[str, Path]) -> None:
    d = sims["workload_crash"]
    j = job_truth(d, "llama-405b-pretrain")
    hang = parse_rfc3339(j["onset"])
    pods = history(d, "Pod", "llama-405b-pretrain-workers-0-")
    first = [h for h in pods.values() if h[0][2]["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "0"]
    second = [h for h in pods.values() if h[0][2]["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"]
    assert len(first) == len(second) == 2
    for h in first:
        failed = next(o for _, _, o in h if o["status"]["phase"] == "Failed")
        term = failed["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (1, "Error")  # torchrun's exit after the watchdog's SIGABRT
        assert abs((parse_rfc3339(term["finishedAt"]) - hang).total_seconds() - 600) <= 2
        assert h[-1][1] == "DELETED"
    assert all(h[-1][2]["status"]["phase"] == "Running" for h in second)
    (js_hist,) = history(d, "JobSet", "llama-405b-pretrain").values()
    restarting = next(o for _, _, o in js_hist if (c := cond(o, "RestartingJobSet")) and c["status"] == "True")
    c = cond(restarting, "RestartingJobSet")
    assert restarting["status"]["restarts"] == 1 and c["reason"] == "DefaultFailurePolicy"
    assert cond(js_hist[-1][2], "RestartingJobSet")["reason"] == "JobsReady"
    assert js_hist[-1][2]["spec"]["failurePolicy"] == {"maxRestarts": 3}
    children = history(d, "Job", "llama-405b-pretrain-workers-0")["llama-405b-pretrain-workers-0"]
    failed = next(o for _, _, o in children if cond(o, "Failed"))
    assert cond(failed, "Failed")["reason"] == "BackoffLimitExceeded"
    assert len({o["metadata"]["uid"] for _, _, o in children}) == 2  # recreated
    ref_msgs = {e["reason"]: e["message"] for e in ref_events("jobset_failed-max-restarts.yaml")}
    tmpl = re.sub(r"\(first failed job: [^)]+\)", "(first failed job: llama-405b-pretrain-workers-0)",
                  ref_msgs["RestartJobSetFailurePolicyAction"])
    assert ("RestartJobSetFailurePolicyAction", tmpl) in events_about(d, "llama-405b-pretrain")
    # 10 min of no progress while every rank's GPU spins (util ~100 %, tensor pipe idle), then a restart that trains.
    tps = tokens(d, "llama-405b-pretrain-workers-0-")
    h_ms = int(hang.timestamp() * 1000)
    during = [v for ts, v in tps if h_ms < ts < h_ms + 590_000]
    assert during and max(during) < 1.0
    assert statistics.median(v for ts, v in tps if ts > h_ms + 700_000) > 30_000
    util = [v for lab, v, ts in samples(d, "DCGM_FI_DEV_GPU_UTIL") if lab["Hostname"] == j["nodes"][0]
            and h_ms < ts < h_ms + 590_000]
    tensor = [v for lab, v, ts in samples(d, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") if lab["Hostname"] == j["nodes"][0]
              and h_ms < ts < h_ms + 590_000]
    assert min(util) >= 90 and max(tensor) < 0.05


# --- node_failure -------------------------------------------------------------------------------------------------

def _node(d: Path, name: str) -> list[tuple[datetime, str, dict]]:
    return history(d, "Node", name)[name]


def test_lost_node_conditions_taints_and_taint_manager_eviction(sims: dict[str, Path]) -> None:
    d = sims["node_failure"]
    j = job_truth(d, "falcon-40b-pretrain")
    f = next(f for f in truth(d)["faults"] if f["kind"] == "node_lost"
             and f["job"] == "ml-platform/falcon-40b-pretrain")
    onset = parse_rfc3339(f["onset"])
    ref_node, ref_pod, ref_evs = ref("node_notready-taint-eviction.yaml")
    last = _node(d, f["node"])[-1][2]
    unknown = [(c["type"], c["status"], c["reason"], c["message"]) for c in last["status"]["conditions"]]
    assert unknown == [(c["type"], c["status"], c["reason"], c["message"]) for c in ref_node["status"]["conditions"]]
    nr = parse_rfc3339(cond(last, "Ready")["lastTransitionTime"])
    assert nr - onset == timedelta(seconds=40)  # nodeMonitorGracePeriod
    taints = {(t["key"], t["effect"]): t for t in last["spec"]["taints"]}
    for t in ref_node["spec"]["taints"]:
        assert parse_rfc3339(taints[(t["key"], t["effect"])]["timeAdded"]) >= nr
    evs = events_about(d, f["node"])
    assert ("NodeNotReady", f"Node {f['node']} status is now: NodeNotReady") in evs
    (lost_pod,) = [h for h in history(d, "Pod", "falcon-40b-pretrain-").values()
                   if h[0][2]["metadata"]["name"] in {o["metadata"]["name"] for _, _, o in h
                                                      if o["spec"].get("nodeName") == f["node"]}]
    final = lost_pod[-1][2]
    dt = cond(final, "DisruptionTarget")
    ref_dt = cond(ref_pod, "DisruptionTarget")
    assert (dt["reason"], dt["message"]) == (ref_dt["reason"], ref_dt["message"])
    noexec = parse_rfc3339(taints[("node.kubernetes.io/unreachable", "NoExecute")]["timeAdded"])
    assert parse_rfc3339(dt["lastTransitionTime"]) - noexec == timedelta(seconds=300)  # tolerationSeconds
    assert final["status"]["phase"] == "Running" and final["metadata"]["deletionTimestamp"]  # Terminating for good
    assert cond(final, "Ready")["status"] == "False"
    assert {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 300} in final["spec"]["tolerations"]
    pod_evs = events_about(d, final["metadata"]["name"])
    for r in ref_evs["items"][1:]:
        msg = r["message"].replace("team-a/llama-train-worker-0-3-p0o9i", f"ml-platform/{final['metadata']['name']}")
        assert (r["reason"], msg) in pod_evs, r["reason"]
        assert pod_evs[(r["reason"], msg)][0]["source"]["component"] == r["source"]["component"]
    # the Job's replacement for that index cannot schedule anywhere
    repl = [h for h in history(d, "Pod", "falcon-40b-pretrain-1-").values() if h[0][2] is not final
            and h[0][2]["metadata"]["uid"] != final["metadata"]["uid"]]
    assert repl and cond(repl[0][-1][2], "PodScheduled")["reason"] == "Unschedulable"
    assert "node(s) had untolerated taint {node.kubernetes.io/unreachable: }" in \
        cond(repl[0][-1][2], "PodScheduled")["message"]
    # the lost node's exporters go silent; the surviving rank's throughput series stops
    on_ms = ms(f["onset"])
    assert not [ts for lab, _, ts in samples(d, "DCGM_FI_DEV_GPU_UTIL") if lab["Hostname"] == f["node"] and ts > on_ms]
    ib = [ts for lab, _, ts in samples(d, "node_infiniband_state_id") if ts > on_ms]
    assert ib and not [ts for lab, _, ts in samples(d, "node_infiniband_state_id")
                       if ts > on_ms and lab["instance"].startswith(next(
                           n["status"]["addresses"][0]["address"] for _, _, n in _node(d, f["node"])[:1]) + ":")]
    assert not [ts for ts, _ in tokens(d, "falcon-40b-pretrain-0-") if ts > on_ms]
    assert j["root_cause"] == "node_failure"


def test_kueue_tas_workload_evicted_for_node_failures(sims: dict[str, Path]) -> None:
    d = sims["node_failure"]
    (wl,) = history(d, "Workload", "job-llama-tas-70b-").values()
    node = job_truth(d, "llama-tas-70b")["nodes"][0]
    unhealthy = next(o for _, _, o in wl if o["status"].get("unhealthyNodes"))
    assert unhealthy["status"]["unhealthyNodes"] == [{"name": node}]
    ev = cond(wl[-1][2], "Evicted")
    msg = f"Workload was evicted as there was no replacement for unhealthy node(s): {node}"
    assert (ev["status"], ev["reason"], ev["message"]) == ("True", "NodeFailures", msg)
    rq = cond(wl[-1][2], "Requeued")
    assert (rq["status"], rq["reason"], rq["message"]) == ("True", "NodeFailures", msg)
    assert ("EvictedDueToNodeFailures", msg) in events_about(d, wl[0][2]["metadata"]["name"])
    assert "unhealthyNodes" not in wl[-1][2]["status"] and "admission" not in wl[-1][2]["status"]


def test_drain_evicts_through_the_eviction_api(sims: dict[str, Path]) -> None:
    d = sims["node_failure"]
    f = next(f for f in truth(d)["faults"] if f["kind"] == "drain")
    ref_node, ref_pod, ref_evs = ref("node_drain-eviction.yaml")
    node = _node(d, f["node"])[-1][2]
    assert node["spec"]["unschedulable"] is True
    assert any(t["key"] == "node.kubernetes.io/unschedulable" and t["effect"] == "NoSchedule" and t["timeAdded"]
               for t in node["spec"]["taints"])
    assert ("NodeNotSchedulable", f"Node {f['node']} status is now: NodeNotSchedulable") in events_about(d, f["node"])
    drained = [h for h in history(d, "Pod", "bert-drain-ft-").values()
               if any(o["spec"].get("nodeName") == f["node"] for _, _, o in h)]
    (h,) = drained
    dt = next(cond(o, "DisruptionTarget") for _, _, o in h if cond(o, "DisruptionTarget"))
    ref_dt = cond(ref_pod, "DisruptionTarget")
    assert (dt["reason"], dt["message"]) == (ref_dt["reason"], ref_dt["message"])
    assert h[-1][1] == "DELETED" and h[-1][2]["status"]["phase"] == "Failed"
    assert h[-1][2]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    assert ("Killing", "Stopping container trainer") in events_about(d, h[0][2]["metadata"]["name"])
    (job,) = history(d, "Job", "bert-drain-ft").values()
    assert job[-1][2]["spec"]["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    assert job[-1][2]["status"]["failed"] == 0  # a disruption does not count against backoffLimit


def test_gpu_marked_unhealthy_under_a_job_is_gpu_fault_by_precedence(sims: dict[str, Path]) -> None:
    d = sims["node_failure"]
    j = job_truth(d, "gemma-27b-ft")
    assert j["root_cause"] == "gpu_fault"
    f = next(f for f in truth(d)["faults"] if f["kind"] == "gpu_unhealthy")
    node = _node(d, f["node"])[-1][2]
    ref_node = ref("node_gpu-unhealthy-nvsentinel.yaml")[0]
    assert node["status"]["capacity"]["nvidia.com/gpu"] == ref_node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == ref_node["status"]["allocatable"]["nvidia.com/gpu"]
    xid = cond(node, "SysLogsXIDError")
    assert xid["reason"] == "SysLogsXIDErrorIsNotHealthy" and xid["message"].startswith("ErrorCode:63 ")
    assert set(node["metadata"]["labels"]) >= {k for k in ref_node["metadata"]["labels"] if k.startswith("k8saas")}
    pods = [o for h in history(d, "Pod", "gemma-27b-ft-").values() for _, _, o in h[-1:]
            if o["spec"].get("nodeName") == f["node"]]
    assert pods and pods[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert {(lab["err_code"], v) for lab, v, _ in samples(d, "DCGM_FI_DEV_XID_ERRORS")
            if lab["Hostname"] == f["node"]} == {("63", 63.0)}


# --- gpu_throttle -------------------------------------------------------------------------------------------------

def _series(d: Path, metric: str, node: str, gpu: str) -> list[tuple[int, float]]:
    return sorted((ts, v) for lab, v, ts in samples(d, metric) if lab["Hostname"] == node and lab["gpu"] == gpu)


def test_throttled_gpu_clock_below_its_peers_with_default_counters(sims: dict[str, Path]) -> None:
    d = sims["gpu_throttle"]
    f = next(f for f in truth(d)["faults"] if f["kind"] == "throttle" and f["job"] == "ml-research/qwen-72b-pretrain")
    j = job_truth(d, "qwen-72b-pretrain")
    on = ms(f["onset"])
    clock = [(lab["Hostname"], lab["gpu"], v, ts) for lab, v, ts in samples(d, "DCGM_FI_DEV_SM_CLOCK")
             if lab["Hostname"] in j["nodes"]]
    me = [(v, ts) for h, g, v, ts in clock if (h, g) == (f["node"], str(f["gpu"]))]
    for ts in sorted({ts for _, ts in me if ts > on + 60_000})[:5]:
        peers = [v for h, g, v, t in clock if abs(t - ts) < 60_000 and (h, g) != (f["node"], str(f["gpu"]))]
        mine = next(v for v, t in me if t == ts)
        assert 0.6 * statistics.median(peers) <= mine < TH.throttle_clock_ratio * statistics.median(peers)
    assert min(v for v, ts in me if on - 10 * 60_000 < ts < on - 5 * 60_000) > 1900  # at the peers' clock before
    temp = [v for t, v in _series(d, "DCGM_FI_DEV_GPU_TEMP", f["node"], str(f["gpu"])) if t > on]
    assert 86 <= statistics.median(temp) <= 93
    tps = tokens(d, "qwen-72b-pretrain-")
    base = statistics.median(v for ts, v in tps if ts < on - 60_000)
    after = statistics.median(v for ts, v in tps if ts > on + 60_000)
    assert 0.62 <= after / base <= 0.78
    # NVLink traffic shrinks only as much as the work does: not an interconnect fault
    nvl = _series(d, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", f["node"], "0")
    assert statistics.median(v for t, v in nvl if t > on) > 0.6 * statistics.median(v for t, v in nvl if t < on)
    # default counters: no clock-event or violation series on that node
    for m in ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_EXP_CLOCK_EVENTS_COUNT"):
        assert not [1 for lab, _, _ in samples(d, m) if lab["Hostname"] in j["nodes"]]


def test_opt_in_clock_event_fields_where_the_exporter_has_them(sims: dict[str, Path]) -> None:
    d = sims["gpu_throttle"]
    faults = {f["job"]: f for f in truth(d)["faults"] if f["kind"] == "throttle"}
    f = faults["team-c/mistral-22b-ft"]
    on = ms(f["onset"])
    bits = _series(d, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", f["node"], str(f["gpu"]))
    assert {v for t, v in bits if t > on} == {0x4 | 0x8} and {v for t, v in bits if on - 600_000 < t < on} == {0}
    assert {v for t, v in bits if t < 60_000 + min(t for t, _ in bits)} == {0x1}  # GPU_IDLE before the job ran
    power = _series(d, "DCGM_FI_DEV_POWER_VIOLATION", f["node"], str(f["gpu"]))
    assert power[-1][1] > power[0][1] and len({v for t, v in power if t < on}) == 1  # rises from the onset only
    counts = {lab["clock_event"]: v for lab, v, ts in samples(d, "DCGM_EXP_CLOCK_EVENTS_COUNT")
              if lab["Hostname"] == f["node"] and lab["gpu"] == str(f["gpu"]) and ts > on + 6 * 60_000}
    assert set(counts) == {"power_cap", "hw_slowdown"} and counts["power_cap"] == 300 / 60
    assert {lab["window_size_in_ms"] for lab, _, _ in samples(d, "DCGM_EXP_CLOCK_EVENTS_COUNT")} == {"300000"}
    # a DCGM 3.x CSV: the deprecated name, HW_THERMAL and thermal violation time
    g = faults["ml-platform/gemma-9b-pretrain"]
    legacy = _series(d, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", g["node"], str(g["gpu"]))
    assert legacy and {v for t, v in legacy if t > ms(g["onset"])} == {0x40}
    assert not [1 for lab, _, _ in samples(d, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS") if lab["Hostname"] == g["node"]]
    thermal = _series(d, "DCGM_FI_DEV_THERMAL_VIOLATION", g["node"], str(g["gpu"]))
    assert thermal[-1][1] > thermal[0][1]
    text = (d / "metrics.prom").read_text()
    # one # TYPE line per metric per scrape, the per-bit series under it
    block = text[text.index('clock_event="power_cap"') - 3000:text.index('clock_event="power_cap"') + 3000]
    assert block.count("# TYPE DCGM_EXP_CLOCK_EVENTS_COUNT counter") == 1


def test_sm_clock_for_every_gpu(sims: dict[str, Path]) -> None:
    d = sims["mixed"]
    last_ts = max(ts for _, _, ts in samples(d, "DCGM_FI_DEV_GPU_UTIL"))
    util = {(lab["Hostname"], lab["gpu"]) for lab, _, ts in samples(d, "DCGM_FI_DEV_GPU_UTIL") if ts > last_ts - 60_000}
    clocks = [(lab["Hostname"], lab["gpu"], v) for lab, v, ts in samples(d, "DCGM_FI_DEV_SM_CLOCK")
              if ts > last_ts - 60_000]
    assert {(h, g) for h, g, _ in clocks} == util
    assert all(v == int(v) and 300 <= v <= 1980 for _, _, v in clocks)


# --- training_stalled ---------------------------------------------------------------------------------------------

def test_stalls_gauge_counter_and_series_gone_with_pods_running(sims: dict[str, Path]) -> None:
    d = sims["training_stalled"]
    stall_s = TH.stall_s
    for name, metric, how in (("gpt-neox-20b", "train_tokens_per_second", "gauge"),
                              ("roberta-large-pt", "train_tokens_total", "counter"),
                              ("t5-xxl-ft", "train_tokens_per_second", "gone")):
        j = job_truth(d, name)
        assert j["root_cause"] == "training_stalled"
        on = ms(j["onset"])
        s = sorted((ts, v) for lab, v, ts in samples(d, metric) if lab["pod"].startswith(name))
        before = [v for ts, v in s if ts < on]
        after = [v for ts, v in s if ts > on + 60_000]
        assert len(before) > 10  # it had been reporting
        if how == "gauge":
            assert max(after) < 1.0 and len(after) * 60 >= stall_s
        elif how == "counter":
            assert before[-1] > before[0] and len(set(after)) == 1 and len(after) * 60 >= stall_s
        else:
            assert after == []
        for h in history(d, "Pod", f"{name}-").values():  # every pod stays Running, nothing changes after the onset
            assert h[-1][2]["status"]["phase"] == "Running" and h[-1][0].timestamp() * 1000 < on
        util = [v for lab, v, ts in samples(d, "DCGM_FI_DEV_GPU_UTIL") if lab["Hostname"] in j["nodes"] and ts > on]
        power = [v for lab, v, ts in samples(d, "DCGM_FI_DEV_POWER_USAGE") if lab["Hostname"] in j["nodes"]]
        assert min(util) >= 90 and max(power) > 2 * statistics.median(
            v for lab, v, ts in samples(d, "DCGM_FI_DEV_POWER_USAGE") if lab["Hostname"] in j["nodes"] and ts > on)
    assert "# TYPE train_tokens_total counter" in (d / "metrics.prom").read_text()


# --- normal_life --------------------------------------------------------------------------------------------------

def test_normal_life_is_all_healthy_and_its_pauses_are_short(sims: dict[str, Path]) -> None:
    d = sims["normal_life"]
    t = truth(d)
    assert {j["root_cause"] for j in t["jobs"]} == {"healthy"} and all(f["trap"] for f in t["faults"])
    tps = tokens(d, "olmo-7b-pretrain-")
    base = statistics.median(v for _, v in tps)
    paused = [ts for ts, v in tps if v < TH.pause_ratio * base]
    runs, start, prev = [], None, None
    for ts in paused:  # contiguous pause runs, in samples 60 s apart
        if prev is None or ts - prev > 90_000:
            if start is not None:
                runs.append(prev - start + 60_000)
            start = ts
        prev = ts
    runs.append(prev - start + 60_000)
    assert len(runs) >= 3 and max(runs) / 1000 < TH.stall_s  # again and again, each shorter than stall_s
    # the completed Job: exit 0, Complete, Workload Finished Succeeded; its throughput stops
    (job,) = history(d, "Job", "eval-sweep").values()
    assert cond(job[-1][2], "Complete")["status"] == "True"
    for h in history(d, "Pod", "eval-sweep-").values():
        assert h[-1][2]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    # the slow pull: ContainerCreating and Pulling, then Pulled and Running within startup_timeout_s
    for h in history(d, "Pod", "vit-huge-ft-").values():
        waits = [o for _, _, o in h if o["status"].get("containerStatuses")
                 and "waiting" in o["status"]["containerStatuses"][0]["state"]]
        assert waits and waits[0]["status"]["containerStatuses"][0]["state"]["waiting"] == {"reason":
                                                                                           "ContainerCreating"}
        bound = parse_rfc3339(cond(h[-1][2], "PodScheduled")["lastTransitionTime"])
        started = parse_rfc3339(h[-1][2]["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
        assert 200 < (started - bound).total_seconds() < TH.startup_timeout_s
    pulled = [m for (r, m) in events_about(d, "vit-huge-ft-") if r == "Pulled"]
    assert pulled and re.match(r'^Successfully pulled image "[^"]+" in 4m\d+\.\d{3}s \(4m\d+\.\d{3}s including '
                               r"waiting\)\. Image size: \d+ bytes\.$", pulled[0])


def test_normal_life_nodes_and_gpus(sims: dict[str, Path]) -> None:
    d = sims["normal_life"]
    t = truth(d)
    held = {n for j in t["jobs"] for n in j["nodes"]}
    faults = t["faults"]
    lost = next(f for f in faults if f["kind"] == "node_lost")
    empty_cordon = next(f for f in faults if f["kind"] == "cordon" and f["node"] not in held)
    busy_cordon = next(f for f in faults if f["kind"] == "cordon" and f["node"] in held)
    assert lost["node"] not in held and lost["until"]
    nodes = {n: h[-1][2] for n, h in history(d, "Node", "gpu-node-").items()}
    assert cond(nodes[lost["node"]], "Ready")["status"] == "True"  # back after a while
    assert nodes[empty_cordon["node"]]["spec"]["unschedulable"] is True
    # the job under the cordoned node keeps running: no pod of it is evicted, deleted or replaced
    job = next(j for j in t["jobs"] if busy_cordon["node"] in j["nodes"])
    pods = history(d, "Pod", f"{job['job']}-")
    assert len(pods) == len(job["nodes"]) and all(h[-1][1] != "DELETED" and not cond(h[-1][2], "DisruptionTarget")
                                                  for h in pods.values())
    assert "unschedulable" not in nodes[busy_cordon["node"]]["spec"]  # uncordoned later
    hot = next(f for f in faults if f["kind"] == "hot_gpu")
    temp = [v for ts, v in _series(d, "DCGM_FI_DEV_GPU_TEMP", hot["node"], str(hot["gpu"])) if ts > ms(hot["onset"])]
    clock = [v for ts, v in _series(d, "DCGM_FI_DEV_SM_CLOCK", hot["node"], str(hot["gpu"])) if ts > ms(hot["onset"])]
    assert 85 <= statistics.median(temp) <= 89 and min(clock) > 0.95 * 1980
    dip = next(f for f in faults if f["kind"] == "clock_dip")
    series = _series(d, "DCGM_FI_DEV_SM_CLOCK", dip["node"], str(dip["gpu"]))
    near = [v for ts, v in series if abs(ts - ms(dip["onset"])) < 10 * 60_000]
    assert sum(1 for v in near if v < TH.throttle_clock_ratio * 1900) == 1  # one scrape


# --- mixed and first contact --------------------------------------------------------------------------------------

def test_mixed_has_one_job_of_each_new_class(sims: dict[str, Path]) -> None:
    classes = [j["root_cause"] for j in truth(sims["mixed"])["jobs"]]
    for c in ("node_failure", "gpu_throttle", "startup_failure", "workload_crash", "training_stalled"):
        assert classes.count(c) == 1, c


@pytest.mark.parametrize("variant, check", [
    ("startup_failure@after", "pull"), ("workload_crash@onset", "oom"), ("node_failure@after", "lost"),
    ("normal_life@pulling", "slow_pull"), ("normal_life@pause", "pause")])
def test_first_seen_in_an_initial_list(tmp_path: Path, variant: str, check: str) -> None:
    """Each story met in the middle: the state at the capture, its history only in the objects' own timestamps."""
    g = generate(variant, tmp_path, seed=5, nodes=16, interval=60.0)
    t = truth(g.directory)
    capture = parse_rfc3339(t["capture_at"])
    evs = stream(g.directory)
    first = {(e["object"]["kind"], e["object"]["metadata"]["name"]): e["object"] for e in evs
             if parse_rfc3339(e["observedAt"]) < capture + timedelta(seconds=1)}
    assert all(e["type"] == "ADDED" for e in evs if parse_rfc3339(e["observedAt"]) < capture + timedelta(seconds=1))
    pods = {n: o for (k, n), o in first.items() if k == "Pod"}
    if check == "pull":
        stuck = [o for n, o in pods.items() if n.startswith("llama-8b-sft-")]
        assert stuck and all(o["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] in
                             ("ErrImagePull", "ImagePullBackOff") for o in stuck)
        backoff = [o for (k, n), o in first.items() if k == "Event" and o["reason"] == "BackOff"
                   and o["involvedObject"]["name"].startswith("llama-8b-sft-")]
        assert backoff and all(o["count"] > 1 and parse_rfc3339(o["firstTimestamp"]) < capture for o in backoff)
    elif check == "oom":
        (o,) = [o for n, o in pods.items() if n.startswith("moe-expert-ft-1-")]
        cs = o["status"]["containerStatuses"][0]
        assert cs["lastState"]["terminated"]["reason"] == "OOMKilled" and cs["restartCount"] >= 1
        assert parse_rfc3339(cs["lastState"]["terminated"]["finishedAt"]) < capture
    elif check == "lost":
        f = next(f for f in t["faults"] if f["kind"] == "node_lost")
        node = first[("Node", f["node"])]
        assert cond(node, "Ready")["status"] == "Unknown"
        assert all(parse_rfc3339(x["timeAdded"]) < capture for x in node["spec"]["taints"] if "timeAdded" in x)
        gone = [o for n, o in pods.items() if o["spec"].get("nodeName") == f["node"]]
        assert gone and all(cond(o, "DisruptionTarget")["reason"] == "DeletionByTaintManager" for o in gone)
    elif check == "slow_pull":
        pulling = [o for n, o in pods.items() if n.startswith("vit-huge-ft-")]
        assert pulling and all(o["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] ==
                               "ContainerCreating" for o in pulling)
        assert {j["root_cause"] for j in t["jobs"]} == {"healthy"}
    else:
        tps = tokens(g.directory, "olmo-7b-pretrain-")
        cap_ms = capture.timestamp() * 1000
        assert tps[0][0] >= cap_ms and tps[0][1] < 1000  # the first samples gangscope sees are a pause
        assert max(v for _, v in tps[:5]) > 40_000  # ... which ends


def test_disruption_reasons_are_the_upstream_ones() -> None:
    from tests.simulate.test_simulator import DISRUPTIONS

    upstream = {(r["reason"], r.get("example", r.get("message"))) for r in ref("pod_disruptiontarget-reasons.yaml")[0]}
    assert upstream >= DISRUPTIONS
