"""The jobs teams submit (issue 33): KubeRay RayCluster / RayJob, Kubeflow Trainer TrainJob, PyTorchJob, MPIJob,
LeaderWorkerSet and Kueue plain-pod groups. One job per submitted object, found by the objects' own links (never a
phantom job per RayCluster, JobSet, launcher Job, StatefulSet or pod), its gang size from its spec, and the classes
holding for it: a healthy run, a gang that cannot assemble, a worker crash.

Every story is built twice in one lake: watched live (namespace ``field``) and first seen in an initial list at
CAPTURE, everything ADDED, history only in the objects' timestamps (namespace ``mol``). Shapes:
tests/fixtures/jobkinds (upstream samples, sources in its README). Real DuckLake, real models.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from reports import diagnose
from tests.sql.fieldfix import NS, Story, bind, iso, run, setup, terminate
from tests.sql.lakefix import Raw, build_lake, cond, failed_scheduling, pod, workload

KINDS = Path(__file__).resolve().parents[1] / "fixtures" / "jobkinds" / "objects.yaml"
CAPTURE = 20.0
END = 30.0
GANG = {"RayCluster": 3, "RayJob": 3, "TrainJob": 3, "MPIJob": 3, "PyTorchJob": 3, "LeaderWorkerSet": 4,
        "PodGroup": 3}
SHORT = {"RayCluster": "rc", "RayJob": "rj", "TrainJob": "tj", "MPIJob": "mpi", "PyTorchJob": "pt",
         "LeaderWorkerSet": "lws", "PodGroup": "pg"}
NODES = 12


def _sample(kind: str, name: str) -> dict[str, Any]:
    obj = copy.deepcopy(next(d for d in yaml.safe_load_all(KINDS.read_text()) if d["kind"] == kind))
    obj["metadata"] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": iso(1)}
    return obj


def _owner(kind: str, name: str, api: str, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": f"uid-{name}", "controller": controller}


def _pod(name: str, labels: dict[str, str], owners: list[dict[str, Any]], gpus: int = 1,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    p = pod(NS, name, "Job", "x", None, "Pending", gpus=gpus, labels=labels, annotations=annotations or {},
            spec={"restartPolicy": "Never"})
    p["metadata"]["ownerReferences"] = owners
    p["metadata"]["creationTimestamp"] = iso(1)
    p["status"] = {"phase": "Pending", "conditions": []}
    return p


def _members(kind: str, job: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(objects, pods) of one submitted job of ``kind`` as its controller makes them."""
    objs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    if kind in ("RayCluster", "RayJob"):
        top = _sample(kind, job)
        objs.append(top)
        cluster = job
        extra: dict[str, str] = {}
        if kind == "RayJob":
            cluster = f"{job}-raycluster-x8k2f"
            rc = _sample("RayCluster", cluster)
            extra = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": job}
            rc["metadata"]["labels"] = dict(extra)
            rc["metadata"]["ownerReferences"] = [_owner("RayJob", job, "ray.io/v1")]
            submitter = {"apiVersion": "batch/v1", "kind": "Job",
                         "metadata": {"name": job, "namespace": NS, "uid": f"uid-job-{job}", "labels": dict(extra),
                                      "creationTimestamp": iso(1), "ownerReferences": [_owner("RayJob", job,
                                                                                              "ray.io/v1")]},
                         "spec": {"backoffLimit": 2}, "status": {"active": 1}}
            objs += [rc, submitter]
            pods.append(_pod(f"{job}-submit-q8r2t", {"job-name": job}, [_owner("Job", job, "batch/v1")], gpus=0))
        owner = [_owner("RayCluster", cluster, "ray.io/v1")]
        pods.append(_pod(f"{cluster}-head-7vx4k", {"ray.io/cluster": cluster, "ray.io/node-type": "head",
                                                  "ray.io/group": "headgroup"}, owner, gpus=0))
        for sfx in ("k2m9p", "w8d3s"):
            pods.append(_pod(f"{cluster}-gpu-group-worker-{sfx}", {"ray.io/cluster": cluster,
                                                                    "ray.io/node-type": "worker",
                                                                    "ray.io/group": "gpu-group"}, owner))
    elif kind == "TrainJob":
        objs.append(_sample("TrainJob", job))
        js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": job, "namespace": NS, "uid": f"uid-js-{job}", "creationTimestamp": iso(1),
                           "ownerReferences": [_owner("TrainJob", job, "trainer.kubeflow.org/v1alpha1")]},
              "spec": {"replicatedJobs": [{"name": "node", "replicas": 1}]}, "status": {}}
        child = {"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": f"{job}-node-0", "namespace": NS, "uid": f"uid-{job}-node-0",
                              "creationTimestamp": iso(1),
                              "labels": {"jobset.sigs.k8s.io/jobset-name": job,
                                         "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"},
                              "ownerReferences": [_owner("JobSet", job, "jobset.x-k8s.io/v1alpha2")]},
                 "spec": {"backoffLimit": 0, "completions": 3, "parallelism": 3}, "status": {"active": 3}}
        objs += [js, child]
        for i in range(3):
            pods.append(_pod(f"{job}-node-0-{i}-b7x2m", {"jobset.sigs.k8s.io/jobset-name": job,
                                                         "batch.kubernetes.io/job-completion-index": str(i)},
                             [_owner("Job", f"{job}-node-0", "batch/v1")]))
    elif kind == "MPIJob":
        objs.append(_sample("MPIJob", job))
        launcher = {"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": f"{job}-launcher", "namespace": NS, "uid": f"uid-{job}-launcher",
                                 "creationTimestamp": iso(1),
                                 "ownerReferences": [_owner("MPIJob", job, "kubeflow.org/v2beta1")]},
                    "spec": {"backoffLimit": 6}, "status": {"active": 1}}
        objs.append(launcher)
        base = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/operator-name": "mpi-operator"}
        pods.append(_pod(f"{job}-launcher-5tq9z", {**base, "training.kubeflow.org/job-role": "launcher"},
                         [_owner("Job", f"{job}-launcher", "batch/v1")], gpus=0))
        for i in range(2):
            pods.append(_pod(f"{job}-worker-{i}", {**base, "training.kubeflow.org/job-role": "worker",
                                                   "training.kubeflow.org/replica-index": str(i)},
                             [_owner("MPIJob", job, "kubeflow.org/v2beta1")]))
    elif kind == "PyTorchJob":
        objs.append(_sample("PyTorchJob", job))
        for role, i in (("master", 0), ("worker", 0), ("worker", 1)):
            pods.append(_pod(f"{job}-{role}-{i}", {"training.kubeflow.org/job-name": job,
                                                   "training.kubeflow.org/operator-name": "pytorchjob-controller",
                                                   "training.kubeflow.org/replica-type": role,
                                                   "training.kubeflow.org/replica-index": str(i)},
                             [_owner("PyTorchJob", job, "kubeflow.org/v1")]))
    elif kind == "LeaderWorkerSet":
        objs.append(_sample("LeaderWorkerSet", job))
        for g in range(2):
            for w in range(2):
                name = f"{job}-{g}" if w == 0 else f"{job}-{g}-{w}"
                sts = job if w == 0 else f"{job}-{g}"
                pods.append(_pod(name, {"leaderworkerset.sigs.k8s.io/name": job,
                                        "leaderworkerset.sigs.k8s.io/group-index": str(g),
                                        "leaderworkerset.sigs.k8s.io/worker-index": str(w)},
                                 [_owner("StatefulSet", sts, "apps/v1")]))
    else:  # Kueue plain-pod group: no controller; its Workload is owned by its pods
        names = [f"{job}-{i}" for i in range(3)]
        for n in names:
            pods.append(_pod(n, {"kueue.x-k8s.io/pod-group-name": job, "kueue.x-k8s.io/queue-name": "team",
                                 "kueue.x-k8s.io/managed": "true"}, [],
                             annotations={"kueue.x-k8s.io/pod-group-total-count": "3"}))
        w = workload(NS, job, "Pod", names[0], 3,
                     [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", 1),
                      cond("Admitted", "True", "Admitted", "The workload is admitted", 1)], cluster_queue="cq")
        w["metadata"]["ownerReferences"] = [_owner("Pod", n, "v1", controller=False) for n in names]
        w["metadata"]["creationTimestamp"] = iso(1)
        objs.append(w)
    return objs, pods


