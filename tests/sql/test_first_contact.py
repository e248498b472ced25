"""First contact (issue 20) and gang assembly ending at binding (issue 23), on reference-shaped objects.

gangscope starts watching at minute 60 (CAPTURE) of a cluster that has been busy for an hour: every object that
existed then arrives ADDED in the initial list, its history only in its own timestamps. Real DuckLake, real
models. Each situation that can be met both ways is built twice: first seen in the initial list, and watched
live from its creation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from pipeline import models
from reports import diagnose
from tests.sql.lakefix import Raw, build_lake, cond, failed_scheduling, iso, node, pod, pod_status, ts, workload

NS = "ml"
CAPTURE = 60.0  # minute gangscope first sees the cluster
END = 100.0
COSCHED = "scheduling.x-k8s.io/pod-group"
QUOTA_MSG = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, "
             "16 more needed")
TIMEOUT_MSG = "rejected due to timeout after waiting 1m0s at plugin Coscheduling"


def _podgroup(name: str, min_member: int, timeout: int, created: float, phase: str,
              owner: tuple[str, str] | None = None) -> dict:
    md: dict = {"name": name, "namespace": NS, "creationTimestamp": iso(created)}
    if owner:
        md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": owner[0], "name": owner[1],
                                  "uid": f"uid-{owner[1]}", "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": md,
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout}, "status": {"phase": phase}}


def _admitted(minutes: float) -> list[dict]:
    return [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", minutes),
            cond("Admitted", "True", "Admitted", "The workload is admitted", minutes),
            cond("PodsReady", "True", "Started", "All pods reached readiness and the workload is running",
                 minutes + 1.5)]


def _throughput(raw: Raw, pod_name: str, value_at) -> None:
    t = CAPTURE
    while t < END:
        raw.sample(t, "train_tokens_per_second", {"namespace": NS, "pod": pod_name}, value_at(t))
        t += 0.25


def _kueue_running(raw: Raw, job: str, nodes: list[str], created: float, seen: float, pg: str | None = None,
                   volcano: bool = False) -> str:
    """A Kueue job admitted and running since `created`, first seen at `seen` (the initial list), its gang object
    (coscheduling, or Volcano) named `pg` and linked from its pods by label (annotation for Volcano) only."""
    wl = f"job-{job}-abcde"
    w = workload(NS, wl, "Job", job, len(nodes), _admitted(created + 0.05), cluster_queue="cq")
    w["metadata"]["creationTimestamp"] = iso(created)
    raw.event(seen, w)
    if pg and volcano:
        raw.event(seen, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                         "metadata": {"name": pg, "namespace": NS, "creationTimestamp": iso(created + 0.06)},
                         "spec": {"minMember": len(nodes), "queue": "default"},
                         "status": {"phase": "Running", "running": len(nodes)}})
    elif pg:
        raw.event(seen, _podgroup(pg, len(nodes), 300, created + 0.06, "Running", owner=("Job", job)))
    for i, n in enumerate(nodes):
        ann = {"kueue.x-k8s.io/workload": wl}
        if pg and volcano:
            ann["scheduling.k8s.io/group-name"] = pg
        p = pod(NS, f"{job}-{i}-x7k2p", "Job", job, n, "Running", annotations=ann,
                labels={COSCHED: pg} if pg and not volcano else None)
        raw.event(seen, pod_status(p, created + 0.1, bound=created + 0.2 + i / 60, started=created + 1.0 + i / 60))
    return f"{job}-0-x7k2p"


def _cold_pull(raw: Raw, job: str, created: float, seen: float | None, n_nodes: list[str]) -> None:
    """Coscheduling gang, timeout 60 s: members bound within 5 s, containers Ready 100 s after creation."""
    raw.event(seen if seen is not None else created, _podgroup(job, len(n_nodes), 60, created, "Running"))
    for i, n in enumerate(n_nodes):
        name = f"{job}-{i}"
        base = pod(NS, name, "Job", job, None, "Pending", labels={COSCHED: job})
        bound, started = created + (2 + i) / 60, created + 100 / 60
        if seen is not None:  # in the initial list, already running
            raw.event(seen, pod_status(base, created, bound=bound, started=started))
            continue
        raw.event(created, pod_status(copy.deepcopy(base), created))
        b = copy.deepcopy(base)
        b["spec"]["nodeName"] = n
        raw.event(bound, pod_status(b, created, bound=bound), "MODIFIED")
        r = copy.deepcopy(b)
        raw.event(started, pod_status(r, created, bound=bound, started=started), "MODIFIED")


def _stuck(raw: Raw, job: str, created: float, seen: float | None) -> None:
    """Coscheduling gang, timeout 60 s: 2 of 4 members never bound, FailedScheduling with the plug-in's timeout."""
    first = seen if seen is not None else created
    raw.event(first, _podgroup(job, 4, 60, created, "Scheduling"))
    for i in range(4):
        base = pod(NS, f"{job}-{i}", "Job", job, f"n{5 + i}" if i < 2 else None, "Pending", gpus=4,
                   labels={COSCHED: job})
        if i < 2:
            raw.event(first, pod_status(base, created, bound=created + 0.05, started=created + 0.5))
        else:
            raw.event(first, pod_status(base, created, unschedulable=(created + 0.05, "0/12 nodes are available: "
                                                                       "12 Insufficient nvidia.com/gpu.")))
    raw.event(seen if seen is not None else created + 1, failed_scheduling(NS, f"{job}-2", TIMEOUT_MSG, created + 1))


