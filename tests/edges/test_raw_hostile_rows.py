"""Defence in depth: no single row in any raw table can make a model fail or change another job's findings.

The collectors refuse insane times at the edge (test_time_sanity.py); this checks the models do not
rely on it. Hypothesis inserts extreme and malformed rows (times from year 1 to 9999, NaN/Inf, huge
numbers, empty and 100k-character strings, unknown enum values, non-object JSON) into every raw table
beside the classification scenario of tests/sql/test_models_classify.py, in the same cluster, and
asserts that every model builds and the scenario's findings are exactly what they were without them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline import lake, models
from pipeline.land import insert_samples
from tests.sql import lakefix
from tests.sql.test_models_classify import NS, _build_cluster

HOSTILE = "zz-hostile"  # target / kafka_offset marker of the rows a test adds (removed after each example)
INSANE_TIMES = [datetime(1, 1, 1, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC), datetime(1999, 12, 31, tzinfo=UTC),
                datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC)]
TIME_TEXT = ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "", "garbage",
             "2026-13-45T99:99:99Z", "2026-11-01", "253402300799000"]
GIANT = "x" * 100_000
scalars = st.one_of(
    st.sampled_from(TIME_TEXT), st.sampled_from(["", GIANT, "\x1b[2J\x00", "Running", "Unknown-Phase", "True"]),
    st.text(max_size=12), st.integers(min_value=-(2**63), max_value=2**64), st.sampled_from([1e308, -1e308, -0.0]),
    st.booleans(), st.none(),
)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
# Sane times stay inside the scenario's window (a later sane time would rightly move the data's "now").
sane_times = st.integers(min_value=0, max_value=39).map(lakefix.ts)
row_times = st.one_of(st.sampled_from(INSANE_TIMES), sane_times)


def _templates() -> list[dict[str, Any]]:
    ns, own = "zz-ns", "zz-owner"
    return [
        lakefix.pod(ns, "zz-pod", "Job", own, "zz-node", "Running",
                    conditions=[lakefix.cond("PodScheduled", "True", "", "", 1)]),
        lakefix.workload(ns, "zz-wl", "Job", own, 2, [lakefix.cond("QuotaReserved", "False", "Pending",
                                                                   "insufficient unused quota", 1)],
                         cluster_queue="cq", required="cloud.provider.com/topology-rack",
                         assignment={"levels": ["kubernetes.io/hostname"],
                                     "domains": [{"values": ["n1"], "count": 2}]}),
        lakefix.node("zz-node", "rack-z"),
        lakefix.failed_scheduling(ns, "zz-pod", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", 1),
        lakefix.failed_scheduling(ns, "zz-pod", "rejected due to timeout", 1, new_api=True),
        lakefix.topology(),
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": own, "namespace": ns},
         "spec": {"minMember": 4, "scheduleTimeoutSeconds": 60}, "status": {"phase": "Scheduling"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
         "spec": {"clusterQueue": "cq"}, "status": {"pendingWorkloads": 3}},
        {"apiVersion": "example.com/v9", "kind": "Unknown", "metadata": {"name": "u", "namespace": ns}},
    ]


def _paths(obj: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every path into a JSON value (to replace what is there)."""
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*path, i))


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


@st.composite
def hostile_object(draw: st.DrawFn) -> dict[str, Any]:
    obj = json.loads(json.dumps(draw(st.sampled_from(_templates()))))
    paths = list(_paths(obj))[1:]
    for _ in range(draw(st.integers(1, 4))):
        obj = _set(obj, draw(st.sampled_from(paths)), draw(json_values))
        paths = list(_paths(obj))[1:] if isinstance(obj, (dict, list)) else []
        if not paths:
            break
    return obj


k8s_rows = st.tuples(row_times, st.sampled_from(["ADDED", "MODIFIED", "DELETED", "RELIST_END", "BOGUS", None]),
                     st.one_of(hostile_object(), json_values))
sample_rows = st.tuples(
    row_times,
    st.sampled_from(["DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "train_tokens_per_second",
                     "node_infiniband_port_data_received_bytes_total", "DCGM_FI_DEV_GPU_UTIL",
                     "kueue_pending_workloads",
                     "node_infiniband_port_state", "", GIANT]),
    st.one_of(st.dictionaries(st.sampled_from(["Hostname", "gpu", "pod", "namespace", "job_name", "device", "port",
                                               "cluster_queue", "status", "instance"]),
                              st.sampled_from(["zz-node", "zz-pod", "zz-ns", "0", "", GIANT, "\x00"]), max_size=6)
              .map(json.dumps),
              st.sampled_from(["[]", '"text"', "123", "null", "{}"])),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, 9223372036854775807.0, 79.0, -1.0]),
)
scrape_rows = st.tuples(row_times, st.sampled_from([True, False, None]),
                        st.sampled_from([math.nan, math.inf, -1.0, 1e308, 0.0]),
                        st.integers(min_value=-(2**31), max_value=2**31 - 1), st.sampled_from([None, "", GIANT]))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    from gangscope import config

    cfg = config.load(overrides={"data": str(tmp_path_factory.mktemp("hostile") / "data")}, environ={})
    con = lake.connect(cfg)
    raw = lakefix.Raw()
    _build_cluster(raw)
    raw.write(con)
    models.build(cfg, con, full=True)
    baseline = _findings(con)
    assert len({r[0] for r in baseline}) >= 10  # the scenario's jobs are there to be disturbed
    yield cfg, con, baseline
    con.close()


