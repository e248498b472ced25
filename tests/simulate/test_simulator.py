"""The simulator: objects in their real shapes, replay-format metrics, determinism, truth, physics."""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from collectors.simulate import generate
from collectors.simulate.scenarios import SCENARIOS
from gangscope.app.cli import main
from gangscope.records import WATCH_TYPES, parse_rfc3339
from gangscope.rootcauses import ROOT_CAUSES as CLASSES

# Every DisruptionTarget (reason, message) the simulator writes:
# tests/fixtures/reference/field/pod_disruptiontarget-reasons.yaml
DISRUPTIONS = {("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod"),
               ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"),
               ("EvictionByEvictionAPI", "Eviction API: evicting")}
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+) (\d{13})$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("sim")
    # 60 s scrapes keep the suite fast; nothing but the volume depends on the interval.
    return {n: generate(n, out, seed=7, nodes=20 if n == "mixed" else 16, hours=1.0, interval=60.0).directory
            for n in SCENARIOS}


def events(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "k8s.jsonl").read_text().splitlines()]


def samples(d: Path, metric_prefix: str = "") -> list[tuple[str, dict[str, str], float, int]]:
    out = []
    with (d / "metrics.prom").open() as f:
        for line in f:
            if line.startswith("#") or not line.startswith(metric_prefix):
                continue
            m = SAMPLE.match(line.rstrip("\n"))
            assert m, line
            out.append((m.group(1), dict(LABEL.findall(m.group(2))), float(m.group(3)), int(m.group(4))))
    return out


def decode_assignment(ta: dict) -> list[tuple[list[str], int]]:
    """Decode a topologyAssignment exactly as Kueue's codec does (v1beta1 domains or v1beta2 slices)."""
    if "domains" in ta:
        return [(d["values"], d["count"]) for d in ta["domains"]]
    out = []
    for s in ta["slices"]:
        assert len(s["valuesPerLevel"]) == len(ta["levels"])
        for i in range(s["domainCount"]):
            vals = []
            for lv in s["valuesPerLevel"]:
                if "universal" in lv:
                    vals.append(lv["universal"])
                else:
                    ind = lv["individual"]
                    assert len(ind["roots"]) == s["domainCount"]
                    vals.append(ind.get("prefix", "") + str(ind["roots"][i]) + ind.get("suffix", ""))
            pc = s["podCounts"]
            out.append((vals, pc["universal"] if "universal" in pc else pc["individual"][i]))
    return out


