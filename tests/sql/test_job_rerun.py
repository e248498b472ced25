"""A Job that ran and was deleted, and run again under the same name: neither is a gang that never assembled.

Seen live (`demo --live`): a Kueue Job ran and was deleted at minute 10 (pods and Workload), and in the builds
between its deletion and the next run's pods, `int_gang` judged it on its live pods (none): "Gang not
assembled after 1200 s, 0/2 pods bound", a gang_assembly finding for a job that had run fine; every Job
deleted after it ran (ttlSecondsAfterFinished, kubectl delete) was one. And a new run admitted before its pods
were seen was timed from the first run's pods. Each tried watched from the start and as first seen in an
initial list (the first run listed while it ran, or never seen).
Real DuckLake, real models, reference-shaped objects (tests/sql/lakefix.py).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.sql.lakefix import Raw, build_lake, cond, node, pod, pod_status, ts, workload

NS, JOB = "ml", "train"


def _wl(name: str, admitted: float) -> dict:
    return workload(NS, name, "Job", JOB, 2, [
        cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue team-cq", admitted),
        cond("Admitted", "True", "Admitted", "The workload is admitted", admitted)], cluster_queue="team-cq")


def _fill(history: bool):
    def fill(raw: Raw) -> None:
        raw.event(0.0, node("a1", "rack-a"))
        raw.event(0.0, node("a2", "rack-a"))
        if history:
            first = raw.event(0.0, _wl("job-train-1", 0.1))
            pods = [raw.event(0.2, pod_status(pod(NS, f"train-{i}-x", "Job", JOB, f"a{i + 1}", "Running"), 0.2,
                                              bound=0.3, started=0.5)) for i in range(2)]
            for p in pods:
                raw.event(10.0, copy.deepcopy(p), "DELETED")
            raw.event(10.0, copy.deepcopy(first), "DELETED")
        second = _wl("job-train-2", 30.0)
        second["metadata"]["creationTimestamp"] = "2026-11-01T00:29:54Z"
        raw.event(30.0, second)
        raw.event(30.5, node("a1", "rack-a"), "MODIFIED")  # the data's "now": the new pods not seen yet
    return fill


@pytest.mark.parametrize("history", [True, False], ids=["watched", "initial-list"])
def test_a_rerun_waiting_for_its_pods_is_timed_from_its_own_admission(tmp_path: Path, history: bool) -> None:
    _, con, _ = build_lake(tmp_path / "data", _fill(history))
    try:
        row = con.execute("SELECT assembly_started_at, timed_out FROM intermediate.int_gang "
                          "WHERE namespace = ? AND job = ?", [NS, JOB]).fetchone()
        assert row is not None and row[0] == ts(30.0) and row[1] is False
        assert con.execute("SELECT root_cause FROM marts.findings WHERE job = ? AND root_cause <> 'healthy'",
                           [JOB]).fetchall() == []
    finally:
        con.close()


@pytest.mark.parametrize("history", [True, False], ids=["watched", "initial-list"])
def test_a_job_deleted_after_it_ran_is_not_a_gang_that_never_assembled(tmp_path: Path, history: bool) -> None:
    def fill(raw: Raw) -> None:
        seen = 0.0 if history else 5.0  # an initial list at minute 5: the history only in the objects' own times
        raw.event(seen, node("a1", "rack-a"))
        raw.event(seen, node("a2", "rack-a"))
        wl = raw.event(seen, _wl("job-train-1", 0.1))
        pods = [raw.event(seen, pod_status(pod(NS, f"train-{i}-x", "Job", JOB, f"a{i + 1}", "Running"), 0.2,
                                           bound=0.3, started=0.5)) for i in range(2)]
        for p in pods:
            done = copy.deepcopy(p)
            done["status"]["phase"] = "Succeeded"
            raw.event(9.5, done, "MODIFIED")
            raw.event(10.0, done, "DELETED")
        raw.event(10.0, copy.deepcopy(wl), "DELETED")
        raw.event(30.5, node("a1", "rack-a"), "MODIFIED")  # the data's "now", 20 minutes after

    _, con, _ = build_lake(tmp_path / "data", fill)
    try:
        state, = con.execute("SELECT state FROM intermediate.int_jobs WHERE job = ?", [JOB]).fetchone()
        assert state == "deleted"
        assert con.execute("SELECT timed_out FROM intermediate.int_gang WHERE job = ?", [JOB]).fetchall() == [(False,)]
        assert con.execute("SELECT root_cause FROM marts.findings WHERE job = ? AND root_cause <> 'healthy'",
                           [JOB]).fetchall() == []
    finally:
        con.close()
