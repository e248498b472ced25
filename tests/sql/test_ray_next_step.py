"""The next step of a Ray placement group stuck PENDING (issue 33, item 2): which worker group cannot scale, and why.

Two stories, each beside a healthy RayCluster of the same shape: a worker group whose new pod is Pending with
FailedScheduling (the autoscaler added it for the bundles; it cannot fit), and a worker group that already runs its
``maxReplicas`` (the autoscaler cannot add one). Each job has a second worker group that must not be named: one at
its own maximum next to the unschedulable pod, one with room to spare (sorted first) next to the group at its maximum.

Built as tests/sql/test_job_kinds.py builds its stories (shapes from tests/fixtures/jobkinds, sources in its README):
watched live (namespace ``field``) and first seen in an initial list at CAPTURE (namespace ``mol``). Real DuckLake,
real models.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from reports import diagnose, nextsteps
from tests.sql.fieldfix import NS, Story, bind, iso, run, setup
from tests.sql.lakefix import Raw, build_lake, failed_scheduling
from tests.sql.test_job_kinds import CAPTURE, END, NODES, _classes, _members, _renamespace

# job: (kind, worker groups as (group, minReplicas, maxReplicas, pods running, pods Pending unschedulable)).
GROUPS = {
    "rc-pg-unsched": ("RayCluster", [("cpu-group", 1, 1, 1, 0), ("gpu-group", 2, 4, 2, 1)]),
    "rj-pg-maxed": ("RayJob", [("cpu-group", 1, 3, 1, 0), ("gpu-group", 2, 2, 2, 0)]),
    # Healthy: the same group names, gpu-group at its maxReplicas, every placement group placed.
    "rc-pg-calm": ("RayCluster", [("cpu-group", 1, 1, 1, 0), ("gpu-group", 2, 2, 2, 0)]),
}
UNSCHED = f"0/{NODES} nodes are available: {NODES} Insufficient nvidia.com/gpu."
NEXT = {
    "rc-pg-unsched": "worker group gpu-group cannot scale: 1 pod(s) Pending with FailedScheduling "
    "(Insufficient nvidia.com/gpu)",
    "rj-pg-maxed": "worker group gpu-group is at maxReplicas (2 pods): raise maxReplicas or shrink the placement "
    "group's bundles",
}


def _story(s: Story, job: str, start_node: int) -> None:
    """A Ray job of GROUPS whose gang runs from 1.6; its placement group goes PENDING at 5 and stays, with no
    throughput (``rc-pg-calm``: 0 pending throughout)."""
    kind, groups = GROUPS[job]
    objs, pods = _members(kind, job)
    template = pods[-1]  # a worker of the sample's group
    sample = objs[0]["spec"].get("rayClusterSpec", objs[0]["spec"])["workerGroupSpecs"][0]
    specs = [
        {**sample, "groupName": g, "replicas": lo, "minReplicas": lo, "maxReplicas": hi} for g, lo, hi, _, _ in groups
    ]
    for o in objs:
        if o["kind"] == "RayCluster":
            o["spec"]["workerGroupSpecs"] = copy.deepcopy(specs)
        elif o["kind"] == "RayJob":
            o["spec"]["rayClusterSpec"]["workerGroupSpecs"] = copy.deepcopy(specs)
        s.add(1, o)
    cluster = template["metadata"]["labels"]["ray.io/cluster"]
    pods = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") != "worker"]
    head = next(p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head")["metadata"]["name"]
    unsched: list[dict[str, Any]] = []
    for g, _, _, running, pending in groups:
        for i in range(running + pending):
            w = copy.deepcopy(template)
            w["metadata"]["name"] = f"{cluster}-{g}-worker-{i}x7q"
            w["metadata"]["labels"]["ray.io/group"] = g
            (pods if i < running else unsched).append(w)
    for i, p in enumerate(pods):
        s.add(1.1, p)
        s.emit(1.15, bind(p, f"f{(start_node + i) % NODES + 1}", 1.15))
        s.emit(1.6, run(p, 1.6))
    for p in unsched:  # added by the autoscaler once the bundles wait; no node fits it
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHED,
             "lastTransitionTime": iso(5.1)}
        ]  # fmt: skip
        s.add(5.1, p)
        s.add(5.1, failed_scheduling(NS, p["metadata"]["name"], UNSCHED, 5.1))
    t = 2.0
    while t <= END:
        pending = 0 if job == "rc-pg-calm" or t < 5 else 1
        s.sample(t, "ray_placement_groups", {"State": "PENDING", "namespace": NS, "pod": head}, pending)
        t += 0.25


def _build(raw: Raw) -> None:
    s = Story()
    setup(s, NODES)
    for h, job in enumerate(GROUPS):
        _story(s, job, 4 * h)
    s.emit(END, next(o for _, _, _, o in s.events if o["kind"] == "Node"))  # the data's "now"
    s.write(raw)
    _renamespace(s, "mol").write(raw, capture=CAPTURE)


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    _, c, _ = build_lake(tmp_path_factory.mktemp("raynext") / "data", _build)
    yield c
    c.close()


@pytest.mark.parametrize("ns", [NS, "mol"])
@pytest.mark.parametrize("job", list(NEXT))
def test_next_step_names_the_worker_group_that_cannot_scale(con, ns: str, job: str) -> None:
    """The exact next step: the group with a pod Pending on FailedScheduling (before a group at its maximum), else
    the group at its maxReplicas (not a group with room sorted before it); the worker groups' counts as built."""
    kind, groups = GROUPS[job]
    (f,) = [r for r in diagnose.findings(con) if (r["namespace"], r["job"]) == (ns, job)]
    ev = f["evidence"] if isinstance(f["evidence"], dict) else json.loads(f["evidence"])
    assert (f["root_cause"], f["job_kind"]) == ("gang_assembly", kind)
    assert ev["next_step"] == NEXT[job] and f["summary"].endswith(": " + NEXT[job])
    assert ev["gang_size"] == 1 + sum(g[1] for g in groups)  # head + minReplicas of each group
    assert ev["pods_running"] == ev["gang_size"] + (kind == "RayJob")  # a RayJob's submitter pod runs too
    assert ev["pending_since"].startswith("2026-11-01T00:05:00") and ev["placed_at"] is None
    assert f["started_at"] == "2026-11-01T00:10:00Z" and f["ended_at"] is None
    got = {w["group"]: (w["running"], w["pending"], w["unschedulable"], w["max_replicas"]) for w in ev["worker_groups"]}
    assert got == {g: (running, pending, pending, hi) for g, _, hi, running, pending in groups}
    # The report's next step is the model's, with a command listing that group's pods (not the Job-level gang text).
    (step,) = f["next_steps"]
    assert step["action"] == NEXT[job][0].upper() + NEXT[job][1:] + "."
    label = {"RayCluster": "ray.io/cluster", "RayJob": "ray.io/originated-from-cr-name"}[kind]
    assert step["check"] == f"kubectl get pods -n {ns} -l {label}={job},ray.io/group=gpu-group -o wide"
    assert f["evidence_text"][0].startswith("1 Ray placement group PENDING for 25 min (timeout 5 min)")


