"""Insert real-shaped Kubernetes watch events and Prometheus samples straight into a lake's raw tables.

Objects follow the shapes in tests/fixtures/reference (Kueue Workload v1beta2 status, coscheduling
PodGroup, native scheduling.k8s.io PodGroup, core/v1 and events.k8s.io/v1 Events, dcgm-exporter labels).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def ts(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def iso(minutes: float) -> str:
    return ts(minutes).isoformat().replace("+00:00", "Z")


class Raw:
    """Collects raw rows and writes them in two bulk inserts."""

    def __init__(self, cluster: str = "default") -> None:
        self.cluster = cluster
        self.k8s: list[tuple[Any, ...]] = []
        self.samples: list[tuple[Any, ...]] = []

    def event(self, minutes: float, obj: dict[str, Any], event_type: str = "ADDED") -> dict[str, Any]:
        md = obj.setdefault("metadata", {})
        md.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, f"{obj['kind']}/{md.get('namespace')}/{md['name']}")))
        md.setdefault("creationTimestamp", iso(minutes))
        md["resourceVersion"] = str(len(self.k8s) + 1)
        self.k8s.append((self.cluster, ts(minutes), event_type, obj["apiVersion"], obj["kind"], md.get("namespace"),
                         md["name"], md["uid"], md["resourceVersion"], json.dumps(obj), 0, len(self.k8s)))
        return obj

    def marker(self, minutes: float, marker: str, api_version: str, kind: str, resource_version: str | None,
               namespace: str | None = None, sent: int | None = None) -> None:
        """A RELIST_BEGIN / RELIST_END row as the pipeline lands a collector's marker (docs/records.md)."""
        self.k8s.append((self.cluster, ts(minutes), marker, api_version, kind, namespace, None, None,
                         resource_version, None if sent is None else json.dumps({"sent": sent}), 0, len(self.k8s)))

    def sample(self, minutes: float, metric: str, labels: dict[str, str], value: float) -> None:
        node = labels.get("Hostname") or labels.get("node")
        self.samples.append((self.cluster, ts(minutes), metric, json.dumps(labels), value, node, "t", "job", "i"))

    def write(self, con: duckdb.DuckDBPyConnection) -> None:
        import polars as pl

        from pipeline.land import insert_samples

        k8s_cols = ["cluster", "observed_at", "event_type", "api_version", "kind", "namespace", "name", "uid",
                    "resource_version", "object", "kafka_partition", "kafka_offset"]
        if self.k8s:
            con.register("_rows", pl.DataFrame(self.k8s, schema=k8s_cols, orient="row").to_arrow())
            select = ", ".join(f"{c}::JSON" if c == "object" else c for c in k8s_cols)
            con.execute(f"INSERT INTO raw.k8s_objects ({', '.join(k8s_cols)}) SELECT {select} FROM _rows")
            con.unregister("_rows")
        if self.samples:
            insert_samples(con, pl.DataFrame(self.samples, orient="row", infer_schema_length=None, schema=[
                "cluster", "ts", "metric", "labels", "value", "node", "target", "job", "instance"]))
        self.k8s, self.samples = [], []


def node(name: str, rack: str, block: str = "block-1", gpus: int = 8, taints: list[dict] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "cloud.provider.com/topology-block": block,
                                                  "cloud.provider.com/topology-rack": rack}},
            "spec": {"taints": taints or []},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "capacity": {"nvidia.com/gpu": str(gpus)},
                       "addresses": [{"type": "InternalIP", "address": f"10.0.0.{name[-1]}"},
                                     {"type": "Hostname", "address": name}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def topology() -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "default"},
            "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-block"},
                                {"nodeLabel": "cloud.provider.com/topology-rack"},
                                {"nodeLabel": "kubernetes.io/hostname"}]}}


def workload(ns: str, name: str, owner_kind: str, owner: str, count: int, conditions: list[dict],
             cluster_queue: str | None = None, required: str | None = None, assignment: dict | None = None,
             api_version: str = "kueue.x-k8s.io/v1beta2") -> dict:
    ps: dict[str, Any] = {"name": "main", "count": count, "template": {"spec": {}}}
    if required:
        ps["topologyRequest"] = {"required": required}
    status: dict[str, Any] = {"conditions": conditions}
    if cluster_queue:
        psa: dict[str, Any] = {"name": "main", "count": count, "flavors": {"nvidia.com/gpu": "gpu"}}
        if assignment:
            psa["topologyAssignment"] = assignment
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [psa]}
    return {"apiVersion": api_version, "kind": "Workload",
            "metadata": {"name": name, "namespace": ns,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": owner_kind, "name": owner,
                                              "controller": True, "uid": f"uid-{owner}"}]},
            "spec": {"queueName": "team", "podSets": [ps]}, "status": status}


