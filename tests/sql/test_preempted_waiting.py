"""A preempted job is one incident, one finding: `preemption`, never also `gang_assembly` (its gang is gone, not
failing to assemble) or `admission_quota` (it waits for quota again *because* it was preempted).

Each situation is built twice in one lake: watched live from the job's creation (namespace ``live``), and first
seen in the initial list at CAPTURE, mid-incident (namespace ``mol``). Controls that must still be found: a
readmitted job whose new gang cannot assemble, and a job evicted for another reason and waiting for quota
(tests/sql/test_first_contact.py's ``requeued``). Real DuckLake, real models, reference-shaped objects.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from reports import diagnose
from tests.sql.lakefix import Raw, build_lake, cond, node, pod, pod_status, workload

CAPTURE = 30.0  # minute the `mol` namespace is first listed
END = 45.0
PREEMPTED = 20.0
READMITTED = 35.0
QUOTA_MSG = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, "
             "16 more needed")
PREEMPT_MSG = ("Preempted to accommodate a workload (UID: 9f1c, JobUID: 77ab) due to prioritization in the "
               "ClusterQueue; preemptor path: /cq; preemptee path: /cq")


def _admitted(at: float) -> list[dict]:
    return [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", at),
            cond("Admitted", "True", "Admitted", "The workload is admitted", at)]


def _evicted(at: float) -> list[dict]:
    """Kueue's conditions after a preemption: Evicted/Preempted, quota released, requeued waiting for quota."""
    return [cond("QuotaReserved", "False", "Pending", QUOTA_MSG, at + 0.02),
            cond("Admitted", "False", "NoReservation", "The workload has no reservation", at + 0.02),
            cond("Evicted", "True", "Preempted", PREEMPT_MSG, at),
            cond("Preempted", "True", "InClusterQueue", PREEMPT_MSG, at)]


def _kueue_pods(ns: str, job: str, wl: str, nodes: list[str], created: float, suffix: str = "a") -> list[dict]:
    out = []
    for i, n in enumerate(nodes):
        p = pod(ns, f"{job}-{i}-{suffix}", "Job", job, n, "Running", annotations={"kueue.x-k8s.io/workload": wl})
        out.append(pod_status(p, created, bound=created + 0.05, started=created + 0.5))
    return out


def _preempted_waiting(raw: Raw, ns: str, seen: float | None) -> None:
    """Kueue Job admitted at 0.5, running from 1, preempted at PREEMPTED, pods gone, waiting for quota to END."""
    job, wl = "rl-sweep", "job-rl-sweep-2ae9e"
    w = workload(ns, wl, "Job", job, 2, [], cluster_queue="cq")
    w["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    pods = _kueue_pods(ns, job, wl, ["n1", "n2"], 0.55)
    if seen is not None:  # listed mid-incident: the Workload as it is now, the pods already deleted
        w["status"] = {"conditions": _evicted(PREEMPTED), "requeueState": {"count": 1}}
        raw.event(seen, w)
        return
    raw.event(0, copy.deepcopy(w))
    w["status"]["conditions"] = _admitted(0.5)
    raw.event(0.5, copy.deepcopy(w), "MODIFIED")
    for p in pods:
        raw.event(0.55, copy.deepcopy(p))
    w["status"] = {"conditions": _evicted(PREEMPTED), "requeueState": {"count": 1}}
    raw.event(PREEMPTED, copy.deepcopy(w), "MODIFIED")
    raw.event(PREEMPTED, {"apiVersion": "v1", "kind": "Event",
                          "metadata": {"name": f"{wl}.preempted", "namespace": ns},
                          "involvedObject": {"kind": "Workload", "name": wl, "namespace": ns},
                          "reason": "Preempted", "message": PREEMPT_MSG, "type": "Normal",
                          "firstTimestamp": "2026-11-01T00:20:00Z", "lastTimestamp": "2026-11-01T00:20:00Z",
                          "count": 1})
    for p in pods:
        p["metadata"]["deletionTimestamp"] = "2026-11-01T00:20:02Z"
        p["status"]["phase"] = "Failed"
        raw.event(PREEMPTED + 0.04, copy.deepcopy(p), "MODIFIED")
        raw.event(PREEMPTED + 0.6, copy.deepcopy(p), "DELETED")


def _scheduler_preempted(raw: Raw, ns: str, seen: float | None) -> None:
    """No Kueue, no gang object: kube-scheduler preempts one pod (DisruptionTarget), the Job fails
    (backoffLimit 0) and its failed pods are deleted. Listed mid-incident: the failed pods not deleted yet."""
    job = "embed-batch"
    pods = []
    for i, n in enumerate(["n3", "n4"]):
        p = pod(ns, f"{job}-{i}", "Job", job, n, "Running")
        pods.append(pod_status(p, 0.8, bound=0.85, started=1.3))
    if seen is None:
        for p in pods:
            raw.event(0.8, copy.deepcopy(p))
    victim = pods[-1]
    victim["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                                           "lastTransitionTime": "2026-11-01T00:20:00Z",
                                           "reason": "PreemptionByScheduler",
                                           "message": "default-scheduler: preempting to accommodate a higher "
                                                      "priority pod"})
    for p in pods:
        p["status"]["phase"] = "Failed"
        if seen is None:
            raw.event(PREEMPTED + 0.25, copy.deepcopy(p), "MODIFIED")
    if seen is not None:
        for p in pods:
            raw.event(seen, copy.deepcopy(p))
    for p in pods:
        raw.event(max(PREEMPTED + 0.5, (seen or 0) + 0.5), copy.deepcopy(p), "DELETED")