def test_decoder_reads_the_reference_assignments(reference: Path) -> None:
    ta = json.loads((reference / "kueue/workload-status-topologyassignment.v1beta2.json").read_text())
    assert decode_assignment(ta) == [(["kind-worker"], 7), (["kind-worker2"], 3)]
    v1 = list(yaml.safe_load_all((reference / "kueue/workload-topologyassignment-examples.v1beta1.yaml").read_text()))
    assert decode_assignment(v1[0]["topologyAssignment"]) == [(["block-1", "rack-1"], 4), (["block-1", "rack-2"], 2)]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_watch_stream_objects_have_their_real_shapes(sims: dict[str, Path], name: str, reference: Path) -> None:
    evs = events(sims[name])
    nodes = {e["object"]["metadata"]["name"] for e in evs if e["object"]["kind"] == "Node"}
    assert len(nodes) == (20 if name == "mixed" else 16)
    last_rv, last_t = 0, None
    kinds = set()
    decoded_v1beta1 = decoded_v1beta2 = 0
    for e in evs:
        assert e["type"] in WATCH_TYPES
        obj, md = e["object"], e["object"]["metadata"]
        kinds.add((obj["apiVersion"], obj["kind"]))
        assert md["name"] and md["uid"] and md["creationTimestamp"]
        rv = int(md["resourceVersion"])
        assert rv > last_rv  # resourceVersion rises through the stream
        last_rv = rv
        t = parse_rfc3339(e["observedAt"])
        assert last_t is None or t >= last_t
        last_t = t
        kind = obj["kind"]
        if kind == "Node":
            labels = md["labels"]
            for key in ("cloud.provider.com/topology-block", "cloud.provider.com/topology-rack",
                        "kubernetes.io/hostname"):
                assert labels[key]
            assert obj["status"]["capacity"]["nvidia.com/gpu"] == "8"
            assert {a["type"] for a in obj["status"]["addresses"]} == {"InternalIP", "Hostname"}
            kubelet = [c["type"] for c in obj["status"]["conditions"]][:4]
            assert kubelet == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
            assert all(t.get("timeAdded") for t in obj["spec"]["taints"] if t["key"].startswith("node.kubernetes"))
        elif kind == "Workload" and obj["apiVersion"].startswith("kueue.x-k8s.io/"):
            ps = obj["spec"]["podSets"][0]
            assert ps["count"] >= 1 and ps["template"]["spec"]["containers"]
            assert md["ownerReferences"][0]["controller"] is True
            for c in obj.get("status", {}).get("conditions", []):
                assert c["type"] in ("QuotaReserved", "Admitted", "PodsReady", "Evicted", "Preempted", "Requeued",
                                     "Finished")
                if c["type"] == "Evicted" and c["status"] == "True":
                    assert c["reason"] in ("Preempted", "PodsReadyTimeout", "NodeFailures")
                assert c["status"] in ("True", "False") and c["reason"] and c["lastTransitionTime"]
            for psa in obj.get("status", {}).get("admission", {}).get("podSetAssignments", []):
                ta = psa.get("topologyAssignment")
                if ta is None:
                    continue
                is_v1 = obj["apiVersion"].endswith("v1beta1")
                assert ("domains" in ta) == is_v1 and ("slices" in ta) != is_v1
                dom = decode_assignment(ta)
                assert sum(c for _, c in dom) == psa["count"]
                assert {v[-1] for v, _ in dom} <= nodes
                decoded_v1beta1 += is_v1
                decoded_v1beta2 += not is_v1
        elif kind == "PodGroup":
            spec = obj["spec"]
            if obj["apiVersion"] == "scheduling.x-k8s.io/v1alpha1":
                assert spec["minMember"] >= 1 and spec["scheduleTimeoutSeconds"] > 0
                assert obj["status"]["phase"] in ("Pending", "Scheduling", "Running", "Finished", "Failed")
            elif obj["apiVersion"] == "scheduling.volcano.sh/v1beta1":
                assert spec["minMember"] >= 1 and spec["queue"]
                assert obj["status"]["phase"] in ("Pending", "Inqueue", "Running", "Completed", "Unknown")
            else:
                assert obj["apiVersion"] == "scheduling.k8s.io/v1alpha2"
                assert spec["schedulingPolicy"]["gang"]["minCount"] >= 1
                assert spec["podGroupTemplateRef"]["workload"]["workloadName"]
        elif kind == "Pod":
            own = md["ownerReferences"][0]
            assert own["controller"] is True and own["kind"] == "Job"
            for cs in obj["status"].get("containerStatuses", []):
                assert len(cs["state"]) == 1 and next(iter(cs["state"])) in ("waiting", "running", "terminated")
                if "terminated" in cs["state"]:
                    assert cs["state"]["terminated"]["reason"] in ("Completed", "Error", "OOMKilled")
                    assert (cs["state"]["terminated"]["exitCode"] == 0) == (cs["state"]["terminated"]["reason"]
                                                                             == "Completed")
            for c in obj["status"].get("conditions", []):
                if c["type"] == "DisruptionTarget":
                    assert (c["reason"], c["message"]) in DISRUPTIONS
            if obj["status"]["phase"] == "Running":
                assert obj["spec"]["nodeName"] in nodes
                assert not obj["spec"].get("schedulingGates")
            if "kueue.x-k8s.io/podset" in md.get("labels", {}):
                assert md["annotations"]["kueue.x-k8s.io/workload"]
        elif kind == "Event":
            assert obj["involvedObject"]["kind"] and obj["reason"] and obj["message"]
            if obj["reason"] == "FailedScheduling":
                assert re.match(r"^0/\d+ nodes are available: |^rejected due to timeout after waiting ",
                                obj["message"])
    assert ("kueue.x-k8s.io/v1beta2", "Topology") in kinds and ("kueue.x-k8s.io/v1beta2", "ClusterQueue") in kinds
    if name in ("mixed", "gpu_fault", "healthy"):
        assert decoded_v1beta2 and (decoded_v1beta1 or name == "mixed")


