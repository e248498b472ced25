"""Next steps name the right object, checked against the simulator's truth for every root-cause class.

The chain is the real one (simulate -> embedded broker -> pipeline -> models -> diagnose); the expected
objects (ClusterQueue, node, GPU UUID, pod, link, preemptor) come from ``truth.json``, never from the
findings themselves.
"""

from __future__ import annotations

import json

import pytest

from gangscope.rootcauses import FAULTS
from pipeline import lake
from reports import diagnose, nextsteps

CLASSES = FAULTS


def _findings(sim_lakes, scenario: str) -> tuple[dict[tuple[str, str, str], dict], dict]:
    settings, truth = sim_lakes(scenario)
    con = lake.connect(settings)
    try:
        rows = diagnose.findings(con, include_healthy=True)
    finally:
        con.close()
    return {(r["namespace"], r["job"], r["root_cause"]): r for r in rows}, truth


def _text(finding: dict) -> str:
    """Everything a reader sees of the finding's next steps and evidence sentences."""
    steps = finding["next_steps"]
    return " ".join(finding["evidence_text"] + [s["action"] for s in steps] + [s["check"] for s in steps]
                    + [s["act"] or "" for s in steps])


def _truth_jobs(truth: dict, cause: str) -> list[dict]:
    jobs = [j for j in truth["jobs"] if j["root_cause"] == cause]
    assert jobs, f"the scenario injects no {cause}"
    return jobs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cause", CLASSES)
def test_next_step_names_the_right_object(sim_lakes, cause: str) -> None:
    found, truth = _findings(sim_lakes, "mixed")
    faults = [f for f in truth["faults"] if not f["trap"]]
    for j in _truth_jobs(truth, cause):
        f = found[(j["namespace"], j["job"], cause)]
        steps, text = f["next_steps"], _text(f)
        assert steps and all(s["check"].startswith("kubectl ") for s in steps), steps
        assert f["evidence_text"], f
        if cause == "gpu_fault":
            fault = next(x for x in faults if x["job"] == f"{j['namespace']}/{j['job']}" and x["kind"] == "xid")
            assert fault["uuid"] in text and f"GPU {fault['gpu']}" in text and f"XID {fault['xid']}" in text
            acts = [s["act"] for s in steps if s["act"]]
            assert f"kubectl cordon {fault['node']}" in acts[0] and f"kubectl drain {fault['node']}" in acts[0]
            # The XID's meaning from NVIDIA's catalogue, not a fixed sentence.
            assert nextsteps.xid_catalogue()[fault["xid"]].meaning in text
            others = {n for jj in truth["jobs"] for n in jj["nodes"]} - {fault["node"]}
            assert not any(f"kubectl cordon {n} " in (s["act"] or "") for s in steps for n in others)
        elif cause == "interconnect_degradation":
            fault = next(x for x in faults if x["job"] == f"{j['namespace']}/{j['job']}")
            assert steps[0]["act"] == f"kubectl cordon {fault['node']}"
            assert "its own baseline" in text and "GB/s" in text
            healthy = set(j["nodes"]) - {fault["node"]}
            assert not any(f"cordon {n}" in (s["act"] or "") for s in steps for n in healthy)
        elif cause == "preemption":
            ns, name = j["preemptor"].split("/")
            assert f"{ns}/{name}" in steps[0]["action"] and j["cluster_queue"] in text
            assert f["workload"] and f["workload"] in steps[0]["check"]
        elif cause == "admission_quota":
            assert f"ClusterQueue {j['cluster_queue']}" in steps[0]["action"]
            assert "nvidia.com/gpu" in steps[0]["action"] and "no cohort" in text
        elif cause == "admission_topology":
            assert j["topology"]["level"] in text and j["cluster_queue"] in text
            assert "largest free" in text and f"Each pod asks for {j['gpus_per_pod']} GPUs" in text
            # The simulator's nodes have 8 GPUs (docs/simulator.md): a bigger pod can never be placed.
            assert ("No node can ever hold one pod" in steps[0]["action"]) == (j["gpus_per_pod"] > 8)
        elif cause == "gang_assembly":
            assert j["unscheduled_pods"]
            assert all(p in text for p in j["unscheduled_pods"])
            assert j["unscheduled_pods"][0] in steps[0]["check"]
        elif cause == "topology_misplacement":
            assert all(n in steps[0]["check"] for n in j["nodes"])
            assert "kueue.x-k8s.io/podset-required-topology" in steps[0]["action"]
            assert j["topology"]["mode"] == "preferred" and "preferred" in steps[0]["action"]
        elif cause == "unexplained_slowdown":
            assert j["job"] in steps[0]["check"] and steps[0]["check"].startswith("kubectl logs")


