"""The scenarios played on the real control plane (tests/servers/kubernetes.py): each in its own namespace, on its
own kwok node pool, with the Kubernetes objects a user writes (Jobs, Kueue queues, native Workloads / PodGroups)
and the faults a cluster meets; the controllers (Kueue, kube-scheduler, the Job, node lifecycle and taint eviction
controllers, kwok's kubelet) write everything else.

Every object a scenario creates in the cluster's scope is named after the scenario's namespace (``gs-quota``,
``gs-quota-rack-1``, ...), so a capture can be split per scenario (``trim``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.simulate.cluster import BLOCK_LABEL, GPU_TAINT, HOST_LABEL, RACK_LABEL
from collectors.simulate.objects import IMAGE
from tests.servers.kubernetes import KubeCluster, gpu_nodes

POOL = "gangscope.test/pool"
KUEUE = "kueue.x-k8s.io/v1beta2"
NATIVE = "scheduling.k8s.io/v1beta1"
# kwok keeps these pods Running past the test (its delay is drawn between the two).
RUN_LONG = {"pod-complete.stage.kwok.x-k8s.io/delay": "2h", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "2h"}
CRASH_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"  # kwok's chaos stage fails the container


@dataclass
class Scenario:
    """One namespace: its nodes and setup objects, its jobs (created at once), and the class expected of each job
    (``None``: a class the models do not have yet, judged by an xfail test)."""

    ns: str
    nodes: int
    expect: dict[str, str]
    objects: list[dict[str, Any]] = field(default_factory=list)
    per_rack: int = 2
    pending_class: dict[str, str] = field(default_factory=dict)  # job -> class of issue 31, asserted under xfail

    @property
    def pool(self) -> list[dict[str, Any]]:
        nodes = gpu_nodes(self.ns, self.nodes, per_rack=self.per_rack, labels={POOL: self.ns})
        for n in nodes:
            n["spec"]["taints"] = [dict(GPU_TAINT)]
        return nodes

    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.pool]


# --- object builders ------------------------------------------------------------------------------------------------


def kueue_queues(ns: str, gpus: int, *, topology: bool = False, preemption: bool = False) -> list[dict[str, Any]]:
    """A ResourceFlavor selecting the namespace's pool (a TAS flavor with ``topology``), a ClusterQueue of ``gpus``
    GPUs, and the LocalQueue ``queue`` in the namespace."""
    out: list[dict[str, Any]] = []
    rf: dict[str, Any] = {"nodeLabels": {POOL: ns},
                          "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    if topology:
        out.append({"apiVersion": KUEUE, "kind": "Topology", "metadata": {"name": ns},
                    "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": RACK_LABEL},
                                        {"nodeLabel": HOST_LABEL}]}})
        rf["topologyName"] = ns
    out.append({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": ns}, "spec": rf})
    cq: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
            {"name": ns, "resources": [{"name": "cpu", "nominalQuota": gpus * 24},
                                       {"name": "memory", "nominalQuota": f"{gpus * 256}Gi"},
                                       {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
    if preemption:
        cq["preemption"] = {"withinClusterQueue": "LowerPriority"}
    out.append({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": ns}, "spec": cq})
    out.append({"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": "queue", "namespace": ns},
                "spec": {"clusterQueue": ns}})
    return out


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value,
            "description": f"gangscope test priority {value}"}


def pod_spec(ns: str, gpus: int, *, kueue: bool, group: str | None = None) -> dict[str, Any]:
    """A trainer container asking ``gpus`` GPUs; outside Kueue the pod selects its pool and tolerates the GPU taint
    itself (under Kueue the ResourceFlavor adds both when the Workload is admitted)."""
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "containers": [{
        "name": "trainer", "image": IMAGE, "command": ["torchrun"], "args": ["--nproc-per-node=8", "train.py"],
        "resources": {"requests": {"cpu": str(gpus * 12), "memory": f"{gpus * 128}Gi", "nvidia.com/gpu": str(gpus)},
                      "limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if not kueue:
        spec["nodeSelector"] = {POOL: ns}
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return spec


def job(ns: str, name: str, pods: int, *, gpus: int = 8, queue: str | None = None, gang_min: int | None = None,
        required: str | None = None, priority: str | None = None, run_long: bool = True, backoff_limit: int = 0,
        pod_labels: dict[str, str] | None = None, pod_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A batch/v1 Indexed Job of ``pods`` trainers: under Kueue (``queue``: the LocalQueue, suspended until
    admitted), or a native 1.37 gang (``gang_min``: ``spec.scheduling`` with that minCount)."""
    labels: dict[str, str] = {}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    annotations = dict(RUN_LONG if run_long else {}, **(pod_annotations or {}))
    if required:
        annotations["kueue.x-k8s.io/podset-required-topology"] = required
    tmeta: dict[str, Any] = {"annotations": annotations} if annotations else {}
    if pod_labels:
        tmeta["labels"] = dict(pod_labels)
    spec: dict[str, Any] = {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                            "backoffLimit": backoff_limit, "suspend": bool(queue),
                            "template": {"metadata": tmeta, "spec": pod_spec(ns, gpus, kueue=bool(queue))}}
    if gang_min is not None:
        spec["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": gang_min}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns,
                                                                  **({"labels": labels} if labels else {})},
            "spec": spec}


