"""Kubernetes 1.35 / 1.36 / 1.37 native gang objects as the API server serves them (issue 19), built from the
reference files in tests/fixtures/reference/gang: every scenario is judged for its job, its gang, its class and
the evidence, once watched live (objects seen as their own times pass) and once first seen in an initial
list at watch start (ADDED, history only in the objects' own timestamps)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline import lake, models
from reports import diagnose
from tests.sql.lakefix import Raw, iso, node
from tests.sql.refobjects import clone_pod, load, minutes_of, variant

CPG_FILE = "gang/k8s-1.37_compositepodgroup-v1alpha3_two-child-podgroups_pods.yaml"
JOB_FILE = "gang/k8s-1.37_job-spec-scheduling_workload-podgroup-pods.yaml"
STATUS_FILE = "gang/k8s-1.37_podgroup-v1beta1_status-conditions_disruptiontarget.yaml"
V135_FILE = "gang/k8s-1.35_workload-v1alpha1_two-podgroups_replica-keys.yaml"
END = 40.0
LIST_AT = 30.0  # the initial list of a collector that starts in the middle of the objects' lives


class Feed:
    """Emits objects live (at their own newest time) or, for the initial list, only each object's final
    state at LIST_AT."""

    def __init__(self, raw: Raw, initial_list: bool) -> None:
        self.raw, self.initial_list = raw, initial_list
        self.final: dict[tuple[str, str], dict[str, Any]] = {}

    def emit(self, obj: dict[str, Any], at: float | None = None, event_type: str = "ADDED") -> None:
        if self.initial_list:
            key = (obj["apiVersion"], obj["metadata"]["uid"])
            if event_type == "DELETED":
                self.final.pop(key, None)
                self.final[key] = {**obj, "_deleted": True}
            else:
                self.final[key] = obj
            return
        self.raw.event(at if at is not None else _newest(obj), obj, event_type)

    def flush(self) -> None:
        for obj in self.final.values():
            if obj.pop("_deleted", False):
                continue  # deleted before the collector started: never seen
            self.raw.event(LIST_AT, obj, "ADDED")


def _newest(obj: dict[str, Any]) -> float:
    times = [minutes_of(obj) if "creationTimestamp" in obj["metadata"] else 0.0]
    for c in obj.get("status", {}).get("conditions") or []:
        if c.get("lastTransitionTime"):
            times.append(minutes_of(c, "lastTransitionTime"))
    return max(times)


def _running(pod: dict[str, Any], node_name: str, at: float) -> dict[str, Any]:
    out = json.loads(json.dumps(pod))
    out["spec"]["nodeName"] = node_name
    out["status"] = {"phase": "Running", "startTime": iso(at),
                     "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(at)}],
                     "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": iso(at)}}}]}
    return out


def _both_versions(feed: Feed, obj: dict[str, Any], at: float | None = None) -> None:
    """1.37 serves one stored object as v1beta1 and v1alpha3: the collector may land both views."""
    feed.emit(obj, at)
    feed.emit(variant(obj, "\0", "\0", api_version="scheduling.k8s.io/v1alpha3"), at)


def _composite(feed: Feed, reference: Path) -> None:
    """llm-pretrain: a CompositePodGroup (minGroupCount 2) whose two child PodGroups cannot schedule.
    llm-ok: the same shapes, every child scheduled and running (must stay healthy)."""
    wl, cpg, pg_driver, pg_workers, pod_driver, pod_worker = load(reference, CPG_FILE, "2026-09-02T08:00:00Z")
    workers = [pod_worker] + [clone_pod(pod_worker, f"llm-pretrain-workers-0-{i}-x", f"w{i}-uid-llm", i)
                              for i in (1, 2, 3)]
    for ok in (False, True):
        rn = (lambda o: variant(o, "llm-pretrain", "llm-ok")) if ok else (lambda o: o)
        _both_versions(feed, rn(wl))
        feed.emit(rn(cpg))  # v1alpha3 only, empty status in the 1.37 snapshot
        for pg in (pg_driver, pg_workers):
            g = rn(pg)
            if ok:
                g["status"]["conditions"] = [{"type": "PodGroupInitiallyScheduled", "status": "True",
                                              "reason": "Scheduled", "message": "", "observedGeneration": 1,
                                              "lastTransitionTime": iso(1)}]
            _both_versions(feed, g)
        for i, p in enumerate([pod_driver] + workers):
            p = rn(p)
            if ok:
                feed.emit(p, 0.05)
                feed.emit(_running(p, f"gpu-{i}", 1.0), 1.0, "MODIFIED")
            else:
                feed.emit(p)


def _jobs_with_scheduling(feed: Feed, reference: Path) -> None:
    """bert-pretrain: a 1.37 Job with spec.scheduling (gang, minCount from parallelism 4), its Job-owned Workload
    and PodGroup (hashed names, no labels), four running pods. etl: no spec.scheduling, so the default `basic`
    policy (normal, not a fault). pipeline: a JobSet whose child Job got only a PodGroup pointing at the
    parent's Workload. orphan-pg-job: a Job-owned PodGroup whose Workload was never seen, no pods yet."""
    job, wl, pg, pod = load(reference, JOB_FILE, "2026-09-02T09:00:00Z")
    feed.emit(job)
    _both_versions(feed, wl)
    _both_versions(feed, pg)
    for i in range(4):
        p = clone_pod(pod, f"bert-pretrain-{i}-x7k2p", f"bert-pod-{i}", i) if i else pod
        feed.emit({**p, "status": {"phase": "Pending"}}, 0.05)
        feed.emit(_running(p, f"gpu-node-{17 + i}", 0.2), 0.2, "MODIFIED")

    basic = variant(job, "bert-pretrain", "etl")
    del basic["spec"]["scheduling"]
    basic["spec"]["parallelism"] = basic["spec"]["completions"] = 2
    feed.emit(basic)
    bwl = variant(wl, "bert-pretrain", "etl")
    bwl["spec"]["podGroupTemplates"][0]["schedulingPolicy"] = {"basic": {}}
    _both_versions(feed, bwl)
    bpg = variant(pg, "bert-pretrain", "etl")
    bpg["spec"]["schedulingPolicy"] = {"basic": {}}
    bpg["status"] = {}
    _both_versions(feed, bpg)
    for i in range(2):
        p = variant(clone_pod(pod, f"etl-{i}-x7k2p", f"etl-pod-{i}", i), "bert-pretrain", "etl")
        feed.emit({**p, "status": {"phase": "Pending"}}, 0.05)
        feed.emit(_running(p, f"cpu-node-{i}", 0.1 + i), 0.1 + i, "MODIFIED")

    # Delegated child Job: the JobSet owns the Workload; the child Job's PodGroup points at it, no ownerRef to it.
    pwl = variant(wl, "bert-pretrain", "pipeline")
    pwl["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                           "name": "pipeline", "uid": "js-pipeline", "controller": True}]
    pwl["spec"]["controllerRef"] = {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "pipeline"}
    _both_versions(feed, pwl)
    ppg = variant(pg, "bert-pretrain", "pipeline")
    ppg["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "pipeline-workers-0",
                                           "uid": "child-job-uid", "controller": True}]
    _both_versions(feed, ppg)
    for i in range(4):
        p = variant(clone_pod(pod, f"pipeline-workers-0-{i}", f"pipe-pod-{i}", i), "bert-pretrain", "pipeline")
        p["metadata"]["ownerReferences"][0].update(name="pipeline-workers-0", uid="child-job-uid")
        p["metadata"]["labels"] = {"batch.kubernetes.io/job-name": "pipeline-workers-0"}
        feed.emit({**p, "status": {"phase": "Pending"}}, 0.05)
        feed.emit(_running(p, f"gpu-node-{30 + i}", 0.3), 0.3, "MODIFIED")

    # Job-owned PodGroup, its Workload not (yet) seen, no pods: the Job is the job, not the PodGroup's hashed name.
    opg = variant(pg, "bert-pretrain", "orphan-pg-job")
    opg["status"] = {}
    _both_versions(feed, opg, 35.0)


