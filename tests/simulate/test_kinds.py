"""Simulator variants of the jobs teams submit (issue 33): ``<scenario>@ray`` / ``@trainjob`` / ``@pytorchjob`` /
``@mpijob`` / ``@lws`` / ``@podgroup`` re-tell every job as that kind, with its controller's labels and owners, and
no Job / JobSet left standing for a job except the children the kind really makes (a TrainJob's JobSet and child
Job, an MPIJob's launcher Job); and one of them classified end to end (a RayCluster worker's node lost)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.simulate import cluster, scenarios, timeline
from collectors.simulate.kinds import KINDS, rekind
from collectors.simulate.variants import VARIANTS


def _objects(scenario: str, how: str) -> tuple[list[dict], list[scenarios.SimJob]]:
    scn = scenarios.build(scenario, cluster.build(16, random.Random("1:cluster")), 1, 3600.0)
    tl = timeline.build(scn, datetime(2026, 11, 1, tzinfo=UTC))
    return [obj for _, _, _, obj in rekind(tl.items, scn, how)], scn.jobs


def test_every_kind_has_a_variant_of_every_scenario() -> None:
    for how in KINDS:
        names = {n.split("@")[0] for n, v in VARIANTS.items() if v.kind == how}
        assert names == set(scenarios.SCENARIOS) - {"mixed"}


@pytest.mark.parametrize("how", list(KINDS))
def test_jobs_are_submitted_as_the_kind_with_its_links(how: str) -> None:
    kind = KINDS[how]
    objs, jobs = _objects("workload_crash", how)
    names = {(j.namespace, j.name) for j in jobs}
    assert {j.submitted_as for j in jobs} == {kind}
    tops = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == kind}
    if kind != "PodGroup":
        assert tops == names
    # no batch Job / JobSet stands for a job, only the children the kind makes, owned by it
    for o in objs:
        if o["kind"] in ("Job", "JobSet") and o["apiVersion"].startswith(("batch/", "jobset.x-k8s.io/")):
            owner = o["metadata"]["ownerReferences"][0]
            assert (how, o["kind"], owner["kind"]) in {("trainjob", "JobSet", "TrainJob"),
                                                       ("trainjob", "Job", "JobSet"), ("mpijob", "Job", "MPIJob")}, \
                o["metadata"]["name"]
    pods = [o for o in objs if o["kind"] == "Pod"]
    assert pods
    for p in pods:
        labels, owners = p["metadata"]["labels"], p["metadata"]["ownerReferences"]
        link = {"ray": labels.get("ray.io/cluster"), "trainjob": labels.get("jobset.sigs.k8s.io/jobset-name"),
                "pytorchjob": labels.get("training.kubeflow.org/job-name"),
                "mpijob": labels.get("training.kubeflow.org/job-name"),
                "lws": labels.get("leaderworkerset.sigs.k8s.io/name"),
                "podgroup": labels.get("kueue.x-k8s.io/pod-group-name")}[how]
        assert (p["metadata"]["namespace"], link) in names, p["metadata"]["name"]
        if how == "podgroup":
            assert owners == [] and p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"]
        elif how == "lws":
            assert [o["kind"] for o in owners] == ["StatefulSet"]
        else:
            assert owners and owners[0]["kind"] in (kind, "Job")
    for w in (o for o in objs if o["kind"] == "Workload" and o["apiVersion"].startswith("kueue")):
        assert {r["kind"] for r in w["metadata"]["ownerReferences"]} == {"Pod" if kind == "PodGroup" else kind}
        if kind == "PodGroup":  # Kueue names a group's Workload after the group
            assert (w["metadata"]["namespace"], w["metadata"]["name"]) in names


def test_ray_worker_node_lost_is_node_failure_end_to_end(tmp_path: Path) -> None:
    from gangscope.app.evaluate import run_scenario

    results, phantoms, _ = run_scenario("node_failure@ray", 1, 16, tmp_path)
    assert phantoms == []  # no job under another kind, no RayCluster child invented
    assert results and [(job, t, p) for job, t, p, _ in results if p != t] == []
    assert "node_failure" in {t for _, t, _, _ in results}
