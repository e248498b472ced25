"""sql/staging/stg_metric_signals.sql and stg_scrape_health.sql on a real DuckLake lake."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from gangscope import config
from pipeline import lake, models
from pipeline.land import insert_samples
from pipeline.signals import SIGNALS, signal_map, sql_variables

SQL = Path(__file__).resolve().parents[2] / "sql" / "staging"
T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
COLUMNS = ["cluster", "ts", "signal", "metric", "node", "gpu", "device", "namespace", "pod", "job_name", "value",
           "target", "scrape_job"]


def _t(i: int) -> datetime:
    return T0 + timedelta(seconds=15 * i)


class Lake:
    def __init__(self, settings: config.Settings) -> None:
        self.settings = settings
        self.con = lake.connect(settings)
        self.con.execute("CREATE TABLE staging.stg_node_addresses (cluster VARCHAR, node VARCHAR, address VARCHAR)")
        self.con.execute("INSERT INTO staging.stg_node_addresses VALUES ('c1', 'gpu-b', 'gpu-b'), "
                         "('c1', 'gpu-b', '10.1.0.5'), ('c2', 'other', '10.1.0.5')")
        self.rows: list[tuple] = []

    def add(self, i: int, metric: str, labels: dict[str, str], value: float, *, target: str = "t-a",
            job: str = "dcgm", instance: str = "10.9.9.9:9400", node: str | None = None) -> None:
        self.rows.append(("c1", _t(i), metric, json.dumps(labels, sort_keys=True), float(value), node, target, job,
                          instance))

    def signals(self) -> list[dict]:
        insert_samples(self.con, pl.DataFrame(self.rows, orient="row", schema=[
            "cluster", "ts", "metric", "labels", "value", "node", "target", "job", "instance"]))
        self.rows = []
        models.set_variables(self.con, sql_variables(self.settings))
        models.build_one(self.con, "staging.stg_metric_series")
        self.con.execute("SET VARIABLE watermark = '-infinity'::TIMESTAMPTZ")
        cur = self.con.execute((SQL / "stg_metric_signals.sql").read_text())
        cols = [d[0] for d in cur.description]
        assert cols == COLUMNS
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


@pytest.fixture
def lk(offline_settings: config.Settings):
    s = config.load(overrides={"data": str(offline_settings.data), "metrics": {"throughput_metrics": ["my_rate"]}},
                    environ={})
    out = Lake(s)
    yield out
    out.con.close()


def _pick(rows: list[dict], **where: object) -> list[dict]:
    return sorted((r for r in rows if all(r[k] == v for k, v in where.items())), key=lambda r: r["ts"])


def test_gauges_units_sentinels_and_node_from_hostname_label(lk: Lake) -> None:
    a = {"gpu": "0", "UUID": "GPU-1", "device": "nvidia0", "Hostname": "gpu-a"}
    b = {"gpu": "1", "UUID": "GPU-2", "device": "nvidia1", "hostname": "gpu-a", "pod": "llm-0", "namespace": "ns"}
    for i in range(3):
        lk.add(i, "DCGM_FI_DEV_GPU_UTIL", a, [97, 9223372036854775794, 88][i])
        lk.add(i, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", a, 1500.0 + i)
        lk.add(i, "DCGM_FI_PROF_PCIE_TX_BYTES", a, [2e9, 140737488355329.0, math.nan][i])
        lk.add(i, "DCGM_FI_DEV_SM_CLOCK", a, 1980)  # not a signal
    lk.add(0, "DCGM_FI_DEV_GPU_UTIL", b, 50)  # GPU 1 only reports once: no zero filling after
    lk.add(1, "DCGM_FI_DEV_XID_ERRORS", {**a, "err_code": "79", "err_msg": "GPU has fallen off the bus"}, 79)
    rows = lk.signals()
    util = _pick(rows, signal="gpu_util", gpu="0")
    assert [r["value"] for r in util] == [97, None, 88]  # INT64 sentinel -> NULL
    assert {(r["node"], r["scrape_job"], r["target"], r["device"]) for r in util} == {("gpu-a", "dcgm", "t-a", None)}
    nv = _pick(rows, signal="nvlink_bw")
    assert [r["value"] for r in nv] == [1.5e9, 1.501e9, 1.502e9]  # MB/s rate, not a counter: x 1e6 bytes/s
    pcie = _pick(rows, signal="pcie_bw")
    assert [r["value"] for r in pcie] == [2e9, None, None]  # FP64 sentinel and NaN -> NULL
    one = _pick(rows, signal="gpu_util", gpu="1")
    assert len(one) == 1 and (one[0]["node"], one[0]["pod"], one[0]["namespace"]) == ("gpu-a", "llm-0", "ns")
    (xid,) = _pick(rows, signal="xid")
    assert xid["value"] == 79 and xid["ts"] == _t(1)
    assert [r["value"] for r in _pick(rows, signal="sm_clock")] == [1980, 1980, 1980]
    assert not _pick(rows, metric="DCGM_FI_DEV_MEM_CLOCK")


def test_counter_rates_reset_and_saturation_node_from_instance(lk: Lake) -> None:
    ib = {"device": "mlx5_0", "port": "1"}
    kw = {"target": "http://10.1.0.5:9100/metrics", "job": "node", "instance": "10.1.0.5:9100"}
    for i, v in enumerate([1000, 16000, 500, 2000]):
        lk.add(i, "node_infiniband_port_data_received_bytes_total", ib, v, **kw)
    for i, v in enumerate([4294967000, 4294967295, 4294967295, 4294967295]):
        lk.add(i, "node_infiniband_symbol_error_total", ib, v, **kw)
    lk.add(0, "node_infiniband_state_id", ib, 4, **kw)
    lk.add(1, "node_infiniband_state_id", ib, 1, **kw)
    lk.add(0, "node_infiniband_info", {**ib, "board_id": "x"}, 1, **kw)
    rows = lk.signals()
    bw = _pick(rows, signal="ib_bw")
    assert [r["value"] for r in bw] == [None, 1000.0, 500 / 15, 100.0]  # first: no rate; then reset handled
    assert {(r["node"], r["device"], r["gpu"]) for r in bw} == {("gpu-b", "mlx5_0/1", None)}  # via instance address
    err = _pick(rows, signal="ib_errors")
    assert [r["value"] for r in err] == [None, 295 / 15, None, None]  # saturated at 2^32-1: unknown, not zero
    assert [r["value"] for r in _pick(rows, signal="ib_port_state")] == [4, 1]
    assert len(rows) == 10


def test_counter_rate_skips_sentinel_and_series_split_by_target(lk: Lake) -> None:
    lbl = {"gpu": "0", "Hostname": "gpu-a"}
    for i, v in enumerate([10, 9223372036854775792, 40]):
        lk.add(i, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", lbl, v)
    lk.add(0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", lbl, 1000, target="t-other")
    lk.add(1, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", lbl, 1000, target="t-other")
    rows = lk.signals()
    mine = _pick(rows, signal="ecc_dbe", target="t-a")
    assert [r["value"] for r in mine] == [None, None, 1.0]  # (40 - 10) / 30 s across the sentinel
    assert [r["value"] for r in _pick(rows, signal="ecc_dbe", target="t-other")] == [None, 0.0]


def test_case_insensitive_keys_pods_throughput_kueue_ray_nvlink_links(lk: Lake) -> None:
    lk.add(0, "DCGM_FI_DEV_GPU_UTIL", {"gpu": "3", "HOSTNAME": "gpu-c"}, 10)
    lk.add(0, "DCGM_FI_DEV_GPU_UTIL", {"gpu": "4", "Hostname": "gpu-c"}, 10, node="from-raw")
    lk.add(0, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L3", {"gpu_uuid": "GPU-9", "nvlink": "3", "hostname": "gpu-c"}, 2)
    lk.add(0, "DCGM_FI_PROF_NVLINK_L5_TX_BYTES", {"gpu": "2", "Hostname": "gpu-c"}, 7)
    tr = {"pod": "llm-1", "namespace": "team"}
    kw = {"job": "training", "target": "http://10.2.0.1:8000/metrics", "instance": "10.2.0.1:8000"}
    lk.add(0, "llm_tokens_per_second", tr, 1234.5, **kw)
    for i, v in enumerate([0, 300]):
        lk.add(i, "trainer_samples_total", {"exported_pod": "w-0", "exported_namespace": "team", "job_name": "bert"},
               v, **kw)
    lk.add(0, "my_rate", {"Pod": "llm-2", "Namespace": "team"}, 5, **kw)  # configured name, keys in any case
    lk.add(0, "kueue_pending_workloads", {"cluster_queue": "cq-a", "status": "inadmissible"}, 3, job="kueue")
    # Kueue HA (replica_role since v0.16): the follower's copy of a gauge must not double queue depth.
    for role, v, inst in (("leader", 5, "10.3.0.1:8443"), ("follower", 5, "10.3.0.2:8443")):
        lk.add(0, "kueue_pending_workloads", {"cluster_queue": "cq-b", "status": "active", "replica_role": role}, v,
               job="kueue", instance=inst)
    lk.add(0, "kueue_pending_workloads", {"cluster_queue": "cq-c", "status": "active", "replica_role": "standalone"},
           2, job="kueue")
    lk.add(0, "ray_placement_groups", {"State": "PENDING"}, 2, job="ray")
    lk.add(0, "ray_placement_groups", {"State": "CREATED"}, 9, job="ray")
    rows = lk.signals()
    assert {r["gpu"]: r["node"] for r in _pick(rows, signal="gpu_util")} == {"3": "gpu-c", "4": "from-raw"}
    link, prof = sorted(_pick(rows, signal="nvlink_bw"), key=lambda r: r["metric"])
    assert (link["gpu"], link["device"], link["value"]) == ("GPU-9", "nvlink3", 2e6)
    assert (prof["gpu"], prof["device"], prof["value"]) == ("2", "nvlink5", 7)
    thr = _pick(rows, signal="throughput")
    assert len(thr) == 4
    (tok,) = _pick(thr, metric="llm_tokens_per_second")
    assert (tok["pod"], tok["namespace"], tok["job_name"], tok["value"]) == ("llm-1", "team", None, 1234.5)
    assert [(r["pod"], r["namespace"], r["job_name"], r["value"]) for r in _pick(thr, metric="trainer_samples_total")] \
        == [("w-0", "team", "bert", None), ("w-0", "team", "bert", 20.0)]  # exported_* pod, counter as a rate
    (mine,) = _pick(thr, metric="my_rate")
    assert (mine["pod"], mine["namespace"], mine["value"]) == ("llm-2", "team", 5)
    kq = {r["device"]: r for r in _pick(rows, signal="kueue_pending")}
    assert len(_pick(rows, signal="kueue_pending")) == 3  # cq-a, cq-b (leader only), cq-c (standalone)
    assert (kq["cq-a"]["value"], kq["cq-a"]["node"]) == (3, None)
    assert (kq["cq-b"]["value"], kq["cq-c"]["value"]) == (5, 2)
    assert sum(r["value"] for r in _pick(rows, signal="kueue_pending")) == 10
    (pg,) = _pick(rows, signal="ray_pg_pending")
    assert pg["value"] == 2


def test_incremental_build_matches_full_build(lk: Lake) -> None:
    kw = {"job": "node", "instance": "10.1.0.5:9100"}
    for i in range(6):
        lk.add(i, "node_infiniband_port_data_transmitted_bytes_total", {"device": "mlx5_1", "port": "1"},
               i * 15000, **kw)
    full = lk.signals()
    # What the runner does for an incremental model: watermark = newest built ts minus lookback.
    lk.con.execute("SET VARIABLE watermark = ?::TIMESTAMPTZ", [_t(3)])
    inc = lk.con.execute((SQL / "stg_metric_signals.sql").read_text()).fetchall()
    assert [r[10] for r in inc] == [1000.0, 1000.0]  # ts 4 and 5, rates from samples before the watermark
    assert [r["value"] for r in sorted(full, key=lambda r: r["ts"])] == [None] + [1000.0] * 5


def test_model_files_parse_for_the_runner() -> None:
    found = models.discover()
    sig, health = found["staging.stg_metric_signals"], found["staging.stg_scrape_health"]
    series = found["staging.stg_metric_series"]
    assert sig.refs == {"staging.stg_metric_series", "raw.metric_points", "staging.stg_node_addresses"}
    assert (sig.materialized, sig.watermark) == ("incremental", "ts")
    assert series.refs == {"raw.metric_series", "staging.stg_metric_series"}  # it reads its own keys
    assert (series.materialized, series.unique_key, series.watermark) == ("incremental", "series", None)
    assert health.refs == {"raw.scrapes"}


def test_models_over_the_signals_read_back_as_far_as_the_signals_are_rebuilt() -> None:
    """The runner raises each incremental model's lookback to its inputs' (a late sample rebuilt into staging and
    not into the models over it made an incremental build differ from a full one); its own header stays."""
    own = models.discover()
    plan = {m.table: m for m in models.order(models.discover())}
    sig = own["staging.stg_metric_signals"].lookback_s
    readers = [n for n, m in plan.items() if "staging.stg_metric_signals" in m.refs and m.materialized == "incremental"]
    assert len(readers) >= 4
    assert all(plan[n].lookback_s == max(sig, own[n].lookback_s) for n in readers)
    # A reader with a shorter lookback of its own is raised to its input's.
    up = models.Model("staging", "up", Path("up.sql"), "SELECT 1", "incremental", "ts", lookback_s=300.0)
    down = models.Model("intermediate", "down", Path("down.sql"), "SELECT 1", "incremental", "ts", lookback_s=60.0,
                        refs={"staging.up"})
    assert [(m.table, m.lookback_s) for m in models.order({m.table: m for m in (up, down)})] == [
        ("staging.up", 300.0), ("intermediate.down", 300.0)]


def test_signal_map_covers_every_signal_and_config_extends_it(tmp_path: Path) -> None:
    s = config.load(overrides={"data": str(tmp_path), "metrics": {"signals": {"nvlink_bw": ["MY_NVL:gauge:1e6"]}}},
                    environ={})
    m = signal_map(s)
    assert {e["signal"] for e in m} == set(SIGNALS)
    assert m[0] == {"signal": "nvlink_bw", "metric": "MY_NVL", "match": "exact", "kind": "gauge", "scale": 1e6,
                    "unit": "configured", "label": None, "label_value": None, "priority": 0}
    assert [e["priority"] for e in m] == list(range(len(m)))


def test_scrape_health(lk: Lake) -> None:
    rows = [("c1", _t(0), "u1", "dcgm", "a:1", True, 0.1, 200, None, 0, 1),
            ("c1", _t(1), "u1", "dcgm", "a:1", False, 5.0, 0, "timeout after 5s", 0, 2),
            ("c1", _t(1), "u1", "dcgm", "a:1", False, 5.0, 0, "timeout after 5s", 1, 7),  # re-sent duplicate
            ("c1", _t(2), "u1", "dcgm", "a:1", True, 0.2, 199, "line 8: bad value 'x'", 0, 3)]
    lk.con.executemany("INSERT INTO raw.scrapes (cluster, scraped_at, target, job, instance, up, duration_s, "
                       "samples, error, kafka_partition, kafka_offset) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    got = lk.con.execute((SQL / "stg_scrape_health.sql").read_text() + " ORDER BY scraped_at").fetchall()
    assert [(r[5], r[7], r[8], r[9]) for r in got] == [(True, 200, None, None), (False, 0, "timeout after 5s", 15.0),
                                                       (True, 199, "line 8: bad value 'x'", 15.0)]


@pytest.mark.parametrize("bucket_s", [7.0, 60.0])
def test_integer_buckets_are_time_buckets(lk: Lake, bucket_s: float) -> None:
    """The intermediate models bucket on integer microseconds for speed; the buckets must be time_bucket's."""
    for i in range(40):
        for g in ("0", "1"):
            labels = {"gpu": g, "Hostname": "gpu-a", "pod": "p", "namespace": "n"}
            lk.add(i, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", labels, 1000.0 + i * (1 + int(g)))
        lk.add(i, "train_tokens_per_second", {"pod": "p", "namespace": "n"}, 5.0 + i, job="training")
    # ragged times
    lk.rows = [(*r[:1], r[1] + timedelta(microseconds=123457 * (k % 9)), *r[2:]) for k, r in enumerate(lk.rows)]
    lk.signals()
    lk.con.execute("CREATE TABLE staging.stg_metric_signals AS " + (SQL / "stg_metric_signals.sql").read_text())
    lk.con.execute("SET VARIABLE bucket_s = ?", [bucket_s])
    inter = SQL.parent / "intermediate"
    got_bw = lk.con.execute((inter / "int_node_bandwidth.sql").read_text()).fetchall()
    want_bw = lk.con.execute(
        "SELECT cluster, node, signal, time_bucket(to_seconds(?), ts) AS b, avg(value) * count(DISTINCT gpu), "
        "count(DISTINCT gpu) FROM staging.stg_metric_signals WHERE signal = 'nvlink_bw' GROUP BY ALL",
        [bucket_s]).fetchall()
    assert sorted(got_bw) == sorted(want_bw) and len(got_bw) >= 10
    got_tp = lk.con.execute((inter / "int_throughput_buckets.sql").read_text()).fetchall()
    want_tp = lk.con.execute(
        "SELECT cluster, namespace, pod, job_name, time_bucket(to_seconds(?), ts), avg(value) "
        "FROM staging.stg_metric_signals WHERE signal = 'throughput' GROUP BY ALL", [bucket_s]).fetchall()
    assert sorted(got_tp) == sorted(want_tp)
    got_gp = lk.con.execute((inter / "int_gpu_presence.sql").read_text()).fetchall()
    want_gp = lk.con.execute(
        "SELECT cluster, node, gpu, time_bucket(INTERVAL 1 MINUTE, ts), count(*), max(namespace), max(pod) "
        "FROM staging.stg_metric_signals WHERE gpu IS NOT NULL GROUP BY ALL").fetchall()
    assert sorted(got_gp) == sorted(want_gp) and {r[4] for r in got_gp} <= {4, 8}


def test_counter_gaps_and_one_label_set_on_two_instances(lk: Lake) -> None:
    """A rate skips NULL samples (sentinels); the same labels from two instances are two series, each attributed."""
    labels = {"device": "mlx5_0", "port": "1"}
    values = [0, 1500, 9223372036854775794, 4500, 6000]  # third sample is a DCGM-style blank: NULL
    for i, v in enumerate(values):
        lk.add(i, "node_infiniband_port_data_received_bytes_total", labels, v, job="node", instance="gpu-b:9100",
               target="t-b")
        lk.add(i, "node_infiniband_port_data_received_bytes_total", labels, v * 2, job="node", instance="10.7.7.7:9100",
               target="t-c", node="gpu-c")
    rows = lk.signals()
    b = _pick(rows, target="t-b")
    c = _pick(rows, target="t-c")
    assert [r["value"] for r in b] == [None, 100.0, None, 100.0, 100.0]  # 3000 over 30 s across the gap
    assert [r["value"] for r in c] == [None, 200.0, None, 200.0, 200.0]
    assert {r["node"] for r in b} == {"gpu-b"} and {r["node"] for r in c} == {"gpu-c"}
    assert len(rows) == 10  # nothing doubled by the series join


def test_a_scrape_landed_twice_gives_each_sample_once(lk: Lake) -> None:
    gpu = {"gpu": "0", "Hostname": "gpu-a"}
    ib = {"device": "mlx5_0", "port": "1"}
    for _ in range(2):  # the same three scrapes re-sent, e.g. by a collector that restarted
        for i in range(3):
            lk.add(i, "DCGM_FI_DEV_GPU_UTIL", gpu, 90 + i)
            lk.add(i, "node_infiniband_port_data_received_bytes_total", ib, 1500 * i, node="gpu-a")
    rows = lk.signals()
    assert [r["value"] for r in _pick(rows, signal="gpu_util")] == [90, 91, 92]
    assert [r["value"] for r in _pick(rows, signal="ib_bw")] == [None, 100.0, 100.0]  # rates unharmed by the copy
