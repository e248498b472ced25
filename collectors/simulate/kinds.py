"""The jobs teams submit (issue 33): a scenario's Jobs and JobSets re-told as the kinds that make them.

``rekind(tl, scn, kind)`` rewrites a built timeline so every job is submitted as a KubeRay ``RayCluster``
(``ray``), a Kubeflow Trainer ``TrainJob`` running a JobSet (``trainjob``), a Kubeflow ``PyTorchJob`` (``pytorchjob``),
an ``MPIJob`` with a launcher Job (``mpijob``), a ``LeaderWorkerSet`` (``lws``) or a Kueue plain-pod group
(``podgroup``), with the labels and owner references those controllers give their pods (shapes:
tests/fixtures/jobkinds, upstream sources in its README). Pod names, nodes, times and faults stay as they were,
so the truth is the same but for ``job_kind``; only the links from pods to their job change. Native
``scheduling.k8s.io`` objects keep their controllerRef (the variants run the scenarios as Kubernetes 1.36 shows them).
"""

from __future__ import annotations

import copy
from typing import Any

from collectors.simulate.scenarios import Scenario, SimJob

KINDS = {"ray": "RayCluster", "trainjob": "TrainJob", "pytorchjob": "PyTorchJob", "mpijob": "MPIJob",
         "lws": "LeaderWorkerSet", "podgroup": "PodGroup"}
API = {"RayCluster": "ray.io/v1", "TrainJob": "trainer.kubeflow.org/v1alpha1", "PyTorchJob": "kubeflow.org/v1",
       "MPIJob": "kubeflow.org/v2beta1", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}
_DROP_LABELS = ("batch.kubernetes.io/", "jobset.sigs.k8s.io/", "controller-uid", "job-name")


def _owner(kind: str, name: str, uid: str, api: str | None = None, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api or API[kind], "kind": kind, "name": name, "uid": uid, "controller": controller,
            "blockOwnerDeletion": True}


def _conditions(obj: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """A Job's / JobSet's terminal conditions as a Kubeflow job states them (Succeeded / Failed)."""
    out = []
    for c in obj.get("status", {}).get("conditions", []):
        if c.get("status") != "True":
            continue
        if c["type"] == "Failed":
            out.append(dict(c, reason=f"{kind}Failed"))
        elif c["type"] in ("Complete", "Completed"):
            out.append(dict(c, type="Succeeded", reason=f"{kind}Succeeded"))
    return out


def _spec(kind: str, j: SimJob, job_obj: dict[str, Any]) -> dict[str, Any]:
    if kind == "RayCluster":
        return {"rayVersion": "2.52.0", "headGroupSpec": {"rayStartParams": {}},
                "workerGroupSpecs": [{"groupName": "gpu-group", "replicas": j.pods - 1, "minReplicas": j.pods - 1,
                                      "maxReplicas": j.pods - 1, "rayStartParams": {}}]}
    if kind == "TrainJob":
        return {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                               "name": "torch-distributed"}, "trainer": {"numNodes": j.pods}}
    if kind == "PyTorchJob":
        return {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": j.restart_policy},
                                        "Worker": {"replicas": j.pods - 1, "restartPolicy": j.restart_policy}}}
    if kind == "MPIJob":
        return {"slotsPerWorker": j.gpus_per_pod, "mpiReplicaSpecs": {"Launcher": {"replicas": 1},
                                                                      "Worker": {"replicas": j.pods - 1}}}
    groups = 2 if j.pods % 2 == 0 and j.pods > 2 else 1
    return {"replicas": groups, "leaderWorkerTemplate": {"size": j.pods // groups,
                                                         "restartPolicy": "RecreateGroupOnPodRestart"}}


def _top(kind: str, j: SimJob, job_obj: dict[str, Any]) -> dict[str, Any]:
    md = job_obj["metadata"]
    meta = {k: md[k] for k in ("name", "namespace", "uid", "creationTimestamp") if k in md}
    meta["labels"] = {k: v for k, v in md.get("labels", {}).items() if k.startswith("kueue.x-k8s.io/")}
    status: dict[str, Any] = {}
    if kind in ("PyTorchJob", "MPIJob", "TrainJob"):
        status["conditions"] = _conditions(job_obj, kind)
        if kind == "TrainJob":
            for c in status["conditions"]:
                if c["type"] == "Succeeded":
                    c["type"] = "Complete"
    if md.get("deletionTimestamp"):
        meta["deletionTimestamp"] = md["deletionTimestamp"]
    return {"apiVersion": API[kind], "kind": kind, "metadata": meta, "spec": _spec(kind, j, job_obj),
            "status": status}