def _native_137(raw: Raw, seen: float) -> None:
    """The 1.37 Job-owned native Workload + PodGroup (reference k8s-1.37_job-spec-scheduling...), pods linked
    by spec.schedulingGroup only, all first seen in the initial list."""
    job, wl, pg = "bert-pretrain", "bert-pretrain-7c56f99548", "bert-pretrain-7c56f99548-bert-pretrain-pgt-0-548d6479cc"
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "uid-bert", "controller": True,
              "blockOwnerDeletion": True}]
    raw.event(seen, {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
                     "metadata": {"name": wl, "namespace": NS, "creationTimestamp": iso(10.01),
                                  "ownerReferences": owner},
                     "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": job},
                              "podGroupTemplates": [{"name": "bert-pretrain-pgt-0",
                                                     "schedulingPolicy": {"gang": {"minCount": 2}}}]}})
    raw.event(seen, {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                     "metadata": {"name": pg, "namespace": NS, "creationTimestamp": iso(10.01),
                                  "ownerReferences": owner + [{"apiVersion": "scheduling.k8s.io/v1alpha3",
                                                               "kind": "Workload", "name": wl, "uid": "uid-wl"}]},
                     "spec": {"workloadRef": {"workloadName": wl, "templateName": "bert-pretrain-pgt-0"},
                              "schedulingPolicy": {"gang": {"minCount": 2}}},
                     "status": {"conditions": [cond("PodGroupInitiallyScheduled", "True", "Scheduled", "", 10.1)]}})
    for i, n in enumerate(["n11", "n12"]):
        p = pod(NS, f"{job}-{i}-x7k2p", "Job", job, n, "Running", spec={"schedulingGroup": {"podGroupName": pg}})
        raw.event(seen, pod_status(p, 10.02, bound=10.1, started=11.5))


