"""gang_assembly: the nodes that come closest are judged on the unschedulable pods' own constraints.

Reference-shaped objects (tests/sql/lakefix: core/v1 Node and Pod, the coscheduling PodGroup of
scheduler-plugins_podgroup-pg1_with-status.yaml), a real DuckLake and the real models. A node that fails the
pods' nodeSelector or required node affinity never comes "closest", however many GPUs it has free; the others
are ranked by what they lack (untolerated NoSchedule/NoExecute taints, cordon, GPUs). Built twice: watched
live from creation, and first seen in an initial list (middle of life).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reports import diagnose
from reports.nextsteps import explain
from tests.sql.lakefix import Raw, build_lake, failed_scheduling, iso, node, pod, pod_status

NS = "ml"
COSCHED = "scheduling.x-k8s.io/pod-group"
ZONE = "topology.kubernetes.io/zone"
MSG = ("0/6 nodes are available: 1 node(s) had untolerated taint {nvidia.com/maintenance: }, 1 node(s) were "
       "unschedulable, 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node affinity/selector.")
SELECTOR = {"nvidia.com/gpu.product": "H100"}
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]},
                          {"key": "example.com/retired", "operator": "DoesNotExist"}]}]}}}
TOLERATIONS = [{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"},
               {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _node(name: str, product: str, zone: str, taints: list[dict] | None = None, cordoned: bool = False,
          extra: dict | None = None) -> dict:
    n = node(name, "rack-1", taints=taints)
    n["metadata"]["labels"].update({"nvidia.com/gpu.product": product, ZONE: zone, **(extra or {})})
    if cordoned:
        n["spec"]["unschedulable"] = True
    return n


NODES = [
    # matches; 4 of 8 free (another job holds 4); one taint tolerated (Exists), one not
    _node("gpu-node-001", "H100", "z1", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                                {"key": "nvidia.com/maintenance", "effect": "NoSchedule"}]),
    _node("gpu-node-002", "H100", "z1", cordoned=True),  # matches; all free but cordoned
    # matches; 2 of 8 free; its taint is tolerated (Equal key and value); a PreferNoSchedule taint does not block
    _node("gpu-node-003", "H100", "z1", taints=[{"key": "dedicated", "value": "train", "effect": "NoSchedule"},
                                                {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}]),
    _node("gpu-node-009", "A100", "z1"),  # all 8 free, no taint: fails the nodeSelector
    _node("gpu-node-010", "H100", "z2"),  # all 8 free, no taint: fails the required affinity (zone)
    _node("gpu-node-011", "H100", "z1", extra={"example.com/retired": "yes"}),  # fails DoesNotExist
]
NEVER = {"gpu-node-009", "gpu-node-010", "gpu-node-011"}


def _fill(raw: Raw, seen: float | None) -> None:
    """Everything created from minute 0; ``seen``: first seen then in an initial list, else watched live."""
    def at(minutes: float) -> float:
        return seen if seen is not None else minutes

    for n in NODES:
        raw.event(at(0.0), n)
    # Another job holds 4 GPUs on gpu-node-001 and 6 on gpu-node-003.
    for name, where, gpus in (("other-0", "gpu-node-001", 4), ("other-1", "gpu-node-003", 6)):
        p = pod(NS, name, "Job", "other", where, "Pending", gpus=gpus)
        raw.event(at(0.5), pod_status(p, 0.0, bound=0.2, started=0.4))
    raw.event(at(1.0), {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                        "metadata": {"name": "llama-gang", "namespace": NS, "creationTimestamp": iso(1.0)},
                        "spec": {"minMember": 2, "scheduleTimeoutSeconds": 60}, "status": {"phase": "Scheduling"}})
    for i in range(2):
        p = pod(NS, f"llama-gang-{i}", "Job", "llama-gang", None, "Pending", gpus=8, labels={COSCHED: "llama-gang"},
                spec={"nodeSelector": dict(SELECTOR), "affinity": AFFINITY, "tolerations": TOLERATIONS})
        raw.event(at(1.0), pod_status(p, 1.0, unschedulable=(1.05, MSG)))
    raw.event(at(2.0), failed_scheduling(NS, "llama-gang-0", MSG, 2.0))
    # A gang whose selector no node matches at all.
    raw.event(at(1.0), {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                        "metadata": {"name": "b200-gang", "namespace": NS, "creationTimestamp": iso(1.0)},
                        "spec": {"minMember": 2, "scheduleTimeoutSeconds": 60}, "status": {"phase": "Scheduling"}})
    for i in range(2):
        p = pod(NS, f"b200-gang-{i}", "Job", "b200-gang", None, "Pending", gpus=8, labels={COSCHED: "b200-gang"},
                spec={"nodeSelector": {"nvidia.com/gpu.product": "B200"}})
        raw.event(at(1.0), pod_status(p, 1.0, unschedulable=(
            1.05, "0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector.")))
    raw.event(max(at(2.0), 20.0), NODES[-1], "MODIFIED")  # the data's "now"


@pytest.fixture(scope="module", params=[None, 60.0], ids=["watched-live", "initial-list"])
def findings(request, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict]]:
    _, con, _ = build_lake(tmp_path_factory.mktemp("closest") / "data", lambda raw: _fill(raw, request.param))
    try:
        rows = diagnose.findings(con)
        yield {r["job"]: r for r in rows if r["root_cause"] == "gang_assembly"}
    finally:
        con.close()


def test_closest_nodes_match_the_pods_constraints(findings) -> None:
    f = findings["llama-gang"]
    closest = f["evidence"]["closest_nodes"]
    names = [c["node"] for c in closest]
    assert not NEVER & set(names), closest
    # Fewest blocking reasons first, then the smallest GPU shortfall.
    assert names == ["gpu-node-002", "gpu-node-003", "gpu-node-001"], closest
    by = {c["node"]: c for c in closest}
    assert by["gpu-node-001"]["untolerated_taints"] == ["nvidia.com/maintenance:NoSchedule"]
    assert by["gpu-node-001"]["free_gpus"] == 4 and by["gpu-node-001"]["gpus"] == 8
    assert by["gpu-node-003"]["untolerated_taints"] == [] and by["gpu-node-003"]["free_gpus"] == 2
    assert by["gpu-node-002"]["cordoned"] is True and by["gpu-node-002"]["free_gpus"] == 8
    assert f["evidence"]["nodes_matching_selector"] == 3
    failing = {x["node"]: x["missing"] for x in f["evidence"]["nodes_failing_selector"]}
    assert failing["gpu-node-009"] == ["label nvidia.com/gpu.product=H100"]
    assert failing["gpu-node-010"] == [f"{ZONE} In [z1]"]
    assert failing["gpu-node-011"] == ["example.com/retired DoesNotExist"]


def test_next_step_says_per_node_what_is_missing(findings) -> None:
    f = findings["llama-gang"]
    text = " ".join(explain(f).sentences)
    assert "gpu-node-001: 4 of 8 GPUs free (8 needed), taint nvidia.com/maintenance:NoSchedule not tolerated" in text
    assert "gpu-node-002: 8 of 8 GPUs free, cordoned" in text
    assert "gpu-node-003: 2 of 8 GPUs free (8 needed)" in text
    closest_part = text.split("Closest nodes")[1]
    assert not any(n in closest_part.split(".")[0] for n in NEVER), text
    step = explain(f).steps[0]
    assert "gpu-node-002" in step.action and "cordoned" in step.action, step


def test_no_node_matches_the_selector(findings) -> None:
    f = findings["b200-gang"]
    ev = f["evidence"]
    assert not ev.get("closest_nodes") and ev["nodes_matching_selector"] == 0
    step = explain(f).steps[0]
    assert "selector" in step.action and "nvidia.com/gpu.product=B200" in step.action, step
    assert "Closest nodes" not in " ".join(explain(f).sentences)
