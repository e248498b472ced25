"""Builders for Kubernetes objects in their real shapes.

Field layouts are copied from ``shared/reference/`` (Kueue v1beta2/v1beta1, scheduler-plugins
coscheduling, Volcano, native ``scheduling.k8s.io`` v1alpha2, core/v1). Builders return plain
dicts; the timeline in ``scenarios.py`` mutates and re-emits them as watch events.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from collectors.simulate.cluster import BLOCK_LABEL, HOST_LABEL, NODE_GROUP_LABEL, RACK_LABEL

KUEUE = "kueue.x-k8s.io"
TOPOLOGY = "default"
FLAVOR = "tas-flavor"
TAS_GATE = "kueue.x-k8s.io/topology"
COSCHED_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
IMAGE = "nvcr.io/nvidia/pytorch:25.08-py3"


def meta(name: str, uid: str, created: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name}
    if namespace is not None:
        m["namespace"] = namespace
    m.update({"uid": uid, "creationTimestamp": created, "generation": 1})
    m.update({k: v for k, v in extra.items() if v is not None})
    return m


def condition(ctype: str, status: str, reason: str, message: str, at: str, generation: int = 1) -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": at,
            "observedGeneration": generation}


def set_condition(obj: dict[str, Any], cond: dict[str, Any]) -> None:
    """Replace the condition of the same type (listMapKey ``type``), keeping the others' order."""
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    for i, c in enumerate(conds):
        if c["type"] == cond["type"]:
            if c["status"] == cond["status"]:
                cond = dict(cond, lastTransitionTime=c["lastTransitionTime"])
            conds[i] = cond
            return
    conds.append(cond)


def owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


# --- Kueue setup ---------------------------------------------------------------------------------------------

def topology(created: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": f"{KUEUE}/v1beta2", "kind": "Topology", "metadata": meta(TOPOLOGY, uid, created),
            "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": RACK_LABEL}, {"nodeLabel": HOST_LABEL}]}}