def _readmitted_stuck(raw: Raw, ns: str, seen: float | None) -> None:
    """Control: preempted at 10, readmitted at 12, its new pods never bound: that new gang is a finding."""
    job, wl = "readmit-stuck", "job-readmit-stuck-5k2lx"
    w = workload(ns, wl, "Job", job, 2, [], cluster_queue="cq")
    w["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    conds = [c for c in _evicted(10.0) if c["type"] in ("Evicted", "Preempted")]
    for c in conds:
        c.update(status="False", reason="QuotaReserved", message=f"Previously: {c['message']}",
                 lastTransitionTime="2026-11-01T00:12:00Z")
    w["status"]["conditions"] = _admitted(12.0) + conds
    new = []
    for i in range(2):
        p = pod(ns, f"{job}-{i}-b", "Job", job, None, "Pending", annotations={"kueue.x-k8s.io/workload": wl})
        new.append(pod_status(p, 12.05, unschedulable=(12.1, "0/4 nodes are available: 4 Insufficient "
                                                               "nvidia.com/gpu.")))
    if seen is None:
        old = _kueue_pods(ns, job, wl, ["n1", "n2"], 0.55, suffix="a")
        first = copy.deepcopy(w)
        first["status"]["conditions"] = _admitted(0.5)
        raw.event(0, first)
        for p in old:
            raw.event(0.55, copy.deepcopy(p))
        ev = copy.deepcopy(w)
        ev["status"]["conditions"] = _evicted(10.0)
        raw.event(10.0, ev, "MODIFIED")
        for p in old:
            raw.event(10.5, copy.deepcopy(p), "DELETED")
        raw.event(12.0, copy.deepcopy(w), "MODIFIED")
    for p in new:
        raw.event(seen if seen is not None else 12.05, copy.deepcopy(p))


def _preempted_readmitted(raw: Raw, ns: str, seen: float | None) -> None:
    """Kueue Job admitted at 0.5, preempted at PREEMPTED, re-admitted at READMITTED (after a 15 min wait, past the
    threshold) and running again. Listed mid-incident: first seen evicted, so its first admission is unseen (the
    simulator's preemption@onset once reported "Not admitted for 45 min (quota)" beside the preemption)."""
    job, wl = "rl-retry", "job-rl-retry-8c1d2"
    w = workload(ns, wl, "Job", job, 2, [], cluster_queue="cq")
    w["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    if seen is None:
        raw.event(0, copy.deepcopy(w))
        w["status"]["conditions"] = _admitted(0.5)
        raw.event(0.5, copy.deepcopy(w), "MODIFIED")
        for p in _kueue_pods(ns, job, wl, ["n1", "n2"], 0.55):
            raw.event(0.55, copy.deepcopy(p))
            raw.event(PREEMPTED + 0.6, copy.deepcopy(p), "DELETED")
    w["status"] = {"conditions": _evicted(PREEMPTED), "requeueState": {"count": 1}}
    raw.event(seen if seen is not None else PREEMPTED, copy.deepcopy(w), "ADDED" if seen is not None else "MODIFIED")
    again = [c for c in _evicted(PREEMPTED) if c["type"] in ("Evicted", "Preempted")]
    for c in again:
        if c["type"] == "Evicted":
            c.update(status="False", reason="QuotaReserved", message="Previously: " + c["message"],
                     lastTransitionTime="2026-11-01T00:35:00Z")
    w["status"]["conditions"] = _admitted(READMITTED) + again
    raw.event(READMITTED, copy.deepcopy(w), "MODIFIED")
    for p in _kueue_pods(ns, job, wl, ["n1", "n2"], READMITTED + 0.05, suffix="b"):
        raw.event(READMITTED + 0.05, copy.deepcopy(p))


def _build(raw: Raw) -> None:
    for i in range(1, 5):
        raw.event(0, node(f"n{i}", "rack-a"))
    for ns, seen in (("live", None), ("mol", CAPTURE)):
        _preempted_waiting(raw, ns, seen)
        _scheduler_preempted(raw, ns, seen)
        _readmitted_stuck(raw, ns, seen)
        _preempted_readmitted(raw, ns, seen)
    raw.event(END, node("n4", "rack-a"), "MODIFIED")  # the data's "now": 25 min after the preemption


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    _, c, _ = build_lake(tmp_path_factory.mktemp("pre") / "data", _build)
    yield c
    c.close()


def _classes(con, ns: str, job: str) -> list[str]:
    return sorted(r["root_cause"] for r in diagnose.findings(con) if (r["namespace"], r["job"]) == (ns, job))


@pytest.mark.parametrize("ns", ["live", "mol"])
def test_preempted_job_waiting_for_readmission_is_one_preemption_finding(con, ns: str) -> None:
    rows = [r for r in diagnose.findings(con) if (r["namespace"], r["job"]) == (ns, "rl-sweep")]
    assert [r["root_cause"] for r in rows] == ["preemption"]  # no gang_assembly, no admission_quota beside it
    f = rows[0]
    assert f["started_at"] == "2026-11-01T00:20:00Z" and f["ended_at"] is None  # open while it waits
    assert "not running again yet" in f["summary"]
    # The wait itself is real (25 min, over the 10 min threshold) and its cause is known: folded, not lost.
    wait = con.execute("SELECT requeued, cause, wait_s FROM intermediate.int_admission WHERE namespace = ? "
                       "AND job = 'rl-sweep'", [ns]).fetchone()
    assert wait[0] is True and wait[1] == "quota" and wait[2] > 600
    # Queued, not assembling: the gang timeline has no row for it while it waits.
    assert con.execute("SELECT count(*) FROM intermediate.int_gang WHERE namespace = ? AND job = 'rl-sweep'",
                       [ns]).fetchone()[0] == 0


@pytest.mark.parametrize("ns", ["live", "mol"])
def test_scheduler_preempted_job_with_pods_deleted_is_one_finding(con, ns: str) -> None:
    assert _classes(con, ns, "embed-batch") == ["preemption"]
    assert con.execute("SELECT state FROM intermediate.int_jobs WHERE namespace = ? AND job = 'embed-batch'",
                       [ns]).fetchone()[0] == "finished"


@pytest.mark.parametrize("ns", ["live", "mol"])
def test_preempted_job_admitted_again_is_one_preemption_finding_however_first_seen(con, ns: str) -> None:
    rows = [r for r in diagnose.findings(con) if (r["namespace"], r["job"]) == (ns, "rl-retry")]
    assert [r["root_cause"] for r in rows] == ["preemption"]  # not also "Not admitted for 35 min (quota)"
    assert rows[0]["started_at"] == "2026-11-01T00:20:00Z" and rows[0]["ended_at"] is not None
    requeued, wait_s = con.execute("SELECT requeued, wait_s FROM intermediate.int_admission WHERE namespace = ? "
                                   "AND job = 'rl-retry'", [ns]).fetchone()
    assert requeued is False
    # Live, the first admission was seen (30 s after creation); first seen evicted, how long it took is unknown.
    assert wait_s == 30 if ns == "live" else wait_s is None


@pytest.mark.parametrize("ns", ["live", "mol"])
def test_readmitted_gang_that_cannot_assemble_is_still_found(con, ns: str) -> None:
    classes = _classes(con, ns, "readmit-stuck")
    assert "gang_assembly" in classes
    assert "admission_quota" not in classes
    gang = next(r for r in diagnose.findings(con) if (r["namespace"], r["job"], r["root_cause"])
                == (ns, "readmit-stuck", "gang_assembly"))
    # Timed from the re-admission (minute 12) or its pods' creation, not from the first admission (minute 0.5).
    assert gang["started_at"] in ("2026-11-01T00:17:00Z", "2026-11-01T00:17:03Z")
