"""Replay files as users have them, each produced in the test by the real tool: ``promtool tsdb dump`` of a real
Prometheus that scraped a real node_exporter, and prometheus_client's OpenMetrics exposition (checked against
promtool's own reading of it). No flags: the format is recognised by content."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.samples import Exemplar, Timestamp

from collectors.metrics.parse import parse_text
from collectors.metrics.replayfile import read_metrics_file, sniff_format
from gangscope import config
from gangscope.app.replay import replay
from gangscope.errors import UserError
from tests.collectors_metrics.lakeread import landed_samples, value_key
from tests.servers.prometheus import Process, promtool

Key = tuple[str, str, str, tuple[tuple[str, str], ...], int, str]


def _replayed(path: Path, **kw: str) -> list[Key]:
    out = []
    for b in read_metrics_file(path, "c1", **kw):
        for s, ts, v in zip(b.sample_series, b.sample_ts_ms, b.sample_value, strict=True):
            out.append((b.job, b.instance, b.series_metric[s], tuple(sorted(b.series_labels[s].items())), ts,
                        value_key(v)))
    return sorted(out)


def test_promtool_tsdb_dump_replays_as_prometheus_stored_it(node_exporter: Process, start_prometheus,
                                                            settings: config.Settings, tmp_path: Path) -> None:
    prom = start_prometheus({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                             "scrape_configs": [{"job_name": "node",
                                                 "static_configs": [{"targets": [node_exporter.address]}]}]})
    prom.wait_for('count_over_time(up{job="node"}[1m]) >= 3')
    cut_ms = int(time.time() * 1000) - 500
    api = prom.query("query", query='{job="node"}[10m]', time=f"{cut_ms / 1000:.3f}")["result"]
    ident = ("__name__", "job", "instance")
    expected = sorted((s["metric"]["job"], s["metric"]["instance"], s["metric"]["__name__"],
                       tuple(sorted((k, v) for k, v in s["metric"].items() if k not in ident)),
                       round(t * 1000), value_key(float(v)))
                      for s in api for t, v in s["values"])
    prom.halt()  # flushes the head to the WAL, which the dump reads
    dump = tmp_path / "dump.txt"
    dump.write_text(promtool("tsdb", "dump", f"--max-time={cut_ms}", str(prom.directory / "data")))
    assert dump.read_text().startswith('{__name__="')
    assert sniff_format(dump.read_text()[:4000]) == "text"

    got = _replayed(dump)
    # Prometheus' query API never returns staleness markers (NaN); the dump prints them. Nothing else differs.
    assert [k for k in got if k[5] != "nan"] == [k for k in expected if k[5] != "nan"]
    assert len(expected) >= 3 * 300 and {k[0] for k in got} == {"node"}
    assert {k[1] for k in got} == {node_exporter.address}
    assert len(got) == sum(1 for line in dump.read_text().splitlines() if line)

    # And through `gangscope replay` into the lake: every sample once, job/instance from the labels.
    stats = replay(settings, [], [str(dump)], progress=None)
    assert stats.landed and stats.metric_samples == len(got)
    assert landed_samples(settings) == got


def _om_exposition(t0: int) -> bytes:
    """An OpenMetrics exposition with timestamps, an exemplar, a unit and _created, as prometheus_client writes it."""
    class Collector:
        def collect(self):  # type: ignore[no-untyped-def]
            tokens = Metric("train_tokens", "Tokens.", "counter")
            for k in range(3):
                ex = Exemplar({"trace_id": "a # {b}"}, 1.0, Timestamp(t0 + 15 * k, 0)) if k == 1 else None
                tokens.add_sample("train_tokens_total", {"namespace": "ml", "pod": "p-0"}, 1000.0 * k,
                                  timestamp=Timestamp(t0 + 15 * k, 500_000_000), exemplar=ex)
            tokens.add_sample("train_tokens_created", {"namespace": "ml", "pod": "p-0"}, t0 - 100.0,
                              timestamp=Timestamp(t0 + 30, 500_000_000))
            yield tokens
            temp = Metric("gpu_temp", "Temperature.", "gauge", unit="celsius")
            for k in range(3):
                temp.add_sample("gpu_temp_celsius", {"Hostname": "node-1", "gpu": "0"}, 60.25 + k,
                                timestamp=Timestamp(t0 + 15 * k, 0))
            yield temp

    reg = CollectorRegistry()
    reg.register(Collector())
    return generate_latest(reg)


def test_openmetrics_exposition_replays_like_promtool_reads_it(settings: config.Settings, tmp_path: Path) -> None:
    t0 = int(time.time()) - 3600
    om = tmp_path / "trainer.om"
    om.write_bytes(_om_exposition(t0))
    assert om.read_text().rstrip().endswith("# EOF") and " # {" in om.read_text()
    assert sniff_format(om.read_text()) == "openmetrics"

    # promtool's own reading: create blocks from the file, dump them.
    blocks = tmp_path / "blocks"
    promtool("tsdb", "create-blocks-from", "openmetrics", str(om), str(blocks))
    (blocks / "wal").mkdir(exist_ok=True)
    theirs = parse_text(promtool("tsdb", "dump", str(blocks)), require_timestamps=True)
    assert not theirs.errors
    expected = sorted(("trainer", "trainer", m, tuple(sorted(lb.items())), ts, value_key(v))
                      for m, lb, v, ts in zip(theirs.metric, theirs.labels, theirs.value, theirs.ts_ms, strict=True)
                      if not m.endswith("_created"))  # Prometheus 2.42 stores _created as a series; we drop it

    got = _replayed(om)  # no job/instance labels: both named after the file
    assert got == expected and len(got) == 6
    assert ("trainer", "trainer", "train_tokens_total", (("namespace", "ml"), ("pod", "p-0")),
            (t0 + 15) * 1000 + 500, value_key(1000.0)) in got  # seconds -> ms, exemplar gone
    assert not any(k[2].endswith("_created") for k in got)

    stats = replay(settings, [], [str(om)], progress=None)
    assert stats.landed and landed_samples(settings) == got


def test_openmetrics_file_errors_name_the_line(tmp_path: Path) -> None:
    t0 = int(time.time()) - 3600
    text = _om_exposition(t0).decode()
    cut = tmp_path / "cut.om"
    cut.write_text(text.replace("# EOF\n", ""))
    with pytest.raises(UserError, match="does not end with # EOF"):
        list(read_metrics_file(cut, "c1"))
    after = tmp_path / "after.om"
    after.write_text(text + f"gpu_temp_celsius 1 {t0}\n")
    with pytest.raises(UserError, match=r"after.om:\d+: content after # EOF"):
        list(read_metrics_file(after, "c1"))
    no_ts = tmp_path / "nots.om"
    no_ts.write_text("# TYPE up gauge\nup 1\n# EOF\n")
    with pytest.raises(UserError, match=r"nots.om:2: .*no timestamp"):
        list(read_metrics_file(no_ts, "c1"))


def test_raw_text_dump_without_identity_joins_by_its_own_labels(tmp_path: Path) -> None:
    """A saved dcgm-exporter body with ms timestamps and no job/instance: named after the file; the Hostname
    label (not the default instance) is what joins it to its node."""
    t0 = int(time.time() * 1000) - 60_000
    path = tmp_path / "dcgm-node-1.prom"
    path.write_text("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                    f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="node-1"}} 87 {t0}\n'
                    f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="node-1"}} 88 {t0 + 15000}\n')
    batches = list(read_metrics_file(path, "c1"))
    assert [(b.job, b.instance, b.scraped_at_ms, b.sample_value) for b in batches] == [
        ("dcgm-node-1", "dcgm-node-1", t0, [87.0]), ("dcgm-node-1", "dcgm-node-1", t0 + 15000, [88.0])]
    assert all(not math.isnan(v) for b in batches for v in b.sample_value)
    assert batches[0].series_labels == [{"gpu": "0", "UUID": "GPU-1", "Hostname": "node-1"}]


def test_dump_named_after_its_node_joins_by_instance(settings: config.Settings, tmp_path: Path) -> None:
    """node_exporter's real InfiniBand excerpt saved with ms timestamps and no job/instance, in a file named after
    its node: replayed without flags, its samples reach that Node by the instance rule of CONTRACT section 2."""
    from pipeline import lake, models
    from pipeline.signals import sql_variables
    from tests.collectors_metrics.synthetic import IB_SAMPLE, reference_text

    t0 = int(time.time() * 1000) - 120_000
    body = [line for line in reference_text(IB_SAMPLE).splitlines() if line and not line.startswith("#")]
    assert not any("job=" in line or "instance=" in line for line in body)
    path = tmp_path / "gpu-node-7.prom"
    path.write_text("".join(f"{line} {t0 + k * 15_000}\n" for k in range(2) for line in body))
    stats = replay(settings, [], [str(path)], progress=None)
    assert stats.landed and stats.metric_samples == 2 * len(body)

    con = lake.connect(settings)
    try:
        con.execute("CREATE TABLE staging.stg_node_addresses AS SELECT * FROM (VALUES "
                    "('default', 'gpu-node-7', 'gpu-node-7'), ('default', 'gpu-node-7', '10.0.3.7')) "
                    "t(cluster, node, address)")
        models.set_variables(con, sql_variables(settings))
        models.build_one(con, "staging.stg_metric_series")
        con.execute("SET VARIABLE watermark = '-infinity'::TIMESTAMPTZ")
        sql = (Path(__file__).resolve().parents[2] / "sql" / "staging" / "stg_metric_signals.sql").read_text()
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()
    ib = [r for r in rows if r["signal"] in ("ib_bw", "ib_port_state")]
    assert ib and {r["node"] for r in ib} == {"gpu-node-7"}
    assert {r["scrape_job"] for r in ib} == {"gpu-node-7"}