def _conditions_and_preemption(feed: Feed, reference: Path) -> None:
    """infer-shard-a (serving): a PodGroup False, then True, then True with DisruptionTarget listed FIRST; one
    victim pod with DisruptionTarget PreemptionByScheduler, deleted, and its Preempted event."""
    first, second, third, victim = load(reference, STATUS_FILE, "2026-09-03T11:00:00Z")
    third["status"]["conditions"].reverse()  # list order is not guaranteed: never read conditions[0]
    for d, et in ((first, "ADDED"), (second, "MODIFIED"), (third, "MODIFIED")):
        for obj in (d, variant(d, "\0", "\0", api_version="scheduling.k8s.io/v1alpha3")):
            feed.emit(obj, event_type=et)
    owner = [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "infer",
              "uid": "lws-infer", "controller": True}]
    created = minutes_of(first)
    at_sched = minutes_of(second, "status.conditions.0.lastTransitionTime")
    for i in range(8):
        p = clone_pod(victim, f"infer-shard-a-{i}", f"infer-pod-{i}")
        p["metadata"].pop("deletionTimestamp", None)
        p["metadata"]["ownerReferences"] = owner
        p["metadata"]["creationTimestamp"] = iso(created)
        p["spec"].pop("nodeName")
        feed.emit({**p, "status": {"phase": "Pending"}}, created)
        feed.emit(_running(p, f"gpu-node-{i:02d}", at_sched), at_sched, "MODIFIED")
    vict = json.loads(json.dumps(victim))
    vict["metadata"].update(uid="infer-pod-3", ownerReferences=owner, creationTimestamp=iso(created))
    feed.emit(vict, event_type="MODIFIED")
    feed.emit(vict, event_type="DELETED")
    at = minutes_of(vict, "metadata.deletionTimestamp")
    feed.emit({"apiVersion": "events.k8s.io/v1", "kind": "Event",
               "metadata": {"name": "infer-shard-a-3.preempted", "namespace": "serving", "uid": "ev-preempted"},
               "regarding": {"kind": "Pod", "name": "infer-shard-a-3", "namespace": "serving"},
               "reason": "Preempted", "action": "Preempting", "type": "Normal", "eventTime": iso(at),
               "note": "Preempted by podgroup 0d1c-uid on node gpu-node-03"}, at)