def _pod(kind: str, j: SimJob, p: dict[str, Any]) -> dict[str, Any]:
    md = p["metadata"]
    names = j.pod_names if md["name"] in j.pod_names else j.pod_names2
    index = names.index(md["name"]) if md["name"] in names else int(
        md.get("labels", {}).get("batch.kubernetes.io/job-completion-index", "1"))
    labels = {k: v for k, v in md.get("labels", {}).items() if not k.startswith(_DROP_LABELS)}
    owners: list[dict[str, Any]]
    if kind == "RayCluster":
        head = index == 0
        labels.update({"ray.io/cluster": j.name, "ray.io/node-type": "head" if head else "worker",
                       "ray.io/group": "headgroup" if head else "gpu-group"})
        owners = [_owner("RayCluster", j.name, j.uid)]
    elif kind == "TrainJob":
        labels.update({k: v for k, v in md.get("labels", {}).items() if k.startswith("batch.kubernetes.io/")})
        labels.update({"jobset.sigs.k8s.io/jobset-name": j.name, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                       "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"})
        owners = [_owner("Job", f"{j.name}-node-0", f"{j.uid}-node", api="batch/v1")]
    elif kind in ("PyTorchJob", "MPIJob"):
        role = ("master" if kind == "PyTorchJob" else "launcher") if index == 0 else "worker"
        labels.update({"training.kubeflow.org/job-name": j.name, "training.kubeflow.org/replica-type": role,
                       "training.kubeflow.org/replica-index": str(max(0, index - 1) if index else 0),
                       "training.kubeflow.org/operator-name":
                           "mpi-operator" if kind == "MPIJob" else "pytorchjob-controller"})
        if kind == "MPIJob":
            labels["training.kubeflow.org/job-role"] = role
        owners = [_owner("Job", f"{j.name}-launcher", f"{j.uid}-launcher", api="batch/v1")] \
            if kind == "MPIJob" and index == 0 else [_owner(kind, j.name, j.uid)]
    elif kind == "LeaderWorkerSet":
        size = _spec(kind, j, {})["leaderWorkerTemplate"]["size"]
        group, worker = divmod(index, size)
        labels.update({"leaderworkerset.sigs.k8s.io/name": j.name,
                       "leaderworkerset.sigs.k8s.io/group-index": str(group),
                       "leaderworkerset.sigs.k8s.io/worker-index": str(worker)})
        sts = j.name if worker == 0 else f"{j.name}-{group}"
        owners = [_owner("StatefulSet", sts, f"{j.uid}-sts-{sts}", api="apps/v1")]
    else:  # Kueue plain-pod group: no controller; its Workload is named after the group
        labels.update({"kueue.x-k8s.io/pod-group-name": j.name, "kueue.x-k8s.io/managed": "true"})
        annotations = md.setdefault("annotations", {})
        annotations["kueue.x-k8s.io/pod-group-total-count"] = str(j.pods)
        if "kueue.x-k8s.io/workload" in annotations:
            annotations["kueue.x-k8s.io/workload"] = j.name
        owners = []
    md["labels"] = labels
    md["ownerReferences"] = owners
    return p


def _workload(kind: str, j: SimJob, w: dict[str, Any]) -> dict[str, Any]:
    if kind == "PodGroup":  # Kueue names a group's Workload after the group, owned by every pod (none controller)
        w["metadata"]["name"] = j.name
        w["metadata"]["ownerReferences"] = [_owner("Pod", n, f"{j.uid}-pod-{i}", api="v1", controller=False)
                                            for i, n in enumerate(j.pod_names)]
    else:
        w["metadata"]["ownerReferences"] = [_owner(kind, j.name, j.uid)]
    return w


