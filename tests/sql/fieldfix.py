"""Stories of the failures beyond scheduling (issue 31), told with the upstream shapes of
``tests/fixtures/reference/field/`` (kubelet waiting / terminated reasons and messages, Events, Job / JobSet failure
conditions, node lifecycle taints and evictions, drains, GPUs marked unhealthy, dcgm-exporter clock fields).

A ``Story`` collects watch events and samples at minutes of the lakefix timeline; ``write`` lands them either watched
live, or met in the middle of life: every object that exists at ``capture`` arrives ADDED in the initial list in
its state then (its history only in its own timestamps), what happens later is watched (``Timeline.start_capture_at``
does the same for the simulator). Metrics keep their history, as a Prometheus dump replayed beside a capture.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tests.sql.lakefix import Raw, cond, iso, node, pod, workload

FIELD = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "field"
NS = "field"


def docs(name: str) -> list[dict[str, Any]]:
    """The YAML documents of one reference file (EventLists flattened to their items)."""
    out: list[dict[str, Any]] = []
    for d in yaml.safe_load_all((FIELD / name).read_text()):
        if isinstance(d, dict):
            out += d.get("items", []) if d.get("kind") == "EventList" else [d]
    return out


def ref(name: str, kind: str, index: int = 0) -> dict[str, Any]:
    """The index-th object of a kind in a reference file."""
    return copy.deepcopy([d for d in docs(name) if d.get("kind") == kind][index])


class Story:
    def __init__(self) -> None:
        self.events: list[tuple[float, int, str, dict[str, Any]]] = []
        self.samples: list[tuple[float, str, dict[str, str], float]] = []

    def emit(self, t: float, obj: dict[str, Any], etype: str = "MODIFIED") -> dict[str, Any]:
        self.events.append((t, len(self.events), etype, copy.deepcopy(obj)))
        return obj

    def add(self, t: float, obj: dict[str, Any]) -> dict[str, Any]:
        return self.emit(t, obj, "ADDED")

    def sample(self, t: float, metric: str, labels: dict[str, str], value: float) -> None:
        self.samples.append((t, metric, labels, value))

    def write(self, raw: Raw, capture: float | None = None) -> None:
        items = sorted(self.events, key=lambda x: (x[0], x[1]))
        if capture is not None:
            state: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
            for t, _, etype, obj in items:
                if t > capture:
                    break
                md = obj["metadata"]
                key = (obj["apiVersion"], obj["kind"], md.get("namespace"), md["name"])
                if etype == "DELETED":
                    state.pop(key, None)
                else:
                    state[key] = obj
            later = [x for x in items if x[0] > capture]
            items = [(capture, i, "ADDED", obj) for i, obj in enumerate(state.values())] + later
        for t, _, etype, obj in items:
            raw.event(t, copy.deepcopy(obj), etype)
        for t, metric, labels, value in self.samples:
            raw.sample(t, metric, labels, value)


# --- building blocks ------------------------------------------------------------------------------------------------

IMAGE = "registry.example.com/ml/trainer:v2.3.1"


def job_pod(job: str, i: int, created: float, restart_policy: str = "Never", gpus: int = 8,
            kind: str = "Job") -> dict[str, Any]:
    """A pod of an Indexed Job (or of a JobSet's child Job), Pending, not bound."""
    labels = {"batch.kubernetes.io/job-completion-index": str(i)}
    owner = job
    if kind == "JobSet":
        labels["jobset.sigs.k8s.io/jobset-name"] = job
        owner = f"{job}-worker-0"
    p = pod(NS, f"{job}-{i}-x7k2p", "Job", owner, None, "Pending", gpus=gpus, labels=labels,
            spec={"restartPolicy": restart_policy})
    p["spec"]["containers"][0]["image"] = IMAGE
    p["metadata"]["creationTimestamp"] = iso(created)
    p["status"] = {"phase": "Pending", "conditions": []}
    return p


def bind(p: dict[str, Any], node_name: str, at: float) -> dict[str, Any]:
    p["spec"]["nodeName"] = node_name
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(at)},
        {"type": "Initialized", "status": "True", "lastTransitionTime": iso(at + 1 / 60)},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
         "message": "containers with unready status: [trainer]", "lastTransitionTime": iso(at + 1 / 60)},
        {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
         "message": "containers with unready status: [trainer]", "lastTransitionTime": iso(at + 1 / 60)}]
    p["status"]["startTime"] = iso(at + 1 / 60)
    p["status"]["containerStatuses"] = [{"name": "trainer", "image": IMAGE, "imageID": "", "ready": False,
                                         "started": False, "restartCount": 0,
                                         "state": {"waiting": {"reason": "ContainerCreating"}}}]
    return p