def _build(raw: Raw) -> None:
    for i in range(1, 15):
        raw.event(CAPTURE, node(f"n{i}", "rack-a" if i <= 7 else "rack-b"))
    # Issue 20: a Kueue gang running for an hour, its PodGroup named <job>-pg; steady throughput.
    steady = _kueue_running(raw, "long-runner", ["n1", "n2"], 0.0, CAPTURE, pg="long-runner-pg")
    _throughput(raw, steady, lambda t: 1000.0)
    _kueue_running(raw, "volcano-runner", ["n7", "n8"], 20.0, CAPTURE, pg="volcano-runner-pg", volcano=True)
    # Issue 20: a re-run whose earlier run (minutes 1-30) was deleted before capture; only the Job controller's
    # SuccessfulCreate Event (listed, it outlives the pod) and the metrics history tell what it used to do.
    raw.event(CAPTURE, {"apiVersion": "v1", "kind": "Event",
                        "metadata": {"name": "rerun.17f3a", "namespace": NS, "creationTimestamp": iso(1.0)},
                        "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": "rerun", "namespace": NS,
                                           "uid": "uid-rerun-1"},
                        "reason": "SuccessfulCreate", "message": "Created pod: rerun-0-old", "type": "Normal",
                        "source": {"component": "job-controller"}, "firstTimestamp": iso(1.0),
                        "lastTimestamp": iso(1.0), "count": 1})
    t = 2.0
    while t < 30:
        raw.sample(t, "train_tokens_per_second", {"namespace": NS, "pod": "rerun-0-old"}, 1000.0)
        t += 0.25
    rerun = _kueue_running(raw, "rerun", ["n14"], 35.0, CAPTURE)
    _throughput(raw, rerun, lambda t: 500.0)
    # Issue 20: running since before capture and slowing down 20 minutes after it.
    slows = _kueue_running(raw, "slows-later", ["n3"], 5.0, CAPTURE)
    _throughput(raw, slows, lambda t: 1000.0 if t < 80 else 500.0)
    # Issue 20: pending since minute 0 for want of quota.
    w = workload(NS, "job-waiting-abcde", "Job", "waiting", 2,
                 [cond("QuotaReserved", "False", "WaitingForQuota", QUOTA_MSG, 0.05)])
    w["metadata"]["creationTimestamp"] = iso(0.0)
    raw.event(CAPTURE, w)
    # Issue 20: admitted long ago, evicted at minute 30 (waitForPodsReady) and waiting for quota since.
    r = workload(NS, "job-requeued-abcde", "Job", "requeued", 2,
                 [cond("QuotaReserved", "False", "Pending", QUOTA_MSG, 30.0),
                  cond("Admitted", "False", "NoReservation", "The workload has no reservation", 30.0),
                  cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout ml/job-requeued-abcde",
                       30.0)])
    r["metadata"]["creationTimestamp"] = iso(1.0)
    raw.event(CAPTURE, r)
    # Issue 20: a queued Kueue job whose PodGroup exists before its pods: attached through the Workload's pod
    # template and the PodGroup's owner, not a job of its own; a PodGroup nothing links stays one.
    q = workload(NS, "job-queued-pg-job-abcde", "Job", "queued-pg-job", 2,
                 [cond("QuotaReserved", "False", "WaitingForQuota", QUOTA_MSG, 58.0)])
    q["spec"]["podSets"][0]["template"] = {"metadata": {"labels": {COSCHED: "queued-pg-job-pg"}}, "spec": {}}
    q["metadata"]["creationTimestamp"] = iso(58.0)
    raw.event(CAPTURE, q)
    raw.event(CAPTURE, _podgroup("queued-pg-job-pg", 2, 60, 58.0, "Pending", owner=("Job", "queued-pg-job")))
    raw.event(CAPTURE, _podgroup("lonely-pg", 2, 60, 59.0, "Pending"))
    # Issue 23: bound in seconds, Ready after a 100 s image pull, timeout 60 s: watched live and first seen listed.
    _cold_pull(raw, "cold-pull", 62.0, None, ["n4", "n9"])
    _cold_pull(raw, "cold-pull-listed", 58.0, CAPTURE, ["n10", "n13"])
    # Issue 23: members unbound past the timeout with FailedScheduling: watched live and first seen listed.
    _stuck(raw, "stuck-gang", 62.0, None)
    _stuck(raw, "stuck-listed", 30.0, CAPTURE)
    _native_137(raw, CAPTURE)
    raw.event(END, node("n14", "rack-b"), "MODIFIED")  # the data's "now"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    settings, con, _ = build_lake(tmp_path_factory.mktemp("fc") / "data", _build)
    yield settings, con
    con.close()


def _rows(con) -> dict[tuple[str, str], dict]:
    return {(r["job"], r["root_cause"]): r for r in diagnose.findings(con, include_healthy=True)}


def _primary(con) -> dict[str, str]:
    return dict(con.execute("SELECT job, root_cause FROM marts.jobs WHERE namespace = ?", [NS]).fetchall())


def test_job_list_has_no_phantom_from_podgroup_names(built) -> None:
    _, con = built
    assert set(_primary(con)) == {"long-runner", "volcano-runner", "rerun", "slows-later", "waiting", "requeued",
                                  "queued-pg-job", "lonely-pg", "cold-pull", "cold-pull-listed", "stuck-gang",
                                  "stuck-listed", "bert-pretrain"}
    groups = dict(con.execute("SELECT job, pod_group FROM marts.jobs WHERE namespace = ?", [NS]).fetchall())
    assert groups["long-runner"] == "long-runner-pg"
    assert groups["volcano-runner"] == "volcano-runner-pg"
    assert groups["queued-pg-job"] == "queued-pg-job-pg"
    assert groups["bert-pretrain"] == "bert-pretrain-7c56f99548-bert-pretrain-pgt-0-548d6479cc"
    kinds = dict(con.execute("SELECT job, job_kind FROM marts.jobs WHERE namespace = ?", [NS]).fetchall())
    assert kinds["lonely-pg"] == "PodGroup" and kinds["queued-pg-job"] == "Job" and kinds["bert-pretrain"] == "Job"