def native_gang(ns: str, name: str, pods: int, min_count: int, gpus: int = 8) -> list[dict[str, Any]]:
    """What a custom training controller writes on 1.37: a native Workload (controllerRef to its ``TrainJob``), one
    PodGroup with a gang policy, and bare pods naming the PodGroup in ``spec.schedulingGroup``."""
    group = f"{name}-workers"
    ref = {"apiGroup": "training.example.com", "kind": "TrainJob", "name": name}
    policy = {"gang": {"minCount": min_count}}
    out: list[dict[str, Any]] = [
        {"apiVersion": NATIVE, "kind": "Workload", "metadata": {"name": name, "namespace": ns},
         "spec": {"controllerRef": ref, "podGroupTemplates": [{"name": "workers", "schedulingPolicy": policy}]}},
        {"apiVersion": NATIVE, "kind": "PodGroup", "metadata": {"name": group, "namespace": ns},
         "spec": {"workloadRef": {"workloadName": name, "templateName": "workers"}, "schedulingPolicy": policy}},
    ]
    for i in range(pods):
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-worker-{i}", "namespace": ns, "annotations": dict(RUN_LONG),
                                 "labels": {"training.example.com/trainjob": name,
                                            "training.example.com/rank": str(i)}},
                    "spec": pod_spec(ns, gpus, kueue=False, group=group)})
    return out


# --- the scenarios --------------------------------------------------------------------------------------------------


def scenarios() -> dict[str, Scenario]:
    rack = RACK_LABEL
    out = [
        # 16 GPUs of quota: q-fits holds 8, q-short asks 16 (8 more needed) and waits for quota.
        Scenario("gs-quota", nodes=4, expect={"q-fits": "healthy", "q-short": "admission_quota"}, objects=[
            *kueue_queues("gs-quota", 16),
            job("gs-quota", "q-fits", 1, queue="queue"), job("gs-quota", "q-short", 2, queue="queue")]),
        # Two racks of two 8-GPU nodes, quota for all: t-split needs 3 nodes in one rack, which no rack has.
        Scenario("gs-topology", nodes=4, expect={"t-fits": "healthy", "t-split": "admission_topology"}, objects=[
            *kueue_queues("gs-topology", 64, topology=True),
            job("gs-topology", "t-fits", 2, queue="queue", required=rack),
            job("gs-topology", "t-split", 3, queue="queue", required=rack)]),
        # Native gangs on 4 nodes (32 GPUs): minCount 5 of 8-GPU pods can never be met; minCount 2 assembles.
        Scenario("gs-gang", nodes=4, expect={"tj-stuck": "gang_assembly", "g-stuck": "gang_assembly",
                                            "tj-ok": "healthy", "g-ok": "healthy"}, objects=[
            *native_gang("gs-gang", "tj-stuck", 5, 5), job("gs-gang", "g-stuck", 5, gang_min=5),
            *native_gang("gs-gang", "tj-ok", 2, 2), job("gs-gang", "g-ok", 2, gang_min=2)]),
        # 16 GPUs with preemption: p-low runs on all of it; p-high (created once p-low runs) preempts it.
        Scenario("gs-preempt", nodes=2, expect={"p-low": "preemption", "p-high": "healthy"}, objects=[
            *kueue_queues("gs-preempt", 16, preemption=True),
            priority_class("gs-preempt-low", 100), priority_class("gs-preempt-high", 1000),
            job("gs-preempt", "p-low", 2, queue="queue", priority="gs-preempt-low")]),
        # A Job that runs to completion and is deleted (with its pods, Workload and PodGroup), beside one running.
        Scenario("gs-deleted", nodes=2, expect={"d-done": "healthy", "d-running": "healthy"}, objects=[
            job("gs-deleted", "d-done", 1, run_long=False), job("gs-deleted", "d-running", 1)]),
        # n-lost runs on the first node, whose kubelet then dies; n-ok runs on the other one.
        Scenario("gs-node", nodes=2, expect={"n-ok": "healthy"}, pending_class={"n-lost": "node_failure"},
                 objects=[job("gs-node", "n-lost", 1, backoff_limit=3), job("gs-node", "n-ok", 1)]),
        # c-crash's containers exit 3 (kwok's chaos stage) until the Job's backoffLimit of 1; c-ok runs.
        Scenario("gs-crash", nodes=2, expect={"c-ok": "healthy"}, pending_class={"c-crash": "workload_crash"},
                 objects=[job("gs-crash", "c-crash", 1, backoff_limit=1, run_long=False,
                              pod_labels={CRASH_LABEL: "true"},
                              pod_annotations={f"{CRASH_LABEL}/exit-code": "3",
                                               f"{CRASH_LABEL}/reason": "Error",
                                               f"{CRASH_LABEL}/message": "loss is NaN"}),
                          job("gs-crash", "c-ok", 1)]),
    ]
    return {s.ns: s for s in out}