@pytest.mark.parametrize(
    ("kind", "label"),
    [
        ("RayCluster", "ray.io/cluster"),
        ("RayJob", "ray.io/originated-from-cr-name"),
        ("TrainJob", "jobset.sigs.k8s.io/jobset-name"),
        ("PyTorchJob", "training.kubeflow.org/job-name"),
        ("MPIJob", "training.kubeflow.org/job-name"),
        ("LeaderWorkerSet", "leaderworkerset.sigs.k8s.io/name"),
        ("PodGroup", "kueue.x-k8s.io/pod-group-name"),
    ],
)
def test_report_commands_select_each_kinds_pods_by_its_controllers_label(kind: str, label: str) -> None:
    """Every class's kubectl check for a job of these kinds lists its pods by the label its controller sets (the
    Job-era ``-l job-name=`` matched none of them)."""
    f = {"namespace": "team", "job": "j1", "job_kind": kind, "root_cause": "training_stalled", "evidence": {}}
    (step,) = nextsteps.explain(f).steps
    assert f"-l {label}=j1 " in step.check


def test_a_coscheduling_pod_group_keeps_its_own_label() -> None:
    """Kind PodGroup is also a scheduler-plugins PodGroup that nothing else owns: its pods carry the coscheduling
    label, not Kueue's pod-group label."""
    f = {"namespace": "team", "job": "pg-job", "job_kind": "PodGroup", "pod_group": "pg-job",
         "root_cause": "training_stalled", "evidence": {}}
    (step,) = nextsteps.explain(f).steps
    assert "-l scheduling.x-k8s.io/pod-group=pg-job " in step.check


@pytest.mark.parametrize("ns", [NS, "mol"])
def test_healthy_ray_cluster_beside_them_is_not_flagged(con, ns: str) -> None:
    """Same group names, gpu-group at its maxReplicas like rj-pg-maxed, no placement group pending: healthy, no
    episode; the stuck ones are the only findings, one each."""
    assert _classes(con, ns)["rc-pg-calm"] == ["healthy"]
    q = "SELECT job FROM intermediate.int_ray_placement WHERE namespace = ? ORDER BY job"
    assert [r[0] for r in con.execute(q, [ns]).fetchall()] == sorted(NEXT)
    assert sorted((r["job"], r["root_cause"]) for r in diagnose.findings(con) if r["namespace"] == ns) == [
        (j, "gang_assembly") for j in sorted(NEXT)
    ]