def _findings(con) -> list[tuple]:
    return con.execute(
        "SELECT job, root_cause, severity, started_at, ended_at, confidence, nodes::VARCHAR, evidence::VARCHAR, "
        "summary "
        "FROM marts.findings WHERE namespace = ? ORDER BY ALL", [NS]).fetchall()


def _insert(con, k8s: list, samples: list, scrapes: list) -> None:
    for i, (at, etype, obj) in enumerate(k8s):
        md = obj.get("metadata") if isinstance(obj, dict) else None
        md = md if isinstance(md, dict) else {}
        text = lambda v: v if isinstance(v, str) else None  # noqa: E731
        # bad_time NULL: as landed before the column existed, the view's own pattern must catch them
        con.execute("INSERT INTO raw.k8s_objects VALUES ('default', ?, ?, ?, ?, ?, ?, ?, ?, ?::JSON, -1, ?, NULL)",
                    [at, etype, text(obj.get("apiVersion")) if isinstance(obj, dict) else None,
                     text(obj.get("kind")) if isinstance(obj, dict) else None, text(md.get("namespace")),
                     text(md.get("name")), text(md.get("uid")) or f"zz-uid-{i}", text(md.get("resourceVersion")),
                     json.dumps(obj), -1 - i])
    if samples:
        insert_samples(con, pl.DataFrame(
            [("default", at, metric, labels, value, "zz-node" if i % 2 else None, HOSTILE, "zz", "zz:1")
             for i, (at, metric, labels, value) in enumerate(samples)],
            schema={"cluster": pl.String, "ts": pl.Datetime("us", "UTC"), "metric": pl.String, "labels": pl.String,
                    "value": pl.Float64, "node": pl.String, "target": pl.String, "job": pl.String,
                    "instance": pl.String}, orient="row"))
    for at, up, duration, n, error in scrapes:
        con.execute("INSERT INTO raw.scrapes VALUES ('default', ?, ?, 'zz', 'zz:1', ?, ?, ?, ?, -1, -1, ?)",
                    [at, HOSTILE, up, duration, n, error, at])
    con.execute("INSERT INTO raw.dead_letters VALUES (?, ?, -1, -1, ?, ?)",
                [INSANE_TIMES[-1], HOSTILE, GIANT, b"\x00\xff"])
    con.execute("INSERT INTO raw.kafka_offsets VALUES (?, -1, -1, ?, NULL)", [HOSTILE, INSANE_TIMES[0]])


def _remove(con) -> None:
    con.execute("DELETE FROM raw.k8s_objects WHERE kafka_partition = -1")
    con.execute("DELETE FROM raw.metric_points WHERE series IN (SELECT series FROM raw.metric_series WHERE target = ?)",
                [HOSTILE])
    con.execute("DELETE FROM raw.metric_series WHERE target = ?", [HOSTILE])
    con.execute("DELETE FROM raw.scrapes WHERE target = ?", [HOSTILE])
    con.execute("DELETE FROM raw.dead_letters WHERE topic = ?", [HOSTILE])
    con.execute("DELETE FROM raw.kafka_offsets WHERE topic = ?", [HOSTILE])


# The issue's own cases first: a watch event in year 9999 and a sample at 253402300799000 ms, on the
# scenario's own objects and series (a real pod, node n1's GPU) rather than beside them.
@example(k8s=[(INSANE_TIMES[3], "MODIFIED", lakefix.pod(NS, "gpu-job-0", "Job", "gpu-job", "n1", "Running"))],
         samples=[(INSANE_TIMES[3], "DCGM_FI_DEV_XID_ERRORS", json.dumps({"Hostname": "n1", "gpu": "0"}), 79.0),
                  (INSANE_TIMES[0], "train_tokens_per_second",
                   json.dumps({"namespace": NS, "pod": "slow-job-0", "job_name": "slow-job"}), 1e308)],
         scrapes=[(INSANE_TIMES[3], None, math.nan, -1, GIANT)])
@settings(max_examples=4, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(k8s=st.lists(k8s_rows, min_size=1, max_size=6), samples=st.lists(sample_rows, min_size=1, max_size=6),
       scrapes=st.lists(scrape_rows, max_size=3))
def test_hostile_raw_rows_neither_break_a_model_nor_change_findings(scenario, k8s, samples, scrapes) -> None:
    cfg, con, baseline = scenario
    _insert(con, k8s, samples, scrapes)
    try:
        models.build(cfg, con, full=True)  # raises UserError naming the model that failed
        got = _findings(con)
        assert got == baseline, (sorted(set(got) - set(baseline)), sorted(set(baseline) - set(got)))
        for table in ("marts.jobs", "marts.node_health", "marts.queue_health", "marts.idle_gpu_hours",
                      "marts.topology_label_audit"):
            con.execute(f"SELECT * FROM {table}").fetchall()  # every column converts to Python
    finally:
        _remove(con)