PREEMPTOR = job("gs-preempt", "p-high", 2, queue="queue", priority="gs-preempt-high")


# --- reading the cluster ----------------------------------------------------------------------------------------------


def pods_of(cluster: KubeCluster, ns: str, job_name: str) -> list[dict[str, Any]]:
    return [p for p in cluster.get("pods", namespace=ns)["items"]
            if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == job_name]


def running(cluster: KubeCluster, ns: str, job_name: str, count: int) -> bool:
    return sum(p["status"].get("phase") == "Running" for p in pods_of(cluster, ns, job_name)) >= count


def job_condition(cluster: KubeCluster, ns: str, name: str, ctype: str) -> bool:
    obj = cluster.get("jobs", name, namespace=ns)
    return any(c["type"] == ctype and c["status"] == "True" for c in obj.get("status", {}).get("conditions") or [])


def apply_all(cluster: KubeCluster, objects: Iterable[dict[str, Any]]) -> None:
    """Cluster-scoped and setup objects first, pods and Jobs last (Kueue's queues must exist when a Job comes)."""
    objs = list(objects)
    first = [o for o in objs if o["kind"] not in ("Job", "Pod")]
    if first:
        cluster.apply(first)
    last = [o for o in objs if o["kind"] in ("Job", "Pod")]
    if last:
        cluster.apply(last)


def namespace(ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}


# --- captures ---------------------------------------------------------------------------------------------------------


def belongs(obj: dict[str, Any], ns: str) -> bool:
    """Whether a captured object is part of scenario ``ns``: in its namespace, or cluster-scoped and named after it
    (its nodes, queues, flavor, topology, priority classes)."""
    md = obj.get("metadata") or {}
    if md.get("namespace"):
        return md["namespace"] == ns
    return str(md.get("name", "")).startswith(f"{ns}-") or md.get("name") == ns


def trim(lines: Iterable[str], ns: str) -> list[str]:
    """The watch events of scenario ``ns`` from a capture, without what the models never read and bloats the
    file: ``managedFields``, and Node updates that only renew heartbeat times (their conditions and taints kept)."""
    out: list[str] = []
    last_node: dict[str, str] = {}
    for line in lines:
        ev = json.loads(line)
        obj = ev["object"]
        if not belongs(obj, ns):
            continue
        obj["metadata"].pop("managedFields", None)
        if obj.get("kind") == "Node" and ev["type"] == "MODIFIED":
            key = json.dumps(_node_state(obj), sort_keys=True)
            if last_node.get(obj["metadata"]["name"]) == key:
                continue
            last_node[obj["metadata"]["name"]] = key
        elif obj.get("kind") == "Node":
            last_node[obj["metadata"]["name"]] = json.dumps(_node_state(obj), sort_keys=True)
        out.append(json.dumps(ev, separators=(",", ":")))
    return out


def _node_state(node: dict[str, Any]) -> Any:
    st = copy.deepcopy(node.get("status") or {})
    for c in st.get("conditions") or []:
        c.pop("lastHeartbeatTime", None)
    return [node.get("spec"), node["metadata"].get("labels"), st.get("conditions"), st.get("allocatable")]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def expect_all(scns: dict[str, Scenario]) -> dict[tuple[str, str], str]:
    return {(s.ns, j): c for s in scns.values() for j, c in s.expect.items()}