def resource_flavor(created: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ResourceFlavor", "metadata": meta(FLAVOR, uid, created),
            "spec": {"nodeLabels": {NODE_GROUP_LABEL: "tas-group"}, "topologyName": TOPOLOGY,
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}


def cluster_queue(name: str, gpus: int, created: str, uid: str, preemption: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
            {"name": FLAVOR, "resources": [
                {"name": "cpu", "nominalQuota": gpus * 24}, {"name": "memory", "nominalQuota": f"{gpus * 256}Gi"},
                {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}],
        "queueingStrategy": "BestEffortFIFO",
    }
    if preemption:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"}
    return {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ClusterQueue", "metadata": meta(name, uid, created),
            "spec": spec,
            "status": {"pendingWorkloads": 0, "reservingWorkloads": 0, "admittedWorkloads": 0,
                       "conditions": [condition("Active", "True", "Ready", "Can admit new workloads", created)]}}


def local_queue(name: str, namespace: str, cq: str, created: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": f"{KUEUE}/v1beta2", "kind": "LocalQueue", "metadata": meta(name, uid, created, namespace),
            "spec": {"clusterQueue": cq},
            "status": {"pendingWorkloads": 0, "reservingWorkloads": 0, "admittedWorkloads": 0,
                       "conditions": [condition("Active", "True", "Ready", "Can submit new workloads to "
                                                "localQueue", created)]}}


# --- jobs ----------------------------------------------------------------------------------------------------

def tas_annotations(required: str | None, preferred: bool) -> dict[str, str]:
    if required is None:
        return {}
    key = "kueue.x-k8s.io/podset-preferred-topology" if preferred else "kueue.x-k8s.io/podset-required-topology"
    return {key: required}


def container(gpus: int, image: str = IMAGE) -> dict[str, Any]:
    res = {"cpu": str(gpus * 12), "memory": f"{gpus * 128}Gi", "nvidia.com/gpu": str(gpus)}
    return {"name": "trainer", "image": image, "command": ["torchrun"],
            "args": ["--nnodes=$(WORLD_SIZE)", "--nproc-per-node=8", "train.py"],
            "resources": {"requests": res, "limits": {"nvidia.com/gpu": str(gpus)}}}


# What the start-up failures reference (reference field/pod_create-config-and-mount-errors.yaml).
MISSING_SECRET = "wandb-api-key"
MISSING_CONFIGMAP = "dataset-cfg"
CONFIG_VOLUME = "dataset-config"


def pod_template(job: Any) -> dict[str, Any]:
    labels: dict[str, str] = {}
    annotations = tas_annotations(job.required, job.preferred) if job.kueue else {}
    ctr = container(job.gpus_per_pod, getattr(job, "image", IMAGE))
    spec: dict[str, Any] = {"restartPolicy": getattr(job, "restart_policy", "Never"), "containers": [ctr],
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    startup = getattr(job, "startup", None)
    if startup == "config_error":  # env from a Secret that does not exist
        ctr["env"] = [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": MISSING_SECRET,
                                                                                "key": "api-key"}}}]
    elif startup == "mount":  # a ConfigMap volume whose ConfigMap does not exist
        ctr["volumeMounts"] = [{"name": CONFIG_VOLUME, "mountPath": "/etc/dataset", "readOnly": True}]
        spec["volumes"] = [{"name": CONFIG_VOLUME, "configMap": {"name": MISSING_CONFIGMAP, "defaultMode": 420}}]
    if job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    if job.gang == "coscheduling":
        labels[COSCHED_LABEL] = job.pod_group
        spec["schedulerName"] = "scheduler-plugins-scheduler"
    elif job.gang == "volcano":
        annotations[VOLCANO_ANNOTATION] = job.pod_group
        spec["schedulerName"] = "volcano"
    elif job.gang == "native" and job.k8s == "1.35":
        spec["workloadRef"] = {"name": job.workload, "podGroup": "workers"}  # + podGroupReplicaKey per pod
    elif job.gang == "native":
        spec["schedulingGroup"] = {"podGroupName": job.pod_group}
    out: dict[str, Any] = {"metadata": {}, "spec": spec}
    if labels:
        out["metadata"]["labels"] = labels
    if annotations:
        out["metadata"]["annotations"] = annotations
    return out


def batch_job(job: Any, created: str) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": job.queue} if job.kueue else {}
    if job.priority_class:
        labels["kueue.x-k8s.io/priority-class"] = job.priority_class
    spec: dict[str, Any] = {"parallelism": job.pods, "completions": job.pods, "completionMode": "Indexed",
                            "backoffLimit": getattr(job, "backoff_limit", 0), "suspend": job.kueue,
                            "template": pod_template(job)}
    if getattr(job, "ignore_disruptions", False):  # a drained or preempted pod does not count as a failure
        spec["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [
            {"type": "DisruptionTarget", "status": "True"}]}]}
        spec["podReplacementPolicy"] = "Failed"  # the default with a podFailurePolicy
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": meta(job.name, job.uid, created, job.namespace, labels=labels or None),
            "spec": spec, "status": {}}


def jobset(job: Any, created: str) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": job.queue} if job.kueue else {}
    spec: dict[str, Any] = {"suspend": job.kueue, "replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
        "spec": {"parallelism": job.pods, "completions": job.pods, "backoffLimit": 0, "completionMode": "Indexed",
                 "template": pod_template(job)}}}]}
    if getattr(job, "children", False):  # no rules: any child Job failure restarts the JobSet, 3 times at most
        spec["failurePolicy"] = {"maxRestarts": 3}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": meta(job.name, job.uid, created, job.namespace, labels=labels or None),
            "spec": spec, "status": {}}


