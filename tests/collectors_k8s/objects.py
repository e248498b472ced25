"""Test objects shaped like tests/fixtures/reference (loaded from it where whole objects exist)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from collectors.simulate.apiserver import ApiServer as FakeApiServer

# (group, version, plural, kind, namespaced) a 1.36 cluster with Kueue 0.16+, both PodGroup CRDs.
CORE = [("", "v1", "pods", "Pod", True), ("", "v1", "nodes", "Node", False), ("", "v1", "events", "Event", True)]
KUEUE = [("kueue.x-k8s.io", v, p, k, ns) for v in ("v1beta2", "v1beta1") for p, k, ns in (
    ("workloads", "Workload", True), ("clusterqueues", "ClusterQueue", False), ("localqueues", "LocalQueue", True),
    ("resourceflavors", "ResourceFlavor", False), ("topologies", "Topology", False))]
GANG = [("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True),
        ("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)]
NATIVE = [("scheduling.k8s.io", v, p, k, True) for v in ("v1alpha2",) for p, k in
          (("workloads", "Workload"), ("podgroups", "PodGroup"))]


def docs(reference: Path, rel: str) -> list[dict[str, Any]]:
    text = (reference / rel).read_text()
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def with_meta(obj: dict[str, Any], name: str | None = None, namespace: str | None = "team-a") -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    if name:
        meta["name"] = name
    if namespace is not None:
        meta.setdefault("namespace", namespace)
    meta.setdefault("creationTimestamp", "2026-03-01T10:00:00Z")
    return obj


def pod(reference: Path, name: str, node: str = "gpu-node-1", namespace: str = "team-a") -> dict[str, Any]:
    """The 1.36 worker pod of reference/gang, with a node, phase, a Kueue and a gang label."""
    base = docs(reference, "gang/k8s-1.36_workload-podgroup-pod_v1alpha2.yaml")[2]
    p = with_meta(base, name, namespace)
    p["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "tas-user-queue",
                               "scheduling.x-k8s.io/pod-group": "pg1", "app": "trainer"}
    p["spec"]["nodeName"] = node
    p["status"] = {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-03-01T10:00:05Z"}]}
    return p


def workload_v1beta2(reference: Path, name: str = "job-trainer-a1b2c") -> dict[str, Any]:
    ta = json.loads((reference / "kueue/workload-status-topologyassignment.v1beta2.json").read_text())
    return with_meta({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                      "spec": {"queueName": "tas-user-queue", "podSets": [{"name": "main", "count": 10}]},
                      "status": {"admission": {"clusterQueue": "tas-cluster-queue", "podSetAssignments": [
                          {"name": "main", "count": 10, "topologyAssignment": ta}]},
                          "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                          "message": "Quota reserved in ClusterQueue tas-cluster-queue",
                                          "lastTransitionTime": "2026-03-01T10:00:03Z"}]}}, name)


def workload_v1beta1(reference: Path, name: str = "job-old-x9y8z") -> dict[str, Any]:
    ta = docs(reference, "kueue/workload-topologyassignment-examples.v1beta1.yaml")[0]["topologyAssignment"]
    status = docs(reference, "kueue/workload-status-conditions-examples.yaml")[0]["status"]
    status["admission"] = {"clusterQueue": "tas-cluster-queue",
                           "podSetAssignments": [{"name": "main", "count": 6, "topologyAssignment": ta}]}
    return with_meta({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                      "spec": {"queueName": "tas-user-queue", "podSets": [{"name": "main", "count": 6}]},
                      "status": status}, name)


def event(name: str, message: str, ts: str = "2026-03-01T10:01:00Z", namespace: str = "team-a") -> dict[str, Any]:
    """A core/v1 FailedScheduling Event (message format of reference/gang-notes.md section 4)."""
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": ts},
            "involvedObject": {"kind": "Pod", "namespace": namespace, "name": "worker-0", "apiVersion": "v1"},
            "reason": "FailedScheduling", "message": message, "type": "Warning", "count": 1,
            "firstTimestamp": ts, "lastTimestamp": ts, "source": {"component": "default-scheduler"},
            "reportingComponent": "default-scheduler"}


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "cloud.provider.com/topology-rack": "rack-1"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                     {"type": "Hostname", "address": name}]}}


def populate(api: FakeApiServer, reference: Path, kueue_versions: tuple[str, ...] = ("v1beta2", "v1beta1"),
             native: bool = True) -> None:
    """Serve every kind of CONTRACT section 2 and put reference-shaped objects in it."""
    for g, v, p, k, ns in CORE + GANG + (NATIVE if native else []):
        api.serve(g, v, p, k, ns)
    for g, v, p, k, ns in KUEUE:
        if v in kueue_versions:
            api.serve(g, v, p, k, ns)
    api.put("", "v1", "nodes", node("gpu-node-1"))
    api.put("", "v1", "pods", pod(reference, "worker-0"))
    api.put("", "v1", "events", event("worker-0.17a", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."))
    for d in docs(reference, "gang/scheduler-plugins_podgroup-pg1_with-status.yaml")[-1:]:
        api.put("scheduling.x-k8s.io", "v1alpha1", "podgroups", with_meta(d))
    api.put("scheduling.volcano.sh", "v1beta1", "podgroups",
            with_meta(docs(reference, "gang/volcano_podgroup_v1beta1.yaml")[0]))
    if native:
        wl, pg, _ = docs(reference, "gang/k8s-1.36_workload-podgroup-pod_v1alpha2.yaml")
        api.put("scheduling.k8s.io", "v1alpha2", "workloads", with_meta(wl))
        api.put("scheduling.k8s.io", "v1alpha2", "podgroups", with_meta(pg))
    kv = kueue_versions[0]
    for d in docs(reference, "kueue/topology-resourceflavor-gpu-clusterqueue-localqueue.v1beta2.yaml"):
        plural = {"Topology": "topologies", "ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
                  "LocalQueue": "localqueues"}[d["kind"]]
        api.put("kueue.x-k8s.io", kv, plural, with_meta(d, namespace="team-a" if d["kind"] == "LocalQueue" else None))
    api.put("kueue.x-k8s.io", kv, "workloads",
            workload_v1beta2(reference) if kv == "v1beta2" else workload_v1beta1(reference))