def waiting(p: dict[str, Any], reason: str, message: str | None) -> dict[str, Any]:
    w: dict[str, Any] = {"reason": reason}
    if message is not None:
        w["message"] = message
    p["status"]["containerStatuses"][0]["state"] = {"waiting": w}
    return p


def run(p: dict[str, Any], at: float, restarts: int | None = None) -> dict[str, Any]:
    p["status"]["phase"] = "Running"
    cs = p["status"]["containerStatuses"][0]
    cs.update(ready=True, started=True, state={"running": {"startedAt": iso(at)}},
              containerID="containerd://9d8c7b6a5f4e")
    if restarts is not None:
        cs["restartCount"] = restarts
    p["status"]["conditions"] = [c for c in p["status"]["conditions"] if c["type"] not in ("Ready", "ContainersReady")]
    p["status"]["conditions"] += [{"type": t, "status": "True", "lastTransitionTime": iso(at)}
                                  for t in ("Ready", "ContainersReady")]
    return p


def running_pod(story: Story, job: str, i: int, node_name: str, created: float, **kw: Any) -> dict[str, Any]:
    """A pod created, bound a few seconds later and running half a minute after that, watched step by step."""
    p = job_pod(job, i, created, **kw)
    story.add(created, p)
    story.emit(created + 0.05, bind(p, node_name, created + 0.05))
    story.emit(created + 0.5, run(p, created + 0.5))
    return p


def terminate(p: dict[str, Any], at: float, exit_code: int, reason: str, phase: str | None = None) -> dict[str, Any]:
    cs = p["status"]["containerStatuses"][0]
    started = cs["state"].get("running", {}).get("startedAt")
    cs.update(ready=False, started=False, state={"terminated": {"exitCode": exit_code, "reason": reason,
                                                                "startedAt": started, "finishedAt": iso(at)}})
    if phase:
        p["status"]["phase"] = phase
    for c in p["status"]["conditions"]:
        if c["type"] in ("Ready", "ContainersReady"):
            c.update(status="False", reason="PodFailed" if phase == "Failed" else "PodCompleted",
                     lastTransitionTime=iso(at))
    return p


def pod_event(p: dict[str, Any], template: dict[str, Any], first: float, last: float, count: int,
              message: str | None = None) -> dict[str, Any]:
    """A reference Event (kubelet / controller) moved onto pod ``p`` and the timeline."""
    e = copy.deepcopy(template)
    name = p["metadata"]["name"]
    e["metadata"] = {"name": f"{name}.{template['reason'].lower()}{int(first * 100)}", "namespace": NS}
    e["involvedObject"] = dict(e.get("involvedObject", {}), name=name, namespace=NS, kind="Pod", apiVersion="v1")
    if message is not None:
        e["message"] = message
    e.update(count=count, firstTimestamp=iso(first), lastTimestamp=iso(last))
    return e


def batch_job(name: str, created: float, backoff_limit: int = 0, completions: int = 2) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": iso(created)},
            "spec": {"backoffLimit": backoff_limit, "completions": completions, "parallelism": completions,
                     "completionMode": "Indexed"},
            "status": {"active": completions, "startTime": iso(created)}}


def dcgm(story: Story, t: float, node_name: str, gpu: int, metric: str, value: float,
         pod_name: str | None = None, extra: dict[str, str] | None = None) -> None:
    """A dcgm-exporter sample with the labels of dcgm_throttle-sample.prom (pod mapping on when ``pod_name``)."""
    labels = {"gpu": str(gpu), "UUID": f"GPU-{node_name}-{gpu}", "pci_bus_id": f"00000000:{18 + gpu:02X}:00.0",
              "device": f"nvidia{gpu}", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": node_name,
              "DCGM_FI_DRIVER_VERSION": "570.124.06"}
    if pod_name:
        labels.update(container="trainer", namespace=NS, pod=pod_name)
    labels.update(extra or {})
    story.sample(t, metric, labels, value)


def throughput(story: Story, pod_name: str, start: float, end: float, value_at, step: float = 0.25) -> None:
    t = start
    while t < end:
        v = value_at(t)
        if v is not None:
            story.sample(t, "train_tokens_per_second", {"namespace": NS, "pod": pod_name}, v)
        t += step


def setup(story: Story, nodes: int) -> None:
    for i in range(1, nodes + 1):
        story.add(0, node(f"f{i}", f"rack-{(i - 1) // 8}"))


def kueue_workload(job: str, created: float, admitted: float, count: int) -> dict[str, Any]:
    w = workload(NS, f"job-{job}-5a2b3", "Job", job, count,
                 [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq", admitted),
                  cond("Admitted", "True", "Admitted", "The workload is admitted", admitted),
                  cond("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", admitted)],
                 cluster_queue="gpu-cq")
    w["metadata"]["creationTimestamp"] = iso(created)
    return w
