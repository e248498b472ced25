"""Builds that follow the new data (issue 37) give what a full build gives: the per-series table kept
incrementally (staging.stg_metric_series) and every model over it, through a scrape landed twice, a late
sample, series appearing mid-way and a UTC midnight (every series gets a new day-scoped id)."""

from __future__ import annotations

import json
from datetime import timedelta

from gangscope import config
from pipeline import lake, models
from tests.sql.lakefix import Raw, dcgm, node, ts

IB_RX = "node_infiniband_port_data_received_bytes_total"


def _ib(raw: Raw, minutes: float, value: float, instance: str = "10.0.0.1:9100") -> None:
    """An InfiniBand byte counter with no node label: its node is found by the instance's address."""
    raw.samples.append((raw.cluster, ts(minutes), IB_RX, json.dumps({"device": "mlx5_0", "port": "1"}), value,
                        None, f"http://{instance}/metrics", "node", instance))


def _minute(raw: Raw, m: int) -> None:
    """One minute of scrapes at 15 s from minute ``m``: GPU 0 always, GPU 1 from minute -1 on, the IB counter
    (reset at minute 2) and a job's throughput."""
    for k in range(4):
        t = m + k / 4
        dcgm(raw, t, "a1", 0, "DCGM_FI_DEV_GPU_UTIL", 90.0 + (m * 4 + k) % 7, ("ml", "job-0"))
        if m >= -1:
            dcgm(raw, t, "a1", 1, "DCGM_FI_DEV_GPU_UTIL", 80.0 + k, ("ml", "job-0"))
        _ib(raw, t, (t - 2 if t >= 2 else t + 10) * 15 * 1e9)
        raw.sample(t, "train_tokens_per_second", {"pod": "job-0", "namespace": "ml"}, 1000.0 + (m * 4 + k) % 5)


def _tables(con) -> dict[str, list[tuple]]:
    """Every model table's rows, sorted (NULLs as text so that rows compare)."""
    names = [r[0] for r in con.execute(
        "SELECT schema_name || '.' || table_name FROM duckdb_tables() WHERE database_name = ? "
        "AND schema_name IN ('staging', 'intermediate', 'marts') AND NOT starts_with(table_name, '_')",
        [lake.ALIAS]).fetchall()]
    return {n: sorted(map(repr, con.execute(f"SELECT * FROM {n}").fetchall())) for n in names}


def test_incremental_builds_equal_a_full_build(offline_settings: config.Settings) -> None:
    con = lake.connect(offline_settings)
    try:
        raw = Raw()
        raw.event(-10, node("a1", "r1"))
        for m in range(-3, 4):
            _minute(raw, m)
            if m == 1:
                _minute(raw, 0)  # minute 0's scrapes landed a second time (a collector re-sent them)
            if m == 3:  # samples that arrive late: 1 min 37 s and 3 min 22 s old when they land (a writer
                # catching up after an outage), older than every model's lookback. Their scrapes land with them, as
                # the pipeline lands them: the oldest sample time they carry is where staging is rebuilt from, and
                # the models over it read as far back as it was rebuilt.
                dcgm(raw, 1.625, "a1", 0, "DCGM_FI_DEV_GPU_UTIL", 55.0, ("ml", "job-0"))
                dcgm(raw, 0.125, "a1", 0, "DCGM_FI_DEV_GPU_UTIL", 44.0, ("ml", "job-0"))
                dcgm(raw, 0.125, "a1", 0, "DCGM_FI_PROF_PCIE_TX_BYTES", 5e9, ("ml", "job-0"))
                for offset, t in enumerate((1.625, 0.125)):
                    con.execute("INSERT INTO raw.scrapes VALUES ('default', ?, 't', 'dcgm', 'i', true, 0.1, 2, NULL, "
                                "0, ?, ?)", [ts(t), offset, ts(t)])
            raw.write(con)
            stats = models.build(offline_settings, con, only_stale=True)
            if m > -3:
                assert {"staging.stg_metric_series", "staging.stg_metric_signals"} <= set(stats.incremental)
        # Series ids are per UTC day: midnight made new ones, each resolved once.
        assert con.execute("SELECT count(*), count(DISTINCT series), count(DISTINCT day) "
                           "FROM staging.stg_metric_series").fetchone() == (9, 9, 2)  # the late PCIe series: one more
        inc = _tables(con)
        models.build(offline_settings, con, full=True)
        full = _tables(con)
        sig = con.execute("SELECT * FROM staging.stg_metric_signals").fetchall()
    finally:
        con.close()
    assert inc.keys() == full.keys() and "staging.stg_metric_series" in inc
    for name in full:
        assert inc[name] == full[name], name
    # Nothing doubled by the twice-landed minute; the late sample is there; the counter's rate crossed
    # midnight (one logical series, two ids) and its reset.
    util0 = [r for r in sig if r[2] == "gpu_util" and r[5] == "0"]
    assert len(util0) == 7 * 4 + 2 and len({r[1] for r in util0}) == len(util0)
    assert {55.0, 44.0} <= {r[10] for r in util0}
    assert any("pcie_bw" in r for r in inc["intermediate.int_node_bandwidth"])  # the late PCIe sample's bucket
    ib = sorted((r for r in sig if r[2] == "ib_bw"), key=lambda r: r[1])
    assert len(ib) == 7 * 4 and ib[0][10] is None and {r[4] for r in ib} == {"a1"}
    assert {r[10] for r in ib[1:]} == {2.5e8, 0.0}  # 3.75 GB per 15 s; after the reset, the new value (0) / dt