@pytest.mark.parametrize("job,expected", [
    ("long-runner", "healthy"),
    ("volcano-runner", "healthy"),
    ("slows-later", "unexplained_slowdown"),
    ("rerun", "unexplained_slowdown"),
    ("waiting", "admission_quota"),
    ("requeued", "admission_quota"),
    ("cold-pull", "healthy"),
    ("cold-pull-listed", "healthy"),
    ("stuck-gang", "gang_assembly"),
    ("stuck-listed", "gang_assembly"),
    ("bert-pretrain", "healthy"),
])
def test_class(built, job: str, expected: str) -> None:
    _, con = built
    assert _primary(con)[job] == expected


def test_running_gang_timed_from_its_pods_not_the_watch(built) -> None:
    _, con = built
    ev = _rows(con)[("long-runner", "healthy")]["evidence"]
    assert ev["assembled_at"] == iso(0.2 + 1 / 60)  # the second member's PodScheduled, an hour before capture
    assert ev["assembly_s"] == 10  # from admission (3 s) to the second binding (13 s)
    assert ev["start_up_s"] == 48
    assert ev["all_running_at"] == iso(1 + 1 / 60)
    assert not ev["assembled_before_capture"]


@pytest.mark.parametrize("job", ["cold-pull", "cold-pull-listed"])
def test_slow_image_pull_is_start_up_not_assembly(built, job: str) -> None:
    _, con = built
    rows = _rows(con)
    assert (job, "gang_assembly") not in rows
    ev = rows[(job, "healthy")]["evidence"]
    assert 90 <= ev["start_up_s"] <= 100  # bound after 2-3 s, Ready at 100 s
    assert ev["assembly_s"] <= 5
    gang = con.execute("SELECT timed_out, timeout_s, start_up_s FROM intermediate.int_gang WHERE job = ?",
                       [job]).fetchone()
    assert gang[0] is False and gang[1] == 60 and 90 <= gang[2] <= 100
    assert "bound to running in" in rows[(job, "healthy")]["summary"]


@pytest.mark.parametrize("job,created", [("stuck-gang", 62.0), ("stuck-listed", 30.0)])
def test_unbound_members_past_the_timeout_are_a_gang_fault(built, job: str, created: float) -> None:
    _, con = built
    f = _rows(con)[(job, "gang_assembly")]
    assert f["started_at"] == iso(created + 1)  # creation + the 60 s timeout, from the objects' own times
    assert f["ended_at"] is None
    ev = f["evidence"]
    assert ev["pods_bound"] == 2 and ev["gang_size"] == 4 and ev["timeout_s"] == 60
    assert ev["failed_scheduling"][TIMEOUT_MSG] == 0
    assert ev["assembly_s"] == round((END - created) * 60)
    assert ev["idle_gpus"] == 8 and f["severity"] == "critical"


def test_pending_since_before_capture_is_judged_on_its_real_wait(built) -> None:
    _, con = built
    f = _rows(con)[("waiting", "admission_quota")]
    assert f["started_at"] == iso(10)  # created at 0 + the 10 min threshold, not capture + 10 min
    assert f["evidence"]["wait_s"] == END * 60
    assert f["evidence"]["reason"] == "WaitingForQuota"
    f = _rows(con)[("requeued", "admission_quota")]  # waiting since it lost its quota at minute 30
    assert f["started_at"] == iso(40) and f["ended_at"] is None
    assert f["evidence"]["queued_at"] == iso(30) and f["evidence"]["wait_s"] == (END - 30) * 60


def test_baseline_for_a_job_first_seen_mid_run(built) -> None:
    _, con = built
    base = con.execute("SELECT DISTINCT baseline, baseline_source FROM intermediate.int_job_throughput "
                       "WHERE job = 'slows-later'").fetchall()
    assert base == [(1000.0, "steady_window")]
    f = _rows(con)[("slows-later", "unexplained_slowdown")]
    assert f["started_at"] == iso(80)
    base = con.execute("SELECT DISTINCT baseline, baseline_source FROM intermediate.int_job_throughput "
                       "WHERE job = 'rerun'").fetchall()
    assert base == [(1000.0, "earlier_runs")]  # the deleted run's samples, attached through its Job's Event
    assert con.execute("SELECT count(*) FROM marts.findings WHERE job = 'long-runner' AND root_cause <> 'healthy'"
                       ).fetchone()[0] == 0


