"""Simulator 1.37 variants (issue 19): the same jobs and faults as Kubernetes 1.37 + Kueue v0.19 show them — native
v1beta1 objects each also served as v1alpha3, created by the Job controller (owned by the Job, hashed names, `basic`
for Jobs without a gang), a CompositePodGroup over a JobSet's PodGroup, PodGroupInitiallyScheduled, Kueue's gate
off (`Pending`) or on, HA follower metrics; delegated child Jobs (1.37) and 1.35 v1alpha1 Workloads with replica
keys — and the classifier gives every job its true class on them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from collectors.simulate import generate
from collectors.simulate.scenarios import safe_hash


def _events(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "k8s.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def gen137(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate("healthy@k8s-1.37", tmp_path_factory.mktemp("v137"), seed=2, nodes=16).directory


def test_native_objects_have_137_shapes(gen137: Path) -> None:
    evs = _events(gen137)
    native = [e["object"] for e in evs if e["object"]["apiVersion"].startswith("scheduling.k8s.io/")]
    versions = Counter((o["kind"], o["apiVersion"].split("/")[1]) for o in native)
    assert not any(v in ("v1alpha1", "v1alpha2") for _, v in versions)
    # One stored object, two views: every v1beta1 Workload / PodGroup event has its v1alpha3 twin (same uid).
    for kind in ("Workload", "PodGroup"):
        assert versions[(kind, "v1beta1")] == versions[(kind, "v1alpha3")] > 0
    assert versions[("CompositePodGroup", "v1alpha3")] > 0 and ("CompositePodGroup", "v1beta1") not in versions
    pgs = {o["metadata"]["name"]: o for o in native if o["kind"] == "PodGroup"}
    wls = {o["metadata"]["name"]: o for o in native if o["kind"] == "Workload"}
    job_owned = [g for g in pgs.values() if g["metadata"]["ownerReferences"][0]["kind"] == "Job"
                 and "parentCompositePodGroupName" not in g["spec"]]
    assert job_owned
    for g in job_owned:
        ref = g["spec"]["workloadRef"]
        wl = wls[ref["workloadName"]]
        job = wl["spec"]["controllerRef"]["name"]
        assert ref["templateName"] == f"{job}-pgt-0" and not g["metadata"].get("labels")
        assert g["metadata"]["name"] == f"{wl['metadata']['name']}-{job}-pgt-0-" \
            f"{safe_hash(wl['metadata']['name'] + '/' + job + '-pgt-0')}"
        assert wl["metadata"]["ownerReferences"][0] == {**wl["metadata"]["ownerReferences"][0], "kind": "Job",
                                                        "name": job, "controller": True}
    assert {next(iter(g["spec"]["schedulingPolicy"])) for g in pgs.values()} == {"gang"}  # native gangs only here
    conds = {c["type"] for g in pgs.values() for c in g.get("status", {}).get("conditions", [])}
    assert conds == {"PodGroupInitiallyScheduled"}
    pods = [e["object"] for e in evs if e["object"]["kind"] == "Pod"]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods if "schedulingGroup" in p["spec"]} <= set(pgs)


def test_135_workloads_with_replica_keys(tmp_path: Path) -> None:
    """1.35 (reference k8s-1.35_workload-v1alpha1_two-podgroups_replica-keys.yaml): v1alpha1 Workloads with a basic
    driver group and a workers gang group, no PodGroup objects, pods joining through spec.workloadRef with a
    podGroupReplicaKey; a JobSet runs two replicas, each its own gang of minCount pods."""
    d = generate("healthy@k8s-1.35", tmp_path, seed=1, nodes=16).directory
    objs = [e["object"] for e in _events(d)]
    native = [o for o in objs if o["apiVersion"].startswith("scheduling.k8s.io/")]
    assert {(o["kind"], o["apiVersion"]) for o in native} == {("Workload", "scheduling.k8s.io/v1alpha1")}
    wls = {o["metadata"]["name"]: o for o in native}
    js = wls["healthy-train-3"]["spec"]
    assert js["controllerRef"] == {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "healthy-train-3"}
    assert js["podGroups"] == [{"name": "driver", "policy": {"basic": {}}},
                               {"name": "workers", "policy": {"gang": {"minCount": 1}}}]
    pods = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "Pod"}
    refs = {n: p["workloadRef"] for n, p in pods.items() if "workloadRef" in p}
    assert not [p for p in pods.values() if "schedulingGroup" in p]
    assert {r["name"] for r in refs.values()} == set(wls)
    keys = {r["podGroupReplicaKey"] for n, r in refs.items() if r["name"] == "healthy-train-3"}
    assert keys == {"0", "1"}
    assert {r["podGroupReplicaKey"] for r in refs.values() if r["name"] == "healthy-train-4"} == {"0"}  # a Job: one


def test_delegated_child_jobs(tmp_path: Path) -> None:
    """1.37 delegated child Job (reference k8s-1.37_job-spec-scheduling_workload-podgroup-pods.yaml, "Variant,
    delegated child Job"): the JobSet owns the Workload; its child Job, annotated with the Workload's template, gets
    only a PodGroup owned by the child Job, with no ownerReference to the Workload, pointing at the JobSet's."""
    d = generate("gang_assembly@k8s-1.37-delegated", tmp_path, seed=1, nodes=16).directory
    objs = [e["object"] for e in _events(d)]
    beta = [o for o in objs if o["apiVersion"] == "scheduling.k8s.io/v1beta1"]
    wls = {o["metadata"]["name"]: o for o in beta if o["kind"] == "Workload"}
    pgs = list({o["metadata"]["uid"]: o for o in beta if o["kind"] == "PodGroup"}.values())  # last state each
    assert not [o for o in objs if o["kind"] == "CompositePodGroup"]
    children = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Job"
                and "scheduling.k8s.io/group-template-name" in o["metadata"].get("annotations", {})}
    parents = {wl["spec"]["controllerRef"]["name"] for wl in wls.values()}
    assert {"cosched-tainted", "volcano-selector"} <= parents  # the unschedulable gangs, now delegated
    assert pgs and len(pgs) == len(wls)
    for g in pgs:
        owners = g["metadata"]["ownerReferences"]
        assert [o["kind"] for o in owners] == ["Job"]  # the child Job only, no ref to the parent's Workload
        child = children[owners[0]["name"]]
        assert child["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
        wl = wls[g["spec"]["workloadRef"]["workloadName"]]
        assert wl["spec"]["controllerRef"] == {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet",
                                               "name": child["metadata"]["ownerReferences"][0]["name"]}
        template = child["metadata"]["annotations"]["scheduling.k8s.io/group-template-name"]
        assert g["spec"]["workloadRef"]["templateName"] == template
        assert [t["name"] for t in wl["spec"]["podGroupTemplates"]] == [template]


def test_jobs_outside_kueue_get_basic_objects(tmp_path: Path) -> None:
    """1.37: every root Job the Job controller sees new gets a Workload and PodGroup, `basic` without a gang; Kueue's
    Jobs start suspended and get none."""
    d = generate("preemption@k8s-1.37", tmp_path, seed=1, nodes=16).directory
    objs = [e["object"] for e in _events(d)]
    basic = {o["spec"]["workloadRef"]["workloadName"].rsplit("-", 1)[0] for o in objs if o["kind"] == "PodGroup"
             and o["apiVersion"] == "scheduling.k8s.io/v1beta1" and "basic" in o["spec"]["schedulingPolicy"]}
    assert basic == {"embed-batch", "critical-infer"}
    kueue_jobs = {o["metadata"]["ownerReferences"][0]["name"] for o in objs
                  if o["kind"] == "Workload" and o["apiVersion"].startswith("kueue")}
    native_owners = {o["metadata"]["ownerReferences"][0]["name"] for o in objs
                     if o["kind"] == "Workload" and o["apiVersion"].startswith("scheduling.k8s.io")}
    assert kueue_jobs and not kueue_jobs & native_owners


def test_kueue_gate_off_and_ha_metrics(tmp_path: Path) -> None:
    off = generate("admission_quota@k8s-1.37", tmp_path, seed=1, nodes=16).directory
    on = generate("admission_quota@k8s-1.37-gate-on", tmp_path, seed=1, nodes=16).directory

    def reasons(d: Path) -> set[str]:
        return {c["reason"] for e in _events(d) if e["object"]["kind"] == "Workload"
                and e["object"]["apiVersion"].startswith("kueue")
                for c in e["object"].get("status", {}).get("conditions", [])
                if c["type"] == "QuotaReserved" and c["status"] == "False"}

    assert reasons(off) == {"Pending"}
    assert "WaitingForQuota" in reasons(on)
    # HA: the follower's copy of the queue-depth gauge, only that gauge (it holds no other state).
    prom = (off / "metrics.prom").read_text()
    followers = {line.split("{")[0] for line in prom.splitlines() if 'replica_role="follower"' in line}
    assert followers == {"kueue_pending_workloads"}
    assert 'kueue_pending_workloads{cluster_queue="team-b-cq",status="active",replica_role="follower"' in prom


@pytest.mark.parametrize("variant", ["gang_assembly@k8s-1.37", "preemption@k8s-1.37",
                                     "admission_quota@k8s-1.37-gate-on", "healthy@k8s-1.37",
                                     "gang_assembly@k8s-1.37-delegated", "interconnect_degradation@k8s-1.35"])
def test_classes_hold_on_137_variants(tmp_path: Path, variant: str) -> None:
    """Every job's primary class equals the truth, as in the 1.36 scenarios (`gangscope evaluate` scores the rest)."""
    from gangscope import config
    from gangscope.app.evaluate import land_files, phantoms, score
    from pipeline import lake, models
    from reports import diagnose

    g = generate(variant, tmp_path, seed=1, nodes=16)
    settings = config.load(overrides={"data": str(tmp_path / "data")}, environ={})
    land_files(settings, [str(g.directory / "k8s.jsonl")], [str(g.directory / "metrics.prom")])
    con = lake.connect(settings)
    try:
        models.build(settings, con)
        rows = diagnose.findings(con, include_healthy=True)
        dup = con.execute("SELECT count(*) - count(DISTINCT uid) FROM staging.stg_native_groups").fetchone()[0]
    finally:
        con.close()
    assert dup == 0
    truth = json.loads((g.directory / "truth.json").read_text())
    assert phantoms(truth, rows) == []  # no phantom job (e.g. one named after a Job-owned PodGroup)
    res = score(truth, rows)
    wrong = [(job, t, p) for job, t, p, _ in res if t != p]
    assert wrong == []
    assert not [job for job, t, _, crit in res if t == "healthy" and crit]