def _replicas_135(feed: Feed, reference: Path) -> None:
    """hp-sweep (1.35 v1alpha1): driver (basic) and workers (gang minCount 4) per replica key. Replica 0 runs 5
    pods, replica 1 only 3 of 4: merged, 8 running would satisfy both gangs; per replica, #1 is not assembled.
    hp-ok: both replicas complete (healthy)."""
    wl, driver, w0, w1 = load(reference, V135_FILE, "2026-03-10T12:00:00Z")
    for name in ("hp-sweep", "hp-ok"):
        feed.emit(variant(wl, "hp-sweep", name))
        feed.emit(_running(variant(driver, "hp-sweep", name), "cpu-1", 0.5), 0.5)
        for key, tmpl, n in (("0", w0, 5), ("1", w1, 4)):
            for i in range(n):
                p = clone_pod(variant(tmpl, "hp-sweep", name), f"{name}-workers-{key}-{i}", f"{name}-w{key}-{i}", i)
                if name == "hp-sweep" and key == "1" and i == 3:
                    feed.emit(p)  # PodScheduled=False, rejected at GangScheduling permit
                else:
                    feed.emit(_running({**p, "status": {}}, f"gpu-{key}-{i}", 0.5), 0.5)


def _composite_deep(feed: Feed, reference: Path) -> None:
    """A 4-level gang (WorkloadMaxTreeDepth) from the reference shapes: root CPG (minGroupCount 2) over mid-a
    (CPG, 1) -> low-a (CPG, 1) -> leaves a1 (minCount 2, bound) / a2 (3, unbound); mid-b (CPG, 2) -> b1 (2, bound)
    / b2 (4, half bound); and leaf c (2) straight under the root. Only some grandchildren assemble: low-a and so
    mid-a assemble through a1 alone, mid-b does not. deep-ok: c bound too, so the root has 2 of 3 (assembled);
    deep-stuck: c unbound, the root has 1 of 3. Fewest pods that satisfy the root: mid-a 2 + c 2 = 4 (the sum
    over every leaf would be 13)."""
    wl, cpg, _driver, pg_workers, _pod_driver, pod_worker = load(reference, CPG_FILE, "2026-09-02T08:00:00Z")
    leaf_tpl = wl["spec"]["compositePodGroupTemplates"][0]["podGroupTemplates"][1]

    def tpl(name: str, min_count: int) -> dict[str, Any]:
        return {**json.loads(json.dumps(leaf_tpl)), "name": name, "schedulingPolicy": {"gang": {"minCount": min_count}}}

    def ctpl(name: str, min_groups: int, **children: Any) -> dict[str, Any]:
        return {"name": name, "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
                "disruptionMode": {"all": {}}, **children}

    spec_tree = [ctpl("root", 2, podGroupTemplates=[tpl("c", 2)], compositePodGroupTemplates=[
        ctpl("mid-a", 1, compositePodGroupTemplates=[
            ctpl("low-a", 1, podGroupTemplates=[tpl("a1", 2), tpl("a2", 3)])]),
        ctpl("mid-b", 2, podGroupTemplates=[tpl("b1", 2), tpl("b2", 4)])])]
    # (group, kind, parent, minCount / minGroupCount, pods bound in deep-ok / deep-stuck, pods in all)
    groups = [("root", "cpg", None, 2, 0, 0), ("mid-a", "cpg", "root", 1, 0, 0), ("low-a", "cpg", "mid-a", 1, 0, 0),
              ("mid-b", "cpg", "root", 2, 0, 0), ("a1", "pg", "low-a", 2, 2, 2), ("a2", "pg", "low-a", 3, 0, 3),
              ("b1", "pg", "mid-b", 2, 2, 2), ("b2", "pg", "mid-b", 4, 2, 4), ("c", "pg", "root", 2, 2, 2)]
    for job in ("deep-ok", "deep-stuck"):
        w = variant(wl, "llm-pretrain", job)
        w["spec"]["compositePodGroupTemplates"] = spec_tree
        _both_versions(feed, w)
        for name, kind, parent, need, bound, pods in groups:
            base = cpg if kind == "cpg" else pg_workers
            g = variant(base, base["metadata"]["name"], f"{job}-{name}")
            g["metadata"]["ownerReferences"] = w["metadata"]["ownerReferences"]
            g["spec"]["workloadRef"] = {"workloadName": job, "templateName": name}
            g["spec"].pop("parentCompositePodGroupName", None)
            if parent:
                g["spec"]["parentCompositePodGroupName"] = f"{job}-{parent}"
            policy = "minGroupCount" if kind == "cpg" else "minCount"
            g["spec"]["schedulingPolicy"] = {"gang": {policy: need}}
            if kind == "cpg":
                feed.emit(g)
                continue
            g["status"] = {}  # the scheduler's condition is not what decides here: the pods' binding is
            _both_versions(feed, g)
            bound_here = 0 if (job == "deep-stuck" and name == "c") else bound
            for i in range(pods):
                p = clone_pod(pod_worker, f"{job}-{name}-{i}", f"{job}-{name}-pod-{i}", i)
                p["spec"]["schedulingGroup"] = {"podGroupName": f"{job}-{name}"}
                if i < bound_here:
                    feed.emit({**p, "status": {"phase": "Pending"}}, 0.05)
                    feed.emit(_running(p, f"gpu-{job}-{name}-{i}", 0.5), 0.5, "MODIFIED")
                else:
                    feed.emit(p)