def _children(kind: str, j: SimJob, top: dict[str, Any], etype: str) -> list[dict[str, Any]]:
    """The objects a kind's controller makes besides pods: a TrainJob's JobSet and its child Job, an MPIJob's
    launcher Job (their state follows the top object's)."""
    md = top["metadata"]
    base = {"namespace": md["namespace"], "creationTimestamp": md.get("creationTimestamp")}
    if kind == "TrainJob":
        js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": dict(base, name=j.name, uid=f"{j.uid}-jobset",
                               ownerReferences=[_owner("TrainJob", j.name, j.uid)]),
              "spec": {"replicatedJobs": [{"name": "node", "replicas": 1}]}, "status": {}}
        child = {"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": dict(base, name=f"{j.name}-node-0", uid=f"{j.uid}-node",
                                  labels={"jobset.sigs.k8s.io/jobset-name": j.name},
                                  ownerReferences=[_owner("JobSet", j.name, f"{j.uid}-jobset",
                                                          api="jobset.x-k8s.io/v1alpha2")]),
                 "spec": {"completions": j.pods, "parallelism": j.pods}, "status": {}}
        return [js, child]
    if kind == "MPIJob":
        return [{"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": dict(base, name=f"{j.name}-launcher", uid=f"{j.uid}-launcher",
                                  ownerReferences=[_owner("MPIJob", j.name, j.uid)]),
                 "spec": {"backoffLimit": 6}, "status": {}}]
    return []


def rekind(items: list[tuple[float, int, str, dict[str, Any]]], scn: Scenario, how: str) -> list[
        tuple[float, int, str, dict[str, Any]]]:
    """The timeline's items with every job submitted as ``KINDS[how]``; sets each SimJob's ``submitted_as``."""
    kind = KINDS[how]
    by_obj: dict[tuple[str, str], SimJob] = {}
    by_pod: dict[tuple[str, str], SimJob] = {}
    for j in scn.jobs:
        by_obj[(j.namespace, j.name)] = j
        for n in j.pod_names + j.pod_names2:
            by_pod[(j.namespace, n)] = j
    renamed = {(j.namespace, j.workload): j.name for j in scn.jobs if kind == "PodGroup" and j.workload}
    out: list[tuple[float, int, str, dict[str, Any]]] = []
    for t, i, etype, obj in items:
        inv = obj.get("involvedObject") or obj.get("regarding")
        if inv and inv.get("kind") == "Workload" and (inv.get("namespace"), inv.get("name")) in renamed:
            obj = copy.deepcopy(obj)
            inv = obj.get("involvedObject") or obj.get("regarding")
            inv["name"] = renamed[(inv["namespace"], inv["name"])]
        md = obj.get("metadata", {})
        key = (md.get("namespace"), md.get("name"))
        k = obj.get("kind")
        j = None
        if k == "Pod":
            j = by_pod.get(key)
            if j is None:
                owner = next(iter(md.get("ownerReferences") or []), {})
                labels = md.get("labels", {})
                j = by_obj.get((key[0], labels.get("jobset.sigs.k8s.io/jobset-name") or owner.get("name")))
            if j is not None:
                obj = _pod(kind, j, copy.deepcopy(obj))
            out.append((t, i, etype, obj))
            continue
        if k in ("Job", "JobSet") and obj.get("apiVersion", "").startswith(("batch/", "jobset.x-k8s.io/")):
            j = by_obj.get(key)
            if j is None:  # a JobSet's child Job (restart attempts): gone with its JobSet
                owner = next(iter(md.get("ownerReferences") or []), {})
                if owner.get("kind") == "JobSet" and (key[0], owner.get("name")) in by_obj:
                    continue
                out.append((t, i, etype, obj))
                continue
            if kind in ("PodGroup",):
                continue  # plain pods have no controller object
            top = _top(kind, j, obj)
            out.append((t, i, etype, top))
            out += [(t, i, etype, c) for c in _children(kind, j, top, etype)]
            continue
        if k == "Workload" and obj.get("apiVersion", "").startswith("kueue.x-k8s.io/"):
            owner = next(iter(md.get("ownerReferences") or []), {})
            j = by_obj.get((key[0], owner.get("name")))
            if j is not None:
                obj = _workload(kind, j, copy.deepcopy(obj))
        out.append((t, i, etype, obj))
    for j in scn.jobs:
        j.submitted_as = kind
    return [(t, n, etype, obj) for n, (t, _, etype, obj) in enumerate(out)]