def test_native_gang_assembled_before_capture_is_healthy(built) -> None:
    _, con = built
    ev = _rows(con)[("bert-pretrain", "healthy")]["evidence"]
    assert ev["assembled_at"] == iso(10.1) and ev["start_up_s"] == 84


def test_bound_when_first_seen_without_own_times_is_not_a_fault(tmp_path) -> None:
    """Pods with no timestamps of their own, already bound and running in the initial list: assembled before
    capture began (said so in the evidence), never timed out for it."""
    def fill(raw: Raw) -> None:
        raw.event(CAPTURE, _podgroup("bare", 2, 60, 0.0, "Running"))
        for i in range(2):
            p = pod(NS, f"bare-{i}", "Job", "bare", f"n{i + 1}", "Running", labels={COSCHED: "bare"})
            p["metadata"]["creationTimestamp"] = iso(0.0)
            raw.event(CAPTURE, p)
        raw.event(END, node("n1", "rack-a"))

    _, con, _ = build_lake(tmp_path / "data", fill)
    rows = {(r["job"], r["root_cause"]): r for r in diagnose.findings(con, include_healthy=True)}
    con.close()
    assert set(rows) == {("bare", "healthy")}
    ev = rows[("bare", "healthy")]["evidence"]
    assert ev["assembled_before_capture"] is True and ev["start_up_s"] is None
    assert "assembled before capture began" in rows[("bare", "healthy")]["summary"]


def _restart_lake(raw: Raw, upto: float) -> None:
    """Watched from minute 0 to 30, stopped, relisted at minute 60 (everything ADDED again), watched to `upto`."""
    for seen in ([0.0] if upto <= 30 else [0.0, CAPTURE]):
        w = workload(NS, "job-starved-abcde", "Job", "starved", 2,
                     [cond("QuotaReserved", "False", "WaitingForQuota", QUOTA_MSG, 0.05)])
        w["metadata"]["creationTimestamp"] = iso(0.0)
        raw.event(seen, w)
        for i in range(2):
            p = pod(NS, f"fine-{i}", "Job", "fine", f"n{i + 1}", "Running")
            raw.event(seen, pod_status(p, 0.0, bound=0.05, started=0.5))
        # Created just before the stop; bound and running while gangscope was away (seen again only in the relist).
        for i in range(2):
            p = pod(NS, f"late-{i}", "Job", "late", None if seen < CAPTURE else f"n{i + 3}", "Pending")
            raw.event(29.5 if seen < CAPTURE else seen,
                      pod_status(p, 29.5) if seen < CAPTURE else pod_status(p, 29.5, bound=31.0, started=33.0))
    end = min(upto, 30.0)
    t = 0.0
    while t <= upto:
        if t <= end or t >= CAPTURE:
            raw.sample(t, "train_tokens_per_second", {"namespace": NS, "pod": "fine-0"}, 1000.0)
        t += 0.25


def test_restart_is_not_an_incident(tmp_path) -> None:
    """`gangscope run` stopped 30 minutes and started again: the healthy jobs (one of them started while gangscope
    was away) get no finding, the open one stays open with the same start, and nothing is counted twice."""
    def findings() -> list[tuple[str, str, str, str | None]]:
        return sorted((r["job"], r["root_cause"], r["started_at"], r["ended_at"])
                      for r in diagnose.findings(con, include_healthy=False))

    settings, con, _ = build_lake(tmp_path / "data", lambda raw: _restart_lake(raw, 30.0))
    before = findings()
    assert before == [("starved", "admission_quota", iso(10), None)]
    later = Raw()
    _restart_lake(later, 90.0)
    later.k8s = [r for r in later.k8s if r[1] >= ts(CAPTURE)]  # only the relist and after are new
    later.samples = [s for s in later.samples if s[1] > ts(30)]
    later.write(con)
    models.build(settings, con)
    after = findings()
    late = con.execute("SELECT assembled_at, timed_out, start_up_s FROM intermediate.int_gang WHERE job = 'late'"
                       ).fetchone()
    con.close()
    assert after == before
    assert late == (ts(31.0), False, 120.0)  # timed from the pods' own times, not from the relist