@pytest.fixture(scope="module", params=[False, True], ids=["live", "initial-list"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          reference: Path) -> Iterator[tuple[Any, bool]]:
    from gangscope import config

    settings = config.load(overrides={"data": str(tmp_path_factory.mktemp("n137") / "data")}, environ={})
    con = lake.connect(settings)
    raw = Raw()
    feed = Feed(raw, request.param)
    _composite(feed, reference)
    _jobs_with_scheduling(feed, reference)
    _conditions_and_preemption(feed, reference)
    _replicas_135(feed, reference)
    _composite_deep(feed, reference)
    feed.flush()
    raw.event(END, node("gpu-node-99", "rack-z"))  # the data's "now"
    raw.write(con)
    models.build(settings, con)
    yield con, request.param
    con.close()


def _jobs(con) -> dict[tuple[str, str], dict[str, Any]]:
    cur = con.execute("SELECT * FROM marts.jobs")
    cols = [d[0] for d in cur.description]
    return {(r[cols.index("namespace")], r[cols.index("job")]): dict(zip(cols, r, strict=True)) for r in cur.fetchall()}


def _findings(con) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["job"], r["root_cause"]): r for r in diagnose.findings(con, include_healthy=True)}


def _timing_is_own(con) -> bool:
    """Whether pod timing comes from the pods' own timestamps (issue 20); without it a job first seen in an
    initial list looks like it assembled at the first observation."""
    cols = {r[0] for r in con.execute("DESCRIBE staging.stg_pods").fetchall()}
    return "running_before_capture" in cols