def _story(s: Story, kind: str, how: str, start_node: int) -> None:
    job = f"{SHORT[kind]}-{how}"
    objs, pods = _members(kind, job)
    for o in objs:
        s.add(1, o)
    for i, p in enumerate(pods):
        s.add(1.1, p)
        n = f"f{(start_node + i) % NODES + 1}"
        if how == "stuck" and i == len(pods) - 1:  # the last member never fits
            msg = f"0/{NODES} nodes are available: {NODES} Insufficient nvidia.com/gpu."
            p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                          "message": msg, "lastTransitionTime": iso(1.2)}]
            s.emit(1.2, p)
            fs = failed_scheduling(NS, p["metadata"]["name"], msg, 1.2)
            s.add(1.2, fs)
            fs = copy.deepcopy(fs)
            fs.update(count=40, lastTimestamp=iso(END - 1))
            s.emit(END - 1, fs)
            continue
        s.emit(1.15, bind(p, n, 1.15))
        s.emit(1.6, run(p, 1.6))
    if how == "crash":  # a GPU worker OOMs, restarts, OOMs again: CrashLoopBackOff
        p = next(p for p in reversed(pods) if p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
                 != "0")
        p["spec"]["restartPolicy"] = "OnFailure"
        for restarts, t in enumerate((12, 16), start=1):
            s.emit(t, terminate(p, t, 137, "OOMKilled"))
            last = p["status"]["containerStatuses"][0]["state"]["terminated"]
            cs = p["status"]["containerStatuses"][0]
            cs.update(restartCount=restarts, lastState={"terminated": last},
                      state={"waiting": {"reason": "CrashLoopBackOff",
                                         "message": "back-off 10s restarting failed container=trainer"}})
            s.emit(t + 0.1, p)
            if t < 16:
                run(p, t + 0.5, restarts)
                p["status"]["containerStatuses"][0]["lastState"] = {"terminated": last}
                s.emit(t + 0.5, p)


