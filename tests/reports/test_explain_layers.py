"""Single layers of `gangscope explain` on rows written here: what each says where the models have no row for it.

(A real 1.37 cluster showed both: tests/k8s_real/test_first_run.py.)
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from reports import explain, lakeread

KEY = ("c", "ns", "job")


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    """An empty lake (the models are read from the catalog named ``lake``) with the two tables the layers read."""
    c = duckdb.connect()
    c.execute("ATTACH ':memory:' AS lake")
    c.execute("USE lake")
    c.execute("CREATE SCHEMA intermediate")
    c.execute("CREATE TABLE intermediate.int_placement (cluster VARCHAR, namespace VARCHAR, job VARCHAR)")
    c.execute(
        "CREATE TABLE intermediate.int_admission (cluster VARCHAR, namespace VARCHAR, job VARCHAR, workload VARCHAR,"
        " cluster_queue VARCHAR, created_at TIMESTAMP, admitted_at TIMESTAMP, wait_s DOUBLE, cause VARCHAR,"
        " cause_kind VARCHAR, reason VARCHAR, message VARCHAR, requeued BOOLEAN)"
    )
    yield c
    lakeread.forget(c)
    c.close()


def test_running_pods_without_a_topology_level_are_not_said_to_be_on_no_node(con: duckdb.DuckDBPyConnection) -> None:
    layer = explain._topology(con, KEY, {"nodes": '["gpu-1", "gpu-2"]'})
    assert layer.verdict == "not applicable"
    assert (
        layer.summary == "no topology request; its pods are on gpu-1, gpu-2; no Kueue Topology to judge their spread by"
    )
    assert explain._topology(con, KEY, {"nodes": []}).summary == "no topology request; its pods are on no node yet"


def test_blocked_by_quota_under_the_threshold_is_waiting_not_a_problem(con: duckdb.DuckDBPyConnection) -> None:
    """No admission finding yet (the verdict line says no incident): the layer waits; its finding makes it a problem."""
    con.execute(
        "INSERT INTO intermediate.int_admission VALUES ('c', 'ns', 'job', 'job-x', 'cq', TIMESTAMP '2026-01-01 00:00',"
        " NULL, 17, 'quota', 'quota', 'Pending', 'insufficient unused quota for nvidia.com/gpu', false)"
    )
    layer = explain._queue(con, KEY, {})
    assert layer.verdict == "waiting"
    assert layer.summary == (
        "not admitted in ClusterQueue cq for 17 s: Pending: insufficient unused quota for nvidia.com/gpu"
    )