def test_one_row_per_object_uid_whatever_the_version(built) -> None:
    con, _ = built
    dup = con.execute("SELECT uid, count(*) FROM staging.stg_native_groups GROUP BY uid HAVING count(*) > 1").fetchall()
    assert dup == []
    versions = dict(con.execute("SELECT name, api_versions FROM staging.stg_native_groups").fetchall())
    assert versions["llm-pretrain-workers-0"] == ["v1alpha3", "v1beta1"]
    assert versions["llm-pretrain-root-0"] == ["v1alpha3"]  # CompositePodGroup: v1alpha3 only
    for model in ("stg_pod_groups", "stg_native_workloads"):
        (n, d) = con.execute(f"SELECT count(*), count(DISTINCT (namespace, name)) FROM staging.{model} "
                             "WHERE namespace IN ('ml-team', 'serving')").fetchone()
        assert n == d > 0, model
    jobs = _jobs(con)
    assert len([k for k in jobs if k[1] == "bert-pretrain"]) == 1
    groups = dict(con.execute("SELECT name, groups FROM staging.stg_native_workloads").fetchall())
    # 1.37 composite templates (podGroupTemplates: null) and 1.35 podGroups decode to the same entries.
    assert groups["llm-pretrain"] == [{"name": "driver", "policy": "gang", "min_count": 1},
                                      {"name": "workers", "policy": "gang", "min_count": 4}]
    assert groups["hp-sweep"] == [{"name": "driver", "policy": "basic", "min_count": None},
                                  {"name": "workers", "policy": "gang", "min_count": 4}]


def test_conditions_by_type_initially_scheduled_stays_true(built) -> None:
    con, initial_list = built
    row = con.execute("SELECT scheduled_status, scheduled_reason, disruption_reason, min_count, policy "
                      "FROM staging.stg_native_groups WHERE name = 'infer-shard-a'").fetchone()
    assert row == ("True", "Scheduled", "PreemptionByScheduler", 8, "gang")
    (phase,) = con.execute("SELECT phase FROM staging.stg_pod_groups WHERE name = 'infer-shard-a'").fetchone()
    assert phase == "Scheduled"
    phases = {r[0] for r in con.execute("SELECT phase FROM staging.stg_pod_group_phases "
                                        "WHERE name = 'infer-shard-a'").fetchall()}
    assert phases == ({"Scheduled"} if initial_list else {"Unschedulable", "Scheduled"})


def test_composite_gang_not_assembled(built) -> None:
    con, _ = built
    job = _jobs(con)[("ml-team", "llm-pretrain")]
    assert (job["job_kind"], job["pod_group"], job["gang_size"], job["root_cause"]) == \
        ("JobSet", "llm-pretrain-root-0", 5, "gang_assembly")
    assert not [k for k in _jobs(con) if k[1].startswith("llm-pretrain-")]  # no job per child Job / PodGroup
    units = {r[0]: r[1:] for r in con.execute(
        "SELECT unit, unit_kind, parent, needed, members, members_bound, assembled_at IS NOT NULL "
        "FROM intermediate.int_gang_units WHERE job = 'llm-pretrain'").fetchall()}
    assert units == {"llm-pretrain-root-0": ("composite", None, 2, 2, 0, False),
                     "llm-pretrain-driver-0": ("podgroup", "llm-pretrain-root-0", 1, 1, 0, False),
                     "llm-pretrain-workers-0": ("podgroup", "llm-pretrain-root-0", 4, 4, 0, False)}
    ev = _findings(con)[("llm-pretrain", "gang_assembly")]["evidence"]
    stuck = {u["unit"]: u for u in ev["gangs_not_assembled"]}
    assert set(stuck) == set(units)
    assert stuck["llm-pretrain-workers-0"]["group_message"].startswith("minCount (4) cannot be satisfied")