@pytest.mark.timeout(300)
def test_infiniband_port_is_named(sim_lakes) -> None:
    found, truth = _findings(sim_lakes, "interconnect_degradation")
    fault = next(x for x in truth["faults"] if x["kind"] == "ib_flap")
    ns, job = fault["job"].split("/")
    f = found[(ns, job, "interconnect_degradation")]
    text = _text(f)
    assert fault["ib_device"] in text and fault["node"] in text
    step = next(s for s in f["next_steps"] if fault["node"] in s["action"])
    assert f"/sys/class/infiniband/{fault['ib_device']}/" in step["check"]


@pytest.mark.timeout(300)
def test_gang_blocked_by_taint_and_selector(sim_lakes) -> None:
    found, truth = _findings(sim_lakes, "gang_assembly")
    for j in _truth_jobs(truth, "gang_assembly"):
        f = found[(j["namespace"], j["job"], "gang_assembly")]
        action = f["next_steps"][0]["action"]
        assert any(p in _text(f) for p in j["unscheduled_pods"]), (j, f["next_steps"])
        if j["job"] == "cosched-tainted":
            assert "taint" in action
        elif j["job"] == "volcano-selector":
            assert "selector" in action
        else:
            # The simulator's partial start leaves one untainted node free although its FailedScheduling message says
            # every one is full: the next step names that node and still quotes the scheduler.
            assert "waits for GPUs" in action or ("has room for" in action and "Insufficient nvidia.com/gpu" in action)


def test_explain_tolerates_missing_evidence() -> None:
    for cause in CLASSES:
        for ev in ({}, {"throughput": None, "faults": "not json", "quota": {"short": None}}, "{oops"):
            out = nextsteps.explain({"namespace": "ns", "job": "j", "root_cause": cause, "evidence": ev})
            assert out.steps and out.steps[0].check.startswith("kubectl ")
    assert nextsteps.explain({"root_cause": "healthy", "evidence": {}}).steps == []


def test_missing_names_are_left_out_not_printed_as_none() -> None:
    """Evidence without a ClusterQueue or flavor (an older Kueue's message, a queue not seen yet) reads as prose: the
    page and the report once said "Free 8 nvidia.com/gpu in ClusterQueue None (flavor None)"."""
    partial = ({"wait_s": 900}, {"quota": {"resource": "nvidia.com/gpu", "short": 8}},
               {"quota": {"resource": "nvidia.com/gpu", "short": 8, "cohort": "c"}, "message": "maximum capacity"},
               {"quota": {"resource": "nvidia.com/gpu", "short": 8, "cohort": "c", "cohort_unused": 16}},
               {"missing_level": "rack"})
    for cause in ("admission_quota", "admission_topology"):
        for ev in partial:
            out = nextsteps.explain({"namespace": "ns", "job": "j", "root_cause": cause, "evidence": ev})
            text = " ".join(out.sentences + [s.action for s in out.steps])
            assert "None" not in text, (cause, ev, text)
    quota = nextsteps.explain({"namespace": "ns", "job": "j", "root_cause": "admission_quota",
                               "evidence": {"quota": {"resource": "nvidia.com/gpu", "short": 8}}})
    assert quota.steps[0].action.startswith("Free 8 nvidia.com/gpu in its ClusterQueue, raise its nominalQuota")


def test_commands_quote_cluster_names() -> None:
    evil = "x; rm -rf / #"
    f = {"namespace": evil, "job": evil, "job_kind": "Job", "workload": evil, "root_cause": "admission_quota",
         "nodes": [evil], "evidence": json.dumps({"cluster_queue": evil, "quota": {"resource": "nvidia.com/gpu",
                                                                                   "short": 8, "flavor": evil}})}
    for cause in CLASSES:
        for step in nextsteps.explain({**f, "root_cause": cause}).steps:
            for cmd in (step.check, step.act or ""):
                assert "; rm" not in cmd.replace(f"'{evil}'", "")


@pytest.mark.timeout(300)
def test_diagnose_table_has_one_next_line_per_finding(sim_lakes) -> None:
    found, truth = _findings(sim_lakes, "mixed")
    rows = [r for r in found.values() if r["root_cause"] != "healthy"]
    lines = diagnose.to_table(rows).splitlines()
    assert sum(line.startswith("  next: ") for line in lines) == len(rows)
    for row_line, next_line in zip(lines[1::2], lines[2::2], strict=True):
        assert not row_line.startswith(" ") and next_line.startswith("  next: ")
        if " gpu_fault " in row_line:
            node = next(f["node"] for f in truth["faults"] if f["kind"] == "xid" and not f["trap"])
            assert f"$ kubectl cordon {node} && kubectl drain {node} " in next_line