def _ray_pg(s: Story, how: str, start_node: int) -> None:
    """A RayCluster whose gang (head + 2 workers) runs from 1.6; a placement group goes PENDING at 5 and stays
    (``stuck``: the autoscaler's extra worker cannot schedule), is placed at 7 (``placed``: within the 5 min
    timeout), or stays while the job's throughput holds its baseline (``busy``: Ray is making progress)."""
    job = f"rc-pg-{how}"
    objs, pods = _members("RayCluster", job)
    objs[0]["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 3
    for o in objs:
        s.add(1, o)
    for i, p in enumerate(pods):
        s.add(1.1, p)
        s.emit(1.15, bind(p, f"f{(start_node + i) % NODES + 1}", 1.15))
        s.emit(1.6, run(p, 1.6))
    head = pods[0]["metadata"]["name"]
    if how == "stuck":  # the autoscaler adds a worker for the placement group's bundles; it cannot fit
        extra = _members("RayCluster", job)[1][-1]
        extra["metadata"]["name"] = f"{job}-gpu-group-worker-z9q4c"
        msg = f"0/{NODES} nodes are available: {NODES} Insufficient nvidia.com/gpu."
        extra["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                          "message": msg, "lastTransitionTime": iso(5.1)}]
        s.add(5.1, extra)
        s.add(5.1, failed_scheduling(NS, extra["metadata"]["name"], msg, 5.1))
    t = 2.0
    while t <= END:
        pending = 1 if t >= 5 and (how != "placed" or t < 7) else 0
        s.sample(t, "ray_placement_groups", {"State": "PENDING", "namespace": NS, "pod": head,
                                             "SessionName": "session_2026-11-01_00-01-00_000000_1"}, pending)
        if how == "busy":
            s.sample(t, "train_tokens_per_second", {"namespace": NS, "pod": head}, 1000.0)
        t += 0.25


def _renamespace(s: Story, ns: str) -> Story:
    out = Story()
    for t, i, etype, obj in s.events:
        text = json.dumps(obj).replace(f'"{NS}"', f'"{ns}"').replace('"uid-', f'"uid-{ns}-')
        out.events.append((t, i, etype, json.loads(text)))
    out.samples = [(t, m, {k: ns if v == NS else v for k, v in labels.items()}, v)
                   for t, m, labels, v in s.samples]
    return out


def _build(raw: Raw) -> None:
    s = Story()
    setup(s, NODES)
    for k, kind in enumerate(GANG):
        for h, how in enumerate(("ok", "stuck", "crash")):
            _story(s, kind, how, 3 * k + h)
    for h, how in enumerate(("stuck", "placed", "busy")):
        _ray_pg(s, how, h)
    s.emit(END, next(o for _, _, _, o in s.events if o["kind"] == "Node"))  # the data's "now"
    s.write(raw)
    _renamespace(s, "mol").write(raw, capture=CAPTURE)


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    _, c, _ = build_lake(tmp_path_factory.mktemp("kinds") / "data", _build)
    yield c
    c.close()


@pytest.mark.parametrize("ns", [NS, "mol"])
def test_one_job_per_submitted_object_no_phantoms(con, ns: str) -> None:
    rows = con.execute("SELECT job, job_kind, gang_size FROM intermediate.int_jobs WHERE namespace = ? ORDER BY job",
                       [ns]).fetchall()
    want = sorted([(f"{SHORT[k]}-{h}", k, GANG[k]) for k in GANG for h in ("ok", "stuck", "crash")]
                  + [(f"rc-pg-{h}", "RayCluster", 3) for h in ("stuck", "placed", "busy")])
    assert sorted(rows) == want  # no RayCluster of a RayJob, JobSet, launcher / submitter Job, StatefulSet, pod
    jobs = {r[0] for r in con.execute("SELECT job FROM marts.jobs WHERE namespace = ?", [ns]).fetchall()}
    assert jobs == {w[0] for w in want}


@pytest.mark.parametrize("ns", [NS, "mol"])
def test_every_pod_belongs_to_its_submitted_job(con, ns: str) -> None:
    rows = con.execute("SELECT job, job_kind, count(*) FROM intermediate.int_pod_jobs WHERE namespace = ? "
                       "GROUP BY ALL ORDER BY 1", [ns]).fetchall()
    pods = {r[0]: r[2] for r in rows}
    assert pods["rj-ok"] == 4  # head + 2 workers + the submitter Job's pod
    assert pods["mpi-ok"] == 3 and pods["lws-ok"] == 4 and pods["pg-ok"] == 3 and pods["tj-ok"] == 3
    assert {r[1] for r in rows} == set(GANG)


def _classes(con, ns: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in diagnose.findings(con, include_healthy=True):
        if r["namespace"] == ns:
            out.setdefault(r["job"], []).append(r["root_cause"])
    return out


@pytest.mark.parametrize("ns", [NS, "mol"])
@pytest.mark.parametrize("kind", list(GANG))
def test_classes_hold_for_every_kind(con, ns: str, kind: str) -> None:
    classes = _classes(con, ns)
    short = SHORT[kind]
    assert classes.get(f"{short}-ok", ["healthy"]) == ["healthy"], classes.get(f"{short}-ok")
    assert classes[f"{short}-stuck"] == ["gang_assembly"]
    assert "workload_crash" in classes[f"{short}-crash"]
    kinds = {r["job_kind"] for r in diagnose.findings(con)
             if r["namespace"] == ns and r["job"].startswith(short + "-") and not r["job"].startswith("rc-pg-")}
    assert kinds == {kind}


@pytest.mark.parametrize("ns", [NS, "mol"])
def test_ray_placement_group_pending_past_timeout_is_gang_assembly(con, ns: str) -> None:
    classes = _classes(con, ns)
    assert classes["rc-pg-stuck"] == ["gang_assembly"]
    f = next(r for r in diagnose.findings(con) if (r["namespace"], r["job"]) == (ns, "rc-pg-stuck"))
    ev = f["evidence"] if isinstance(f["evidence"], dict) else json.loads(f["evidence"])
    assert ev["ray_placement_groups_pending"] == 1 and ev["pending_since"].startswith("2026-11-01T00:05:00")
    assert ev["pending_s"] >= 24 * 60 and ev["placed_at"] is None and ev["pods_running"] == 3
    assert f["started_at"] == "2026-11-01T00:10:00Z" and f["ended_at"] is None
    assert "worker group gpu-group cannot scale" in ev["next_step"] and "FailedScheduling" in f["summary"]
    assert f["job_kind"] == "RayCluster"


@pytest.mark.parametrize("ns", [NS, "mol"])
def test_ray_placement_group_placed_in_time_or_with_progress_is_healthy(con, ns: str) -> None:
    classes = _classes(con, ns)
    assert classes["rc-pg-placed"] == ["healthy"]  # pending 2 min, within the 5 min gang timeout
    assert classes["rc-pg-busy"] == ["healthy"]  # pending, but the job makes progress at its baseline
    placed = con.execute("SELECT placed_at, timed_out FROM intermediate.int_ray_placement WHERE namespace = ? "
                         "AND job = 'rc-pg-placed'", [ns]).fetchall()
    assert len(placed) == 1 and placed[0][1] is False and placed[0][0] is not None