def test_composite_assembled_is_healthy(built) -> None:
    con, initial_list = built
    (assembled,) = con.execute("SELECT assembled_at FROM intermediate.int_gang_units "
                               "WHERE unit = 'llm-ok-root-0'").fetchone()
    assert assembled is not None
    job = _jobs(con)[("ml-team", "llm-ok")]
    assert (job["gang_size"], job["state"]) == (5, "running")
    if initial_list and not _timing_is_own(con):
        pytest.skip("first seen in an initial list, assembly time needs the pods' own timestamps (issue 20)")
    assert job["root_cause"] == "healthy"


def test_job_owned_native_objects_attach_to_the_job(built) -> None:
    con, initial_list = built
    jobs = _jobs(con)
    bert = jobs[("ml-team", "bert-pretrain")]
    assert (bert["job_kind"], bert["pod_group"], bert["gang_size"], bert["pods_running"]) == \
        ("Job", "bert-pretrain-7c56f99548-bert-pretrain-pgt-0-548d6479cc", 4, 4)
    # No phantom job named after the Job-owned Workload or PodGroup (hashed names, no labels).
    assert not [k for k in jobs if k[1].startswith(("bert-pretrain-", "etl-", "pipeline-", "orphan-pg-job-"))]
    etl = jobs[("ml-team", "etl")]
    assert (etl["job_kind"], etl["gang_size"]) == ("Job", 2)  # basic: no minCount, the pods are the size
    (policy,) = con.execute("SELECT policy FROM staging.stg_native_groups WHERE owner_name = 'etl'").fetchone()
    assert policy == "basic"
    pipe = jobs[("ml-team", "pipeline")]
    assert (pipe["job_kind"], pipe["gang_size"], pipe["pods_running"]) == ("JobSet", 4, 4)
    orphan = jobs[("ml-team", "orphan-pg-job")]
    assert (orphan["job_kind"], orphan["gang_size"], orphan["pods"]) == ("Job", 4, 0)
    if initial_list and not _timing_is_own(con):
        pytest.skip("first seen in an initial list, assembly time needs the pods' own timestamps (issue 20)")
    for name in ("bert-pretrain", "etl", "pipeline"):
        assert jobs[("ml-team", name)]["root_cause"] == "healthy", name


def test_preemption_from_victim_pods_and_events(built) -> None:
    con, initial_list = built
    jobs = _jobs(con)
    assert jobs[("serving", "infer")]["root_cause"] == "preemption"
    assert jobs[("serving", "infer")]["pod_group"] == "infer-shard-a"
    assert not [k for k in jobs if k[0] == "serving" and k[1] != "infer"]
    pre = _findings(con)[("infer", "preemption")]
    sources = {(e["source"], e["reason"]) for e in pre["evidence"]["evictions"]}
    group = ("pod_group_condition", "PreemptionByScheduler")
    if initial_list:
        # Deleted before the collector started: the victim pod (and so its event's pod) is never seen.
        assert sources == {group}
    else:
        assert sources == {("pod_condition", "PreemptionByScheduler"), ("pod_event", "Preempted"), group}
    assert pre["started_at"] == iso(20.25)  # the victim's DisruptionTarget / the group's, not when it was seen


def test_135_each_replica_is_its_own_gang(built) -> None:
    con, initial_list = built
    units = {r[0]: r[1:] for r in con.execute(
        "SELECT unit, unit_kind, policy, needed, members, members_bound, assembled_at IS NOT NULL "
        "FROM intermediate.int_gang_units WHERE job = 'hp-sweep'").fetchall()}
    assert units == {"hp-sweep/driver": ("replica", "basic", 1, 1, 1, True),
                     "hp-sweep/workers/0": ("replica", "gang", 4, 5, 5, True),
                     "hp-sweep/workers/1": ("replica", "gang", 4, 4, 3, False)}
    job = _jobs(con)[("ml-team", "hp-sweep")]
    assert (job["job_kind"], job["gang_size"], job["pods_running"], job["state"]) == ("JobSet", 8, 9, "assembling")
    assert job["root_cause"] == "gang_assembly"
    ev = _findings(con)[("hp-sweep", "gang_assembly")]["evidence"]
    assert [u["unit"] for u in ev["gangs_not_assembled"]] == ["hp-sweep/workers/1"]
    ok = _jobs(con)[("ml-team", "hp-ok")]
    assert (ok["gang_size"], ok["state"]) == (8, "running")
    if initial_list and not _timing_is_own(con):
        pytest.skip("first seen in an initial list, assembly time needs the pods' own timestamps (issue 20)")
    assert ok["root_cause"] == "healthy"