def child_job(job: Any, created: str, uid: str, attempt: int) -> dict[str, Any]:
    """A JobSet's child Job ``<jobset>-workers-0`` as the JobSet controller creates it (one per restart attempt)."""
    labels = {"jobset.sigs.k8s.io/jobset-name": job.name, "jobset.sigs.k8s.io/replicatedjob-name": "workers",
              "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/restart-attempt": str(attempt)}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": meta(f"{job.name}-workers-0", uid, created, job.namespace, labels=labels,
                             ownerReferences=[owner(*_job_owner(job))]),
            "spec": {"parallelism": job.pods, "completions": job.pods, "completionMode": "Indexed", "backoffLimit": 0,
                     "suspend": False, "template": pod_template(job)},
            "status": {"active": job.pods, "ready": 0, "startTime": created}}


def workload_name(job: Any) -> str:
    """Kueue's deterministic name: ``<kind>-<job>-<first 5 hex of sha1(Kind, Group, name, uid)>``."""
    group = "batch" if job.kind == "Job" else "jobset.x-k8s.io"
    digest = hashlib.sha1(f"{job.kind}\n{group}\n{job.name}\n{job.uid}".encode()).hexdigest()[:5]
    return f"{job.kind.lower()}-{job.name}-{digest}"


def podset_name(job: Any) -> str:
    return "main" if job.kind == "Job" else "workers"


def workload(job: Any, created: str) -> dict[str, Any]:
    api = job.kueue_api
    tpl = pod_template(job)
    podset: dict[str, Any] = {"name": podset_name(job), "count": job.pods, "template": tpl}
    if job.required and job.kueue:
        req: dict[str, Any] = {"preferred" if job.preferred else "required": job.required,
                               "podIndexLabel": "batch.kubernetes.io/job-completion-index"}
        if job.kind == "JobSet":
            req.update({"subGroupIndexLabel": "jobset.sigs.k8s.io/job-index", "subGroupCount": 1})
        podset["topologyRequest"] = req
    spec: dict[str, Any] = {"podSets": [podset], "queueName": job.queue, "active": True, "priority": job.priority}
    if job.priority_class:
        if api == "v1beta2":
            spec["priorityClassRef"] = {"group": KUEUE, "kind": "WorkloadPriorityClass", "name": job.priority_class}
        else:
            spec["priorityClassName"] = job.priority_class
            spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    api_version = "batch/v1" if job.kind == "Job" else "jobset.x-k8s.io/v1alpha2"
    return {"apiVersion": f"{KUEUE}/{api}", "kind": "Workload",
            "metadata": meta(job.workload, job.wl_uid, created, job.namespace,
                             labels={"kueue.x-k8s.io/job-uid": job.uid},
                             ownerReferences=[owner(api_version, job.kind, job.name, job.uid)],
                             finalizers=["kueue.x-k8s.io/resource-in-use"]),
            "spec": spec, "status": {}}


def topology_assignment(api: str, levels: list[str], domains: list[tuple[list[str], int]]) -> dict[str, Any]:
    """Encode domains (values per level, pod count) as v1beta1 ``domains`` or v1beta2 ``slices``.

    v1beta2 is written as one slice per run of domains sharing a name prefix, like Kueue's
    hostname-prefix encoder (``TASAssignmentsEncodingByHostnamePrefix``).
    """
    if api == "v1beta1":
        return {"levels": levels, "domains": [{"values": v, "count": c} for v, c in domains]}
    slices = []
    runs: list[list[tuple[list[str], int]]] = []
    for d in domains:
        if runs and _prefix(runs[-1][0][0][-1]) == _prefix(d[0][-1]):
            runs[-1].append(d)
        else:
            runs.append([d])
    for run in runs:
        per_level = []
        for lvl in range(len(levels)):
            vals = [v[lvl] for v, _ in run]
            if len(set(vals)) == 1:
                per_level.append({"universal": vals[0]})
            else:
                p = _prefix(vals[0])
                per_level.append({"individual": {"prefix": p, "roots": [v[len(p):] for v in vals]}})
        counts = [c for _, c in run]
        pod_counts: dict[str, Any] = ({"universal": counts[0]} if len(set(counts)) == 1
                                      else {"individual": counts})
        slices.append({"domainCount": len(run), "valuesPerLevel": per_level, "podCounts": pod_counts})
    return {"levels": levels, "slices": slices}


