"""`gangscope collect metrics --once` -> real Kafka -> pipeline landing -> the staging SQL."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from gangscope import config
from gangscope.app import cli
from pipeline import consume, lake, models
from pipeline.signals import sql_variables
from tests.collectors_metrics.httpserve import Route
from tests.collectors_metrics.httpserve import serve as http_serve
from tests.collectors_metrics.synthetic import IB_SAMPLE, L4_SAMPLE, reference_text

SQL = Path(__file__).resolve().parents[2] / "sql" / "staging"
RX = 'node_infiniband_port_data_received_bytes_total{device="mlx4_0",port="1"} 1.8527668e+07'


def test_collect_once_lands_and_models_signals(settings: config.Settings, tmp_path: Path) -> None:
    ib = reference_text(IB_SAMPLE)
    assert RX in ib
    routes = {"/dcgm": Route(reference_text(L4_SAMPLE)), "/ib": Route(ib)}
    with http_serve(routes) as (base, _):
        cfg = tmp_path / "gangscope.yaml"
        cfg.write_text(yaml.safe_dump({
            "kafka": {"topic_prefix": settings.kafka.topic_prefix},
            "metrics": {"targets": [{"url": f"{base}/dcgm", "job": "dcgm"}, {"url": f"{base}/ib", "job": "node"}]},
        }))
        argv = ["collect", "metrics", "--once", "--config", str(cfg), "--bootstrap-servers",
                settings.kafka.bootstrap_servers, "--data", str(settings.data), "--cluster", "c1"]
        assert cli.main(argv) == 0
        routes["/ib"] = Route(ib.replace(RX, RX.replace("1.8527668e+07", "3.3527668e+07")))  # +15 MB
        assert cli.main(argv) == 0
    landed, dead = 0, 0
    deadline = time.monotonic() + 60
    while landed < 4 and time.monotonic() < deadline:  # --once stops when idle; a loaded machine can be slow
        stats = consume.run(settings, settings.kafka.bootstrap_servers, once=True)
        landed, dead = landed + stats.scrapes, dead + stats.dead
    assert landed == 4 and dead == 0

    con = lake.connect(settings)
    try:
        con.execute("CREATE TABLE staging.stg_node_addresses AS SELECT 'c1' AS cluster, 'ib-node' AS node, "
                    "'127.0.0.1' AS address")
        models.set_variables(con, sql_variables(settings))
        models.build_one(con, "staging.stg_metric_series")
        con.execute("SET VARIABLE watermark = '-infinity'::TIMESTAMPTZ")
        cur = con.execute((SQL / "stg_metric_signals.sql").read_text())
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        health = con.execute((SQL / "stg_scrape_health.sql").read_text()).fetchall()
        assert con.execute("SELECT count(*) FROM raw.scrapes").fetchone()[0] == 4  # nothing doubled
        ts = [r[0] for r in con.execute("SELECT DISTINCT scraped_at FROM raw.scrapes WHERE job = 'node' "
                                        "ORDER BY 1").fetchall()]
    finally:
        con.close()
    assert len(health) == 4 and all(h[5] for h in health)  # up
    util = [r for r in rows if r["signal"] == "gpu_util"]
    assert len(util) == 2 and {(r["node"], r["gpu"], r["value"], r["scrape_job"]) for r in util} == {
        ("i-030791dc5a37cd257", "0", 0.0, "dcgm")}
    rx = sorted((r for r in rows if r["signal"] == "ib_bw" and r["metric"].endswith("received_bytes_total")
                 and r["device"] == "mlx4_0/1"), key=lambda r: r["ts"])
    dt = (ts[1] - ts[0]).total_seconds()
    assert [r["node"] for r in rx] == ["ib-node", "ib-node"]  # instance 127.0.0.1:port -> Node address
    assert rx[0]["value"] is None and abs(rx[1]["value"] - 15e6 / dt) < 1e-6 * 15e6 / dt
    states = {r["device"]: r["value"] for r in rows if r["signal"] == "ib_port_state"}
    assert states == {"i40iw0/1": 4, "mlx4_0/1": 4, "mlx4_0/2": 4}
    # Only mapped signals: the L4 sample has no NVLink/XID series (missing, not zero).
    assert not [r for r in rows if r["signal"] in ("xid", "nvlink_bw")]