def cond(type_: str, status: str, reason: str, message: str, minutes: float) -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": iso(minutes)}


def pod(ns: str, name: str, owner_kind: str, owner: str, node_name: str | None, phase: str, gpus: int = 8,
        labels: dict | None = None, annotations: dict | None = None, spec: dict | None = None,
        conditions: list[dict] | None = None) -> dict:
    s: dict[str, Any] = {"containers": [{"name": "trainer", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    if node_name:
        s["nodeName"] = node_name
    s.update(spec or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": owner_kind, "name": owner,
                                              "controller": True, "uid": f"uid-{owner}"}]},
            "spec": s, "status": {"phase": phase, "conditions": conditions or []}}


def failed_scheduling(ns: str, pod_name: str, message: str, minutes: float, new_api: bool = False) -> dict:
    name = f"{pod_name}.fs"
    if new_api:
        return {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
                "regarding": {"kind": "Pod", "name": pod_name, "namespace": ns}, "reason": "FailedScheduling",
                "action": "Scheduling", "note": message, "type": "Warning", "eventTime": iso(minutes)}
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": ns}, "reason": "FailedScheduling",
            "message": message, "type": "Warning", "firstTimestamp": iso(minutes), "lastTimestamp": iso(minutes),
            "count": 3}


def dcgm(raw: Raw, minutes: float, node_name: str, gpu: int, metric: str, value: float,
         pod_ref: tuple[str, str] | None = None) -> None:
    labels = {"gpu": str(gpu), "UUID": f"GPU-{node_name}-{gpu}", "Hostname": node_name, "modelName": "NVIDIA H100",
              "device": f"nvidia{gpu}"}
    if pod_ref:
        labels.update({"namespace": pod_ref[0], "pod": pod_ref[1], "container": "trainer"})
    raw.sample(minutes, metric, labels, value)


def pod_status(p: dict, created: float, bound: float | None = None, started: float | None = None,
               unschedulable: tuple[float, str] | None = None) -> dict:
    """Give a pod() its own history the way the API returns it: creationTimestamp, PodScheduled, startTime,
    Ready / ContainersReady and containerStatuses (waiting while the image pulls, then running)."""
    p["metadata"]["creationTimestamp"] = iso(created)
    st: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    conds: list[dict] = []
    if unschedulable is not None:
        at, msg = unschedulable
        conds.append({"type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": iso(at),
                      "reason": "Unschedulable", "message": msg})
    if bound is not None:
        conds += [{"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": iso(bound)},
                  {"type": "Initialized", "status": "True", "lastProbeTime": None,
                   "lastTransitionTime": iso(bound + 1 / 60)}]
        st["startTime"] = iso(bound + 1 / 60)
        container: dict[str, Any] = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.08-py3", "imageID": "",
                                     "ready": False, "restartCount": 0, "started": False,
                                     "state": {"waiting": {"reason": "ContainerCreating"}}}
        if started is not None:
            st["phase"] = "Running"
            container.update(ready=True, started=True, state={"running": {"startedAt": iso(started)}},
                             containerID="containerd://3f1c2a")
            conds += [{"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None,
                       "lastTransitionTime": iso(started - 2 / 60)},
                      {"type": "ContainersReady", "status": "True", "lastProbeTime": None,
                       "lastTransitionTime": iso(started)},
                      {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": iso(started)}]
        st["containerStatuses"] = [container]
    st["conditions"] = conds
    p["status"] = st
    return p


def build_lake(data: Path, fill: Callable[[Raw], None]) -> tuple[Any, duckdb.DuckDBPyConnection, Any]:
    """A fresh lake under ``data`` holding what ``fill`` writes, with the models built: (settings, con, stats)."""
    from gangscope import config
    from pipeline import lake, models

    settings = config.load(overrides={"data": str(data)}, environ={})
    con = lake.connect(settings)
    raw = Raw()
    fill(raw)
    raw.write(con)
    return settings, con, models.build(settings, con)