def test_setup_objects_match_the_reference_layout(sims: dict[str, Path], reference: Path) -> None:
    ref = {d["kind"]: d for d in yaml.safe_load_all(
        (reference / "kueue/topology-resourceflavor-gpu-clusterqueue-localqueue.v1beta2.yaml").read_text())}
    ours = {e["object"]["kind"]: e["object"] for e in events(sims["mixed"])
            if e["object"]["kind"] in ref}
    for kind, r in ref.items():
        assert ours[kind]["apiVersion"] == r["apiVersion"]
        assert set(r["spec"]) <= set(ours[kind]["spec"]), kind
    assert ours["Topology"]["spec"]["levels"] == ref["Topology"]["spec"]["levels"]
    cq_res = ours["ClusterQueue"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {x["name"] for x in cq_res} == {"cpu", "memory", "nvidia.com/gpu"}


@pytest.mark.parametrize("name", ["mixed", "healthy", "gpu_throttle", "training_stalled"])
def test_metrics_are_replay_format(sims: dict[str, Path], name: str) -> None:
    lines = (sims[name] / "metrics.prom").read_text().splitlines()
    last_ts = 0
    seen_groups: set[tuple[str, str, int]] = set()
    current = None
    for line in lines:
        if line.startswith("#"):
            assert re.match(r"^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (gauge|counter|histogram)$", line), line
            continue
        m = SAMPLE.match(line)
        assert m, line  # every sample carries a millisecond timestamp
        labels = dict(LABEL.findall(m.group(2)))
        ts = int(m.group(4))
        assert ts >= last_ts
        last_ts = ts
        group = (labels["job"], labels["instance"], ts)
        if group != current:
            assert group not in seen_groups  # one scrape's samples are written together
            seen_groups.add(group)
            current = group
    # a slice of the file, cut at a TYPE line, parses with the Prometheus text parser
    cut = next(i for i in range(len(lines) // 2, len(lines)) if lines[i].startswith("# TYPE"))
    chunk = "\n".join(lines[cut:cut + 3000])
    chunk = chunk[: chunk.rfind("\n# TYPE")] + "\n"
    fams = list(text_string_to_metric_families(chunk))
    parsed = [s for f in fams for s in f.samples]
    assert len(parsed) > 1000 and all(s.timestamp is not None for s in parsed)
    names = {f.name for f in fams}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_SM_CLOCK", "node_infiniband_state_id"} \
        <= names


def test_dcgm_labels_and_pod_attribution(sims: dict[str, Path]) -> None:
    util = samples(sims["mixed"], "DCGM_FI_DEV_GPU_UTIL")
    for _, lab, _, _ in util[:500]:
        assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "job", "instance"} <= set(lab)
    held = [lab for _, lab, v, _ in util if "pod" in lab]
    assert held and all({"namespace", "container"} <= set(lab) for lab in held)
    idle = [lab for _, lab, _, _ in util if "pod" not in lab]
    assert idle  # idle GPUs carry no pod labels
    tput = samples(sims["mixed"], "train_tokens_per_second")
    assert tput and all({"pod", "namespace", "job", "instance"} <= set(lab) for _, lab, _, _ in tput)


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a = generate("preemption", tmp_path / "a", seed=3, nodes=16, hours=1.0, interval=60.0).directory
    b = generate("preemption", tmp_path / "b", seed=3, nodes=16, hours=1.0, interval=60.0).directory
    c = generate("preemption", tmp_path / "c", seed=4, nodes=16, hours=1.0, interval=60.0).directory
    for f in ("k8s.jsonl", "metrics.prom", "truth.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert (a / "metrics.prom").read_bytes() != (c / "metrics.prom").read_bytes()
    assert (a / "k8s.jsonl").read_bytes() != (c / "k8s.jsonl").read_bytes()


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n in CLASSES and n != "healthy"])
def test_truth_names_the_injected_class(sims: dict[str, Path], name: str) -> None:
    truth = json.loads((sims[name] / "truth.json").read_text())
    assert truth["scenario"] == name and truth["seed"] == 7 and truth["nodes"] == 16
    hit = [j for j in truth["jobs"] if j["root_cause"] == name]
    assert hit, name
    for j in hit:
        assert j["onset"] and truth["start"] <= j["onset"] <= truth["end"]
        assert bool(j["workload"]) == (j["kueue"] or j["gang"] == "native")
        assert bool(j["pod_group"]) == (j["gang"] != "none")
    assert any(j["root_cause"] == "healthy" for j in truth["jobs"])
    # every job of the truth file exists in the watch stream
    owners = {(e["object"]["metadata"].get("namespace"), e["object"]["metadata"]["name"])
              for e in events(sims[name]) if e["object"]["kind"] in ("Job", "JobSet")}
    assert {(j["namespace"], j["job"]) for j in truth["jobs"]} <= owners


def test_mixed_truth_covers_every_class(sims: dict[str, Path]) -> None:
    truth = json.loads((sims["mixed"] / "truth.json").read_text())
    classes = {j["root_cause"] for j in truth["jobs"]}
    assert classes == set(CLASSES)  # the demo shows every class, healthy included
    for j in truth["jobs"]:
        assert j["root_cause"] in CLASSES


def test_gpu_fault_xid_and_disappearing_gpu(sims: dict[str, Path]) -> None:
    d = sims["gpu_fault"]
    truth = json.loads((d / "truth.json").read_text())
    f79 = next(f for f in truth["faults"] if f.get("xid") == 79)
    lost = next(f for f in truth["faults"] if f["kind"] == "gpu_lost")
    assert f79["job"] and lost["uuid"] == f79["uuid"]
    onset_ms = int(parse_rfc3339(lost["onset"]).timestamp() * 1000)
    util = samples(d, "DCGM_FI_DEV_GPU_UTIL")
    node = [(lab["UUID"], ts) for _, lab, _, ts in util if lab["Hostname"] == f79["node"]]
    assert any(u == f79["uuid"] and ts < onset_ms for u, ts in node)
    assert not any(u == f79["uuid"] and ts > onset_ms for u, ts in node)  # its series stop...
    assert any(u != f79["uuid"] and ts > onset_ms for u, ts in node)  # ...while the node's others go on
    xid = samples(d, "DCGM_FI_DEV_XID_ERRORS")
    codes = {(lab["UUID"], lab["err_code"], v) for _, lab, v, _ in xid}
    assert (f79["uuid"], "79", 79.0) in codes
    assert any(code == "48" for _, code, _ in codes)
    dbe = [v for _, lab, v, _ in samples(d, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") if v > 0]
    assert dbe and max(dbe) == 1


def test_traps_silent_exporter_missing_nvlink_app_xids(sims: dict[str, Path]) -> None:
    d = sims["healthy"]
    truth = json.loads((d / "truth.json").read_text())
    assert all(j["root_cause"] == "healthy" for j in truth["jobs"])
    traps = {f["kind"]: f for f in truth["faults"]}
    assert all(f["trap"] for f in truth["faults"])
    silent = traps["exporter_silent"]
    onset_ms = int(parse_rfc3339(silent["onset"]).timestamp() * 1000)
    dcgm = [(lab["Hostname"], ts) for _, lab, _, ts in samples(d, "DCGM_FI_DEV_GPU_UTIL")]
    assert any(h == silent["node"] and ts < onset_ms for h, ts in dcgm)
    assert not any(h == silent["node"] and ts > onset_ms for h, ts in dcgm)
    nvl_hosts = {lab["Hostname"] for _, lab, _, _ in samples(d, "DCGM_FI_DEV_NVLINK")}
    assert traps["nvlink_missing"]["node"] not in nvl_hosts and len(nvl_hosts) == 15
    app_xids = {lab["err_code"] for _, lab, _, _ in samples(d, "DCGM_FI_DEV_XID_ERRORS")}
    assert app_xids == {"13", "31", "43", "45"}


def _tput_by_pod(d: Path) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for _, lab, v, ts in samples(d, "train_tokens_per_second"):
        out[lab["pod"]].append((ts, v))
    return out


def test_misplaced_gang_is_slower_than_its_compact_run(sims: dict[str, Path]) -> None:
    d = sims["topology_misplacement"]
    truth = json.loads((d / "truth.json").read_text())
    runs = [j for j in truth["jobs"] if j["job"] == "gpt-13b-pretrain"]
    compact, spread = runs
    ev = events(d)
    racks = {e["object"]["metadata"]["name"]: e["object"]["metadata"]["labels"]["cloud.provider.com/topology-rack"]
             for e in ev if e["object"]["kind"] == "Node"}
    assert len({racks[n] for n in compact["nodes"]}) == 1 < len({racks[n] for n in spread["nodes"]})
    rank0 = {e["object"]["metadata"]["uid"]: e["object"]["metadata"]["name"] for e in ev
             if e["object"]["kind"] == "Pod" and e["object"]["metadata"]["labels"].get(
                 "batch.kubernetes.io/job-completion-index") == "0"
             and e["object"]["metadata"]["name"].startswith("gpt-13b-pretrain")}
    tput = _tput_by_pod(d)
    meds = sorted((statistics.median(v for _, v in tput[p]), p) for p in rank0.values() if p in tput)
    assert len(meds) == 2
    assert meds[0][0] < 0.8 * meds[1][0]


def test_degraded_link_slows_the_job_and_drops_bandwidth(sims: dict[str, Path]) -> None:
    d = sims["interconnect_degradation"]
    truth = json.loads((d / "truth.json").read_text())
    nv = next(f for f in truth["faults"] if f["kind"] == "nvlink_degraded")
    onset_ms = int(parse_rfc3339(nv["onset"]).timestamp() * 1000)
    bw = [(ts, v) for _, lab, v, ts in samples(d, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")
          if lab["Hostname"] == nv["node"]]
    before = statistics.median(v for ts, v in bw if onset_ms - 15 * 60_000 < ts < onset_ms)
    after = statistics.median(v for ts, v in bw if ts > onset_ms)
    assert after < 0.6 * before
    crc = [v for _, lab, v, ts in samples(d, "DCGM_FI_DEV_NVLINK_CRC_FLIT") if lab["Hostname"] == nv["node"]]
    assert crc[-1] > crc[0]
    ib = next(f for f in truth["faults"] if f["kind"] == "ib_flap")
    states = {v for _, lab, v, _ in samples(d, "node_infiniband_state_id") if lab["instance"].startswith("10.")
              and lab["device"] == ib["ib_device"]}
    assert 1.0 in states and 4.0 in states
    job = next(j for j in truth["jobs"] if j["job"] == "llama-70b-sft")
    assert job["root_cause"] == "interconnect_degradation" and nv["node"] in job["nodes"]
    series = next(v for p, v in _tput_by_pod(d).items() if p.startswith("llama-70b-sft-0-"))
    tp_before = statistics.median(v for ts, v in series if ts < onset_ms)
    tp_after = statistics.median(v for ts, v in series if ts > onset_ms)
    assert tp_after < 0.8 * tp_before  # a degraded link slows the job that uses it


def test_preemption_by_kueue_and_by_the_scheduler(sims: dict[str, Path]) -> None:
    evs = events(sims["preemption"])
    evicted = [c for e in evs if e["object"]["kind"] == "Workload"
               for c in e["object"].get("status", {}).get("conditions", [])
               if c["type"] == "Evicted" and c["status"] == "True"]
    assert evicted and evicted[0]["reason"] == "Preempted"
    assert evicted[0]["message"].startswith("Preempted to accommodate a workload (UID: ")
    disrupted = [c for e in evs if e["object"]["kind"] == "Pod" for c in e["object"]["status"].get("conditions", [])
                 if c["type"] == "DisruptionTarget"]
    assert disrupted and disrupted[0]["reason"] == "PreemptionByScheduler"
    truth = json.loads((sims["preemption"] / "truth.json").read_text())
    assert {j["job"] for j in truth["jobs"] if j["root_cause"] == "preemption"} == {"rl-sweep", "embed-batch"}
    # the preempted Kueue job runs again after re-admission: its second run reports throughput
    pods = {p for p in _tput_by_pod(sims["preemption"]) if p.startswith("rl-sweep-0-")}
    assert len(pods) == 2


def test_pending_reasons_use_kueue_templates(sims: dict[str, Path]) -> None:
    msgs = {}
    for e in events(sims["admission_quota"]) + events(sims["admission_topology"]):
        o = e["object"]
        if o["kind"] == "Workload":
            for c in o.get("status", {}).get("conditions", []):
                if c["type"] == "QuotaReserved" and c["status"] == "False":
                    msgs[c["reason"]] = c["message"]
    assert re.search(r"insufficient unused quota for nvidia.com/gpu in flavor tas-flavor, \d+ more needed",
                     msgs["WaitingForQuota"])
    assert re.search(r'topology "default" allows to fit only \d+ out of \d+ pod\(s\)', msgs["TopologyPlacementFailed"])
    assert "Pending" in msgs


def test_cli_list_and_unknown_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    assert "mixed" in capsys.readouterr().out
    assert main(["simulate", "--scenario", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown scenario" in capsys.readouterr().err
    assert main(["simulate", "--scenario", "unexplained_slowdown", "--out", str(tmp_path), "--interval", "60"]) == 0
    assert (tmp_path / "unexplained_slowdown" / "truth.json").is_file()


def test_core_objects_deserialize_with_the_kubernetes_client(sims: dict[str, Path]) -> None:
    """Pods, Nodes, Events and Jobs go through the official client's models (required fields enforced)."""
    from kubernetes.client import ApiClient

    client = ApiClient()
    model = {"Pod": "V1Pod", "Node": "V1Node", "Event": "CoreV1Event", "Job": "V1Job"}
    seen: dict[str, int] = defaultdict(int)
    for e in events(sims["mixed"]) + events(sims["preemption"]):
        obj = e["object"]
        if obj["kind"] not in model:
            continue
        typed = client._ApiClient__deserialize(obj, model[obj["kind"]])
        assert typed.metadata.name == obj["metadata"]["name"]
        if obj["kind"] == "Pod":
            assert typed.metadata.owner_references[0].controller
            if obj["status"]["phase"] == "Running":
                state = typed.status.container_statuses[0].state  # a crash loop's pod stays Running
                assert typed.spec.node_name and (state.running or state.waiting.reason == "CrashLoopBackOff")
        seen[obj["kind"]] += 1
    assert set(seen) == set(model)