def _units(con, job: str) -> dict[str, tuple[Any, ...]]:
    return {r[0].removeprefix(f"{job}-"): r[1:] for r in con.execute(
        "SELECT unit, unit_kind, parent, needed, needed_pods, members, members_bound, assembled_at IS NOT NULL "
        "FROM intermediate.int_gang_units WHERE job = ? ORDER BY unit", [job]).fetchall()}


def test_composite_four_levels_only_some_grandchildren_assembled(built) -> None:
    con, initial_list = built
    ok, stuck = _units(con, "deep-ok"), _units(con, "deep-stuck")
    # unit: kind, parent, needed, needed_pods, members, members_bound, assembled
    assert ok == {"root": ("composite", None, 2, 4, 3, 2, True),
                  "mid-a": ("composite", "deep-ok-root", 1, 2, 1, 1, True),
                  "low-a": ("composite", "deep-ok-mid-a", 1, 2, 2, 1, True),
                  "mid-b": ("composite", "deep-ok-root", 2, 6, 2, 1, False),
                  "a1": ("podgroup", "deep-ok-low-a", 2, 2, 2, 2, True),
                  "a2": ("podgroup", "deep-ok-low-a", 3, 3, 3, 0, False),
                  "b1": ("podgroup", "deep-ok-mid-b", 2, 2, 2, 2, True),
                  "b2": ("podgroup", "deep-ok-mid-b", 4, 4, 4, 2, False),
                  "c": ("podgroup", "deep-ok-root", 2, 2, 2, 2, True)}
    assert stuck["root"] == ("composite", None, 2, 4, 3, 1, False)  # only mid-a, through a1 three levels down
    assert stuck["mid-a"][-1] and not stuck["c"][-1]
    jobs = _jobs(con)
    assert not [k for k in jobs if k[1].startswith(("deep-ok-", "deep-stuck-"))]  # no job per group
    for name in ("deep-ok", "deep-stuck"):
        j = jobs[("ml-team", name)]
        # the fewest pods that satisfy the root (mid-a 2 + c 2), not every leaf's minCount (13)
        assert (j["job_kind"], j["pod_group"], j["gang_size"]) == ("JobSet", f"{name}-root", 4)
    assert jobs[("ml-team", "deep-stuck")]["root_cause"] == "gang_assembly"
    evidence = _findings(con)[("deep-stuck", "gang_assembly")]["evidence"]
    stuck_units = {u["unit"] for u in evidence["gangs_not_assembled"]}
    assert stuck_units == {"deep-stuck-root", "deep-stuck-mid-b", "deep-stuck-a2", "deep-stuck-b2", "deep-stuck-c"}
    assert jobs[("ml-team", "deep-ok")]["state"] == "running"
    if initial_list and not _timing_is_own(con):
        pytest.skip("first seen in an initial list, assembly time needs the pods' own timestamps (issue 20)")
    assert jobs[("ml-team", "deep-ok")]["root_cause"] == "healthy"
    assert ("deep-ok", "gang_assembly") not in _findings(con)


def test_composite_needs_only_min_group_count_children(built) -> None:
    """gang_size of a composite whose minGroupCount is below its child count: the smallest children's sum."""
    con, _ = built
    rows = dict(con.execute("SELECT unit, needed_pods FROM intermediate.int_gang_units "
                            "WHERE unit IN ('deep-ok-mid-b', 'deep-ok-root', 'llm-pretrain-root-0')").fetchall())
    # mid-b needs both children (2 + 4); the root needs 2 of {mid-a 2, mid-b 6, c 2}; llm-pretrain 2 of {1, 4}
    assert rows == {"deep-ok-mid-b": 6, "deep-ok-root": 4, "llm-pretrain-root-0": 5}
