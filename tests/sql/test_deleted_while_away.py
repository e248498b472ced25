"""Objects deleted while gangscope was not watching: its restart's list from nothing marks them deleted.

A first run lists a cluster at minute 0 and watches until minute 10; gangscope is then stopped. Meanwhile a stuck
gang is deleted. At minute 60 the collector starts again and lists every kind from nothing (RELIST_BEGIN with
resource_version ''): what it does not re-send is gone. A relist after 410 Gone (minute 20, resource_version
known) re-sends only what changed and must delete nothing; a namespace-scoped list speaks only for its namespace.
Real DuckLake, real models, reference-shaped objects (tests/sql/lakefix.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from gangscope.records import RELIST_BEGIN, RELIST_END
from pipeline import models
from reports import diagnose
from tests.sql.lakefix import Raw, build_lake, failed_scheduling, iso, node, pod, pod_status, ts

NS, OTHER = "ml", "team-b"
COSCHED = "scheduling.x-k8s.io/pod-group"
TIMEOUT_MSG = "rejected due to timeout after waiting 1m0s at plugin Coscheduling"
PG = ("scheduling.x-k8s.io/v1alpha1", "PodGroup")


def _podgroup(name: str, min_member: int, phase: str) -> dict:
    return {"apiVersion": PG[0], "kind": PG[1],
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": iso(0.0)},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 60}, "status": {"phase": phase}}


def _list(raw: Raw, at: float, api_version: str, kind: str, objs: list[dict], rv: str = "",
          namespace: str | None = None, in_flight: int = 0) -> None:
    """A list as the collector sends it; ``in_flight`` of its events have not landed yet."""
    raw.marker(at, RELIST_BEGIN, api_version, kind, rv, namespace)
    for o in objs:
        raw.event(at + 0.005, o)
    raw.marker(at + 0.01, RELIST_END, api_version, kind, "900", namespace, sent=len(objs) + in_flight)


def _fill(raw: Raw) -> None:
    nodes = [node(f"n{i}", "rack-a") for i in range(1, 7)]
    stuck_pg = _podgroup("stuck-gang", 4, "Scheduling")
    kept_pg = _podgroup("kept", 2, "Running")
    stuck = [pod_status(pod(NS, f"stuck-gang-{i}", "Job", "stuck-gang", f"n{i + 1}" if i < 2 else None, "Pending",
                            gpus=4, labels={COSCHED: "stuck-gang"}), 0.0,
                        **({"bound": 0.05, "started": 0.5} if i < 2 else
                           {"unschedulable": (0.05, "0/6 nodes are available: 6 Insufficient nvidia.com/gpu.")}))
             for i in range(4)]
    kept = [pod_status(pod(NS, f"kept-{i}", "Job", "kept", f"n{i + 4}", "Running", labels={COSCHED: "kept"}),
                       0.0, bound=0.05, started=0.5) for i in range(2)]
    other = pod_status(pod(OTHER, "other-0", "Job", "other", "n6", "Running"), 0.0, bound=0.05, started=0.5)
    # First run: everything listed from nothing at minute 0, then watched.
    _list(raw, 0.0, "v1", "Node", nodes)
    _list(raw, 0.0, *PG, [stuck_pg, kept_pg])
    _list(raw, 0.0, "v1", "Pod", [*stuck, *kept, other])
    raw.event(1.0, failed_scheduling(NS, "stuck-gang-2", TIMEOUT_MSG, 1.0))
    # Minute 20: 410 Gone, a relist from a known version re-sends nothing (nothing changed): no deletion.
    _list(raw, 20.0, "v1", "Pod", [], rv="4711")
    # gangscope stopped at minute 25; stuck-gang (PodGroup and pods) deleted meanwhile. Minute 60: restart, every
    # kind listed from nothing again; the Pod reflector is scoped to NS this time.
    _list(raw, 60.0, "v1", "Node", nodes)
    _list(raw, 60.0, *PG, [kept_pg])
    odd = copy.deepcopy(kept[1])  # re-sent with a time field staging's sanity check leaves out: not gone
    odd["metadata"].setdefault("annotations", {})["example.com/expiresAt"] = "2150-01-01T00:00:00Z"
    _list(raw, 60.0, "v1", "Pod", [kept[0], odd], namespace=NS)
    raw.event(70.0, node("n1", "rack-a"), "MODIFIED")  # the data's "now"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    _, con, _ = build_lake(tmp_path_factory.mktemp("away") / "data", _fill)
    yield con
    con.close()


def test_objects_missing_from_a_list_from_nothing_are_deleted_at_its_end(built) -> None:
    gone = built.execute("SELECT kind, namespace, name, observed_at FROM staging.stg_k8s_gone ORDER BY name").fetchall()
    assert [(k, ns, n) for k, ns, n, _ in gone] == [
        ("PodGroup", NS, "stuck-gang"), *[("Pod", NS, f"stuck-gang-{i}") for i in range(4)]]
    assert {at for *_, at in gone} == {ts(60.01)}
    deleted = dict(built.execute("SELECT name, deleted FROM staging.stg_pods").fetchall())
    assert deleted == {**{f"stuck-gang-{i}": True for i in range(4)}, "kept-0": False, "kept-1": False,
                       "other-0": False}


def test_a_relist_from_a_known_version_and_other_namespaces_delete_nothing(built) -> None:
    # other-0 (team-b) was not re-sent by the NS-scoped list; kept-* were not re-sent by the relist at minute 20.
    events = built.execute("SELECT name, event_type, observed_at FROM staging.stg_k8s_events "
                           "WHERE name IN ('other-0', 'kept-0') ORDER BY observed_at").fetchall()
    assert [e[:2] for e in events] == [("kept-0", "ADDED"), ("other-0", "ADDED"), ("kept-0", "ADDED")]
    assert built.execute("SELECT count(*) FROM staging.stg_k8s_events WHERE event_type = 'DELETED'").fetchone() == (5,)


def test_a_gang_deleted_while_away_is_resolved_not_stuck_for_ever(built) -> None:
    rows = {(r["job"], r["root_cause"]): r for r in diagnose.findings(built, include_healthy=True)}
    assert rows[("kept", "healthy")]["ended_at"] is None and rows[("other", "healthy")]["ended_at"] is None
    stuck = rows[("stuck-gang", "gang_assembly")]
    assert stuck["started_at"] == iso(1.0)  # timed out 60 s after creation, while watched
    assert stuck["ended_at"] == iso(60.01)  # over when the restart found it gone
    assert stuck["evidence"]["assembly_s"] == round(60.01 * 60)  # judged up to its deletion, not to "now" (minute 70)
    assert built.execute("SELECT state FROM marts.jobs WHERE job = 'stuck-gang'").fetchone() == ("deleted",)


def test_a_list_counts_only_once_every_event_it_sent_has_landed(tmp_path) -> None:
    """Markers and objects travel on different Kafka partitions: RELIST_END may land before the list's objects."""
    late = pod_status(pod(NS, "late-0", "Job", "late", "n1", "Running"), 0.0, bound=0.05, started=0.5)

    def fill(raw: Raw) -> None:
        _list(raw, 0.0, "v1", "Pod", [late])
        _list(raw, 60.0, "v1", "Pod", [], in_flight=1)  # late-0 was re-sent, but has not landed yet
        raw.event(70.0, node("n1", "rack-a"))

    settings, con, _ = build_lake(tmp_path / "data", fill)
    try:
        assert con.execute("SELECT count(*) FROM staging.stg_k8s_gone").fetchone() == (0,)
        raw = Raw()
        raw.event(60.005, late, "MODIFIED")  # ... now it has: it was never gone
        raw.write(con)
        models.build(settings, con)
        assert con.execute("SELECT count(*) FROM staging.stg_k8s_gone").fetchone() == (0,)
        assert con.execute("SELECT deleted FROM staging.stg_pods WHERE name = 'late-0'").fetchone() == (False,)
    finally:
        con.close()