def _prefix(value: str) -> str:
    return value.rstrip("0123456789")


def admission(job: Any, cq: str) -> dict[str, Any]:
    psa: dict[str, Any] = {
        "name": podset_name(job), "count": job.pods,
        "flavors": {"cpu": FLAVOR, "memory": FLAVOR, "nvidia.com/gpu": FLAVOR},
        "resourceUsage": {"cpu": str(job.pods * job.gpus_per_pod * 12),
                          "memory": f"{job.pods * job.gpus_per_pod * 128}Gi",
                          "nvidia.com/gpu": str(job.pods * job.gpus_per_pod)},
    }
    if job.required:
        # Topology's lowest level is the hostname, so only that level is stored.
        domains = [([n.name], 1) for n in job.nodes]
        psa["topologyAssignment"] = topology_assignment(job.kueue_api, [HOST_LABEL], domains)
    return {"clusterQueue": cq, "podSetAssignments": [psa]}


def resource_requests(job: Any) -> list[dict[str, Any]]:
    return [{"name": podset_name(job), "resources": {"cpu": str(job.pods * job.gpus_per_pod * 12),
                                                      "memory": f"{job.pods * job.gpus_per_pod * 128}Gi",
                                                      "nvidia.com/gpu": str(job.pods * job.gpus_per_pod)}}]


# --- gang objects --------------------------------------------------------------------------------------------

def coscheduling_podgroup(job: Any, created: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": meta(job.pod_group, job.pg_uid, created, job.namespace,
                             ownerReferences=[owner(*_job_owner(job))]),
            "spec": {"minMember": job.pods, "scheduleTimeoutSeconds": job.schedule_timeout},
            "status": {"phase": "Pending"}}


def volcano_podgroup(job: Any, created: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": meta(job.pod_group, job.pg_uid, created, job.namespace,
                             ownerReferences=[owner(*_job_owner(job))]),
            "spec": {"minMember": job.pods, "queue": "default",
                     "minResources": {"nvidia.com/gpu": str(job.pods * job.gpus_per_pod)}},
            "status": {"phase": "Pending"}}


def _policy(job: Any) -> dict[str, Any]:
    return {"basic": {}} if job.native_policy == "basic" else {"gang": {"minCount": job.pods}}


