"""A Workload's QuotaReserved=False condition and Kueue's "Pending" Warning Event of the same second, with different
messages: int_admission takes cause, reason and message from one signal, the condition, whichever row landed first
and however the Workload was first seen (watched from creation, or first listed mid-wait). With plain arg_max on the
second, DuckDB's aggregation order decided the tie: the live page's e2e test showed the Event's message in some runs.
In a lake this small that order happens to favour the condition, so this guards the rule rather than replaying the
race."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sql.lakefix import Raw, build_lake, cond, iso, workload

COND_MSG = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, "
            "8 more needed")
EVENT_MSG = COND_MSG.replace("8 more", "16 more")  # the Event of an attempt a moment before
CASES = ("event-first", "condition-first", "listed")


def _event(ns: str, wl: str, minutes: float) -> dict:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{wl}.pending", "namespace": ns},
            "involvedObject": {"kind": "Workload", "name": wl, "namespace": ns}, "reason": "Pending",
            "message": EVENT_MSG, "type": "Warning", "firstTimestamp": iso(minutes), "lastTimestamp": iso(minutes),
            "count": 1}


def _fill(raw: Raw) -> None:
    for ns in CASES:
        wl = "job-llm-7b-1a2b3"
        w = workload(ns, wl, "Job", "llm-7b", 2, [], cluster_queue=None)
        w["metadata"]["creationTimestamp"] = iso(1.0)
        waiting = [cond("QuotaReserved", "False", "Pending", COND_MSG, 1.5)]
        if ns == "listed":  # first seen in the initial list at minute 20, its history in its own timestamps
            w["status"] = {"conditions": waiting}
            raw.event(20.0, _event(ns, wl, 1.5))
            raw.event(20.0, w)
            continue
        raw.event(1.0, dict(w, status={"conditions": []}))
        later = dict(w, status={"conditions": waiting})
        if ns == "event-first":
            raw.event(1.5, _event(ns, wl, 1.5))
            raw.event(1.5, later, "MODIFIED")
        else:
            raw.event(1.5, later, "MODIFIED")
            raw.event(1.5, _event(ns, wl, 1.5))
    raw.event(30.0, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})  # the lake's now


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    _, c, _ = build_lake(tmp_path_factory.mktemp("ties") / "data", _fill)
    yield c
    c.close()


@pytest.mark.parametrize("ns", CASES)
def test_the_condition_decides_a_tie_with_its_event(con, ns: str) -> None:
    rows = con.execute("SELECT cause, reason, message FROM intermediate.int_admission WHERE namespace = ?",
                       [ns]).fetchall()
    assert rows == [("quota", "Pending", COND_MSG)]
