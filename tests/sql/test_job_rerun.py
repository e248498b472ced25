"""A Job run again under the same name: the new run's gang is timed from its own admission, not from the
first run's pods.

Seen live (`demo --live`): a Kueue Job finished at minute 10 (pods and Workload deleted); a new Workload for the
same Job was admitted at minute 30, and in the build that saw it before its pods, `int_gang` started the new
gang's assembly at the first run's pod creation: "Gang not assembled after 1200 s, 0/2 pods bound", a
gang_assembly finding for a job that was only starting. Tried watched from the start and as first seen in an
initial list at minute 30 (the first run never seen).
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