def native_workload(job: Any, created: str) -> dict[str, Any]:
    if job.k8s == "1.35":  # v1alpha1: groups are entries of spec.podGroups, the gang policy applies per replica
        return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                "metadata": meta(job.workload, job.wl_uid, created, job.namespace),
                "spec": {"controllerRef": {"apiGroup": "batch" if job.kind == "Job" else "jobset.x-k8s.io",
                                           "kind": job.kind, "name": job.name},
                         "podGroups": [{"name": "driver", "policy": {"basic": {}}},
                                       {"name": "workers",
                                        "policy": {"gang": {"minCount": max(1, job.pods // job.replicas)}}}]}}
    if job.k8s == "1.37":
        # The Job controller's Workload (owned by the Job) or a JobSet's (a composite over the child Job's group).
        ref = {"apiGroup": "batch" if job.kind == "Job" else "jobset.x-k8s.io", "kind": job.kind, "name": job.name}
        tpl = {"name": job.template, "schedulingPolicy": _policy(job), "schedulingConstraints": None}
        spec: dict[str, Any] = {"controllerRef": ref, "podGroupTemplates": [tpl]}
        if job.composite:
            spec = {"controllerRef": ref, "podGroupTemplates": None, "compositePodGroupTemplates": [
                {"name": "root", "schedulingPolicy": {"gang": {"minGroupCount": 1}}, "podGroupTemplates": [tpl]}]}
        return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
                "metadata": meta(job.workload, job.wl_uid, created, job.namespace,
                                 ownerReferences=[owner(*_job_owner(job))]),
                "spec": spec}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
            "metadata": meta(job.name, job.wl_uid, created, job.namespace),
            "spec": {"controllerRef": {"apiGroup": "batch" if job.kind == "Job" else "jobset.x-k8s.io",
                                       "kind": job.kind, "name": job.name},
                     "podGroupTemplates": [{"name": "worker", "schedulingPolicy": {"gang": {"minCount": job.pods}}}]}}


def delegated_child_job(job: Any, created: str) -> dict[str, Any]:
    """A 1.37 JobSet's child Job that delegates to the JobSet's Workload: the Job controller gives it a PodGroup
    only (managePodGroupOnly), found by the annotation naming the Workload's template."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": meta(f"{job.name}-workers-0", job.child_uid, created, job.namespace,
                             annotations={"scheduling.k8s.io/group-template-name": job.template},
                             labels={"jobset.sigs.k8s.io/jobset-name": job.name},
                             ownerReferences=[owner(*_job_owner(job))]),
            "spec": {"parallelism": job.pods, "completions": job.pods, "completionMode": "Indexed", "backoffLimit": 0,
                     "template": pod_template(job)}}


def native_composite(job: Any, created: str) -> dict[str, Any]:
    """1.37 CompositePodGroup (v1alpha3 only); the 1.37 scheduler writes no status on it."""
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
            "metadata": meta(job.composite, str(uuid.uuid5(uuid.UUID(job.wl_uid), "root")), created, job.namespace,
                             ownerReferences=[owner(*_job_owner(job))]),
            "spec": {"workloadRef": {"workloadName": job.workload, "templateName": "root"},
                     "schedulingPolicy": {"gang": {"minGroupCount": 1}}, "disruptionMode": {"all": {}}},
            "status": {}}


def native_podgroup(job: Any, created: str) -> dict[str, Any]:
    if job.k8s == "1.37":
        if job.kind == "Job":  # controller ref to the Job, a non-controller ref to its Workload
            owners = [owner(*_job_owner(job)),
                      {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "name": job.workload,
                       "uid": job.wl_uid}]
        else:  # the JobSet's child Job, delegated: no ref to the parent's Workload
            owners = [owner("batch/v1", "Job", f"{job.name}-workers-0", job.child_uid)]
        spec: dict[str, Any] = {"workloadRef": {"workloadName": job.workload, "templateName": job.template},
                                "schedulingPolicy": _policy(job), "disruptionMode": {"single": {}},
                                "priority": 0, "preemptionPolicy": "PreemptLowerPriority"}  # the API's defaults
        if job.composite:
            spec["parentCompositePodGroupName"] = job.composite
        return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                "metadata": meta(job.pod_group, job.pg_uid, created, job.namespace, ownerReferences=owners,
                                 finalizers=["scheduling.k8s.io/podgroup-protection"]),
                "spec": spec, "status": {}}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": meta(f"{job.name}-worker-0", job.pg_uid, created, job.namespace,
                             finalizers=["scheduling.k8s.io/podgroup-protection"]),
            "spec": {"podGroupTemplateRef": {"workload": {"workloadName": job.name, "podGroupTemplateName": "worker"}},
                     "schedulingPolicy": {"gang": {"minCount": job.pods}}, "disruptionMode": "Pod"},
            "status": {}}


def _job_owner(job: Any) -> tuple[str, str, str, str]:
    api = "batch/v1" if job.kind == "Job" else "jobset.x-k8s.io/v1alpha2"
    return api, job.kind, job.name, job.uid


# --- pods ----------------------------------------------------------------------------------------------------

def pod(job: Any, index: int, name: str, uid: str, created: str, cq: str | None) -> dict[str, Any]:
    tpl = pod_template(job)
    labels = dict(tpl["metadata"].get("labels", {}))
    annotations = dict(tpl["metadata"].get("annotations", {}))
    labels.update({"batch.kubernetes.io/job-completion-index": str(index), "batch.kubernetes.io/job-name":
                   job.name if job.kind == "Job" else f"{job.name}-workers-0", "training.example.com/rank": str(index)})
    annotations["batch.kubernetes.io/job-completion-index"] = str(index)
    if job.kind == "JobSet":
        labels.update({"jobset.sigs.k8s.io/jobset-name": job.name, "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                       "jobset.sigs.k8s.io/job-index": "0"})
        if getattr(job, "children", False):
            labels["jobset.sigs.k8s.io/restart-attempt"] = "0"
        own = owner("batch/v1", "Job", f"{job.name}-workers-0", job.child_uid)
    else:
        own = owner("batch/v1", "Job", job.name, job.uid)
    spec = tpl["spec"]
    if "workloadRef" in spec:  # 1.35: the replica this pod's gang is (pods // replicas per replica)
        spec["workloadRef"]["podGroupReplicaKey"] = str(index // max(1, job.pods // job.replicas))
    if job.kueue:
        labels["kueue.x-k8s.io/podset"] = podset_name(job)
        labels["kueue.x-k8s.io/local-queue-name"] = job.queue
        if cq:
            labels["kueue.x-k8s.io/cluster-queue-name"] = cq
        annotations["kueue.x-k8s.io/workload"] = job.workload
        spec["nodeSelector"] = dict(spec.get("nodeSelector", {}), **{NODE_GROUP_LABEL: "tas-group"})
        if job.required:
            spec["schedulingGates"] = [{"name": TAS_GATE}]
    spec.setdefault("schedulerName", "default-scheduler")
    # Added by the DefaultTolerationSeconds admission plugin: the taint manager waits 300 s on a lost node.
    spec["tolerations"] = spec.get("tolerations", []) + [
        {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for k in ("not-ready", "unreachable")]
    spec["priority"] = job.priority
    if job.priority_class:
        spec["priorityClassName"] = job.priority_class
    m = meta(name, uid, created, job.namespace, labels=labels, annotations=annotations, ownerReferences=[own])
    m.pop("generation")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": spec,
            "status": {"phase": "Pending", "qosClass": "Burstable"}}


def pod_condition(ctype: str, status: str, at: str, reason: str | None = None, message: str | None = None) -> dict:
    c: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": at}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


# --- events --------------------------------------------------------------------------------------------------

def event(involved: dict[str, Any], etype: str, reason: str, message: str, at: str, uid: str, component: str,
          count: int = 1, first: str | None = None, action: str | None = None, host: str | None = None,
          field_path: str | None = None) -> dict[str, Any]:
    """A core/v1 Event (the view ``kubectl get events`` and most watchers use); a kubelet's names its ``host``."""
    im = involved["metadata"]
    name = f"{im['name']}.{uid.replace('-', '')[:16]}"
    ev: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": im.get("namespace", "default"), "uid": uid, "creationTimestamp":
                     first or at},
        "involvedObject": {"apiVersion": involved["apiVersion"], "kind": involved["kind"], "name": im["name"],
                           "namespace": im.get("namespace"), "uid": im["uid"]},
        "type": etype, "reason": reason, "message": message, "source": {"component": component},
        "reportingComponent": component, "reportingInstance": f"{component}-7d9f8b6c5-x2k4p",
        "firstTimestamp": first or at, "lastTimestamp": at, "count": count, "eventTime": None,
    }
    if action:
        ev["action"] = action
    if host:
        ev["source"]["host"] = host
        ev["reportingInstance"] = host
    if field_path:
        ev["involvedObject"]["fieldPath"] = field_path
    if im.get("namespace") is None:
        ev["involvedObject"].pop("namespace")
    return ev