def test_a_node_known_later_is_found_for_a_series_resolved_before(offline_settings: config.Settings) -> None:
    """The node by address is joined at each build, not kept in the per-series table: a series resolved
    before its Node object landed gets the node for what is built after."""
    con = lake.connect(offline_settings)
    try:
        raw = Raw()
        for m in range(0, 3):
            _ib(raw, m, m * 1e9)
        raw.write(con)
        models.build(offline_settings, con)
        raw.event(3, node("a1", "r1"))
        for m in range(10, 13):  # past the model's lookback: these rows are built now, not rebuilt later
            _ib(raw, m, m * 1e9)
        raw.write(con)
        assert "staging.stg_metric_series" in models.build(offline_settings, con, only_stale=True).incremental
        got = con.execute("SELECT node, count(*) FROM staging.stg_metric_signals WHERE ts >= ? GROUP BY ALL",
                          [ts(10)]).fetchall()
    finally:
        con.close()
    assert got == [("a1", 3)]


def test_a_changed_signal_map_starts_the_series_table_over(offline_settings: config.Settings) -> None:
    con = lake.connect(offline_settings)
    try:
        raw = Raw()
        for m in range(3):
            raw.sample(m, "my_rate", {"pod": "job-0", "namespace": "ml"}, 10.0)
        raw.write(con)
        models.build(offline_settings, con)
        assert con.execute("SELECT count(*) FROM staging.stg_metric_series WHERE signal IS NULL").fetchone() == (1,)
        mine = config.load(overrides={"data": str(offline_settings.data),
                                      "metrics": {"throughput_metrics": ["my_rate"]}}, environ={})
        raw.sample(3, "my_rate", {"pod": "job-0", "namespace": "ml"}, 10.0)
        raw.write(con)
        stats = models.build(mine, con, only_stale=True)
        assert "staging.stg_metric_series" not in stats.incremental  # rebuilt, not appended to
        assert con.execute("SELECT signal FROM staging.stg_metric_series").fetchall() == [("throughput",)]
        assert con.execute("SELECT count(*) FROM staging.stg_metric_signals WHERE signal = 'throughput'"
                           ).fetchone()[0] >= 1
    finally:
        con.close()


def test_a_partition_landing_long_after_the_others_is_modelled(offline_settings: config.Settings) -> None:
    """A restart's backlog lands partition by partition: one partition's scrapes of minutes 4-6 land at minute 10,
    after builds moved the watermark minutes past the lookback (CI: healthy jobs were read as stalled for the minutes
    another partition had already passed). Scrapes are told new by their Kafka offset, not their time: the
    incremental builds give what a full build gives, the late samples included."""
    con = lake.connect(offline_settings)
    minutes = 13  # a whole build per minute: builds after the backlog too, and no more (30 took 146 s in CI)
    lagging, backlog_at = range(4, 7), 10  # partition 1's minutes that wait, and the minute they land
    late: list[int] = []
    offsets = {0: 0, 1: 0}

    def scrapes(m: int, partition: int) -> None:  # one scrape record per 15 s, as the pipeline lands them
        for k in range(4):
            con.execute("INSERT INTO raw.scrapes VALUES ('default', ?, 't', 'dcgm', 'i', true, 0.1, 1, NULL, ?, ?, ?)",
                        [ts(m + k / 4), partition, offsets[partition], ts(m + k / 4)])
            offsets[partition] += 1

    def gpu(raw: Raw, m: int, gpu_index: int) -> None:
        for k in range(4):
            dcgm(raw, m + k / 4, "a1", gpu_index, "DCGM_FI_DEV_GPU_UTIL", 70.0 + gpu_index * 10 + k, ("ml", "job-0"))

    try:
        raw = Raw()
        raw.event(-10, node("a1", "r1"))
        for m in range(0, minutes):
            raw = raw if m == 0 else Raw()
            gpu(raw, m, 0)
            scrapes(m, 0)
            if m in lagging:
                late.append(m)  # partition 1 lags: these wait
            else:
                gpu(raw, m, 1)
                scrapes(m, 1)
            if m == backlog_at:
                for lm in late:
                    gpu(raw, lm, 1)
                    scrapes(lm, 1)
            raw.write(con)
            stats = models.build(offline_settings, con, only_stale=True)
            if m > 0:
                assert "staging.stg_metric_signals" in stats.incremental
                # The scheduled build re-reads the new minute and the lookback (60 s) before it, not more; the one
                # after the backlog landed goes back to the backlog's oldest sample.
                since = stats.rebuilt_from["staging.stg_metric_signals"]
                want = (ts(late[0]) - timedelta(microseconds=1) if m == backlog_at
                        else ts(m - 0.25) - timedelta(seconds=60))
                assert since == want, (m, since)
        inc = _tables(con)
        landed = con.execute("SELECT count(*) FROM staging.stg_metric_signals WHERE gpu = '1'").fetchone()[0]
        models.build(offline_settings, con, full=True)
        full = _tables(con)
    finally:
        con.close()
    assert landed == minutes * 4  # every sample of GPU 1, the late ones too
    for name in full:
        assert inc[name] == full[name], name
