"""Time sanity at the Prometheus edges (CONTRACT section 2, gangscope/timesanity.py), as for scrapes and watches.

Remote write: a simulated GPU-fault scenario's samples arrive as Prometheus sends them, with a year-9999 XID
and a seconds-stamped XID on a healthy job's nodes in the middle; those two go to the dead letter with their
reasons, every other sample lands, and the diagnosis is the scenario's truth. Backfill: the window is the
edge (every sample read lies inside it); a window ending in year 9999 or given in milliseconds is a one-line
error before anything is published, and a sane window of the same Prometheus lands what it stored.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from collectors.metrics.replayfile import read_metrics_file
from collectors.simulate import generate
from gangscope import config, telemetry
from gangscope.app import cli
from gangscope.app.replay import replay
from gangscope.transport import kafka as pkafka
from pipeline import models
from tests.collectors_metrics.lakeread import lake_query, landed_samples
from tests.collectors_prom.rw import HEADERS, write_request_body
from tests.collectors_prom.test_remote_write import _environ, _post, running, service_settings, stored_samples
from tests.servers.prometheus import Process

YEAR_9999_MS = 253402300799000


def _requests(metrics: Path, cluster: str, insane: list[tuple[dict[str, str], float, int]],
              per_request: int = 2000) -> tuple[list[bytes], int]:
    """The file's samples as remote-write bodies of ``per_request`` samples, the ``insane`` ones (labels with
    ``__name__``, value, timestamp) in the middle of the first; and how many samples the file holds."""
    series = []
    for b in read_metrics_file(metrics, cluster):
        for s, ts, v in zip(b.sample_series, b.sample_ts_ms, b.sample_value, strict=True):
            series.append(({"__name__": b.series_metric[s], "job": b.job, "instance": b.instance,
                            **b.series_labels[s]}, v, ts))
    total = len(series)
    series[per_request // 2:per_request // 2] = insane
    bodies = [write_request_body((labels, [(v, ts)]) for labels, v, ts in series[i:i + per_request])
              for i in range(0, len(series), per_request)]
    return bodies, total


def test_remote_write_sends_insane_times_to_the_dead_letter_and_keeps_the_diagnosis(
        settings: config.Settings, tmp_path: Path) -> None:
    sim = generate("gpu_fault", tmp_path / "sim", nodes=8, interval=60.0)
    doc = json.loads((sim.directory / "truth.json").read_text())
    truth = {(j["namespace"], j["job"]): j["root_cause"] for j in doc["jobs"]}
    healthy_nodes = [n for j in doc["jobs"] if j["root_cause"] == "healthy" for n in j["nodes"]]
    assert len(healthy_nodes) >= 2

    def xid(node: str, instance: str) -> dict[str, str]:  # a hardware XID on a healthy job's GPU, if it landed
        return {"__name__": "DCGM_FI_DEV_XID_ERRORS", "job": "dcgm-exporter", "instance": instance, "gpu": "0",
                "Hostname": node}

    start_ms = int(datetime.fromisoformat(doc["start"].replace("Z", "+00:00")).timestamp() * 1000)
    insane = [(xid(healthy_nodes[0], "hostile-a:9400"), 79.0, YEAR_9999_MS),
              (xid(healthy_nodes[1], "hostile-b:9400"), 79.0, (start_ms + 1_800_000) // 1000)]
    bodies, total = _requests(sim.directory / "metrics.prom", settings.cluster, insane)
    topic = f"{settings.kafka.topic_prefix}metrics"
    rejected_before = telemetry.REJECTED_AT_EDGE.labels(topic)._value.get()

    s = service_settings(settings)
    with running(s) as url:
        codes = [_post(url, body, HEADERS) for body in bodies]
    assert codes == [204] * len(bodies)  # the sane samples of the first request are not refused with the bad ones
    assert telemetry.REJECTED_AT_EDGE.labels(topic)._value.get() - rejected_before == 2
    replay(s, [str(sim.directory / "k8s.jsonl")], [], progress=None)

    dead = sorted(r[0] for r in lake_query(s, "SELECT reason FROM raw.dead_letters"))
    assert len(dead) == 2, dead
    assert dead[0].startswith("refused at the edge: remote write: DCGM_FI_DEV_XID_ERRORS: sample timestamp "
                              f"{(start_ms + 1_800_000) // 1000} looks like seconds (milliseconds")
    assert dead[1].startswith("refused at the edge: remote write: DCGM_FI_DEV_XID_ERRORS: sample timestamp "
                              f"{YEAR_9999_MS} is more than 600 s in the future")
    # Nothing else lost, nothing shifted: every sample of the file, none of the insane ones, none outside the hour.
    count, lo, hi, hostile = lake_query(s, "SELECT count(*), min(epoch_ms(ts)), max(epoch_ms(ts)), "
                                       "count(*) FILTER (target LIKE 'hostile%') FROM raw.metric_samples")[0]
    assert (count, hostile) == (total, 0)
    assert start_ms <= lo and hi <= start_ms + 3_600_000
    models.build(s)
    jobs = {(ns, job): cause for ns, job, cause in lake_query(s, "SELECT namespace, job, root_cause FROM marts.jobs")}
    assert jobs == truth  # the healthy jobs stay healthy, the faulty ones are found


def test_backfill_refuses_insane_windows_before_publishing(node_exporter: Process, start_prometheus,
                                                         settings: config.Settings, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    prom = start_prometheus({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                             "scrape_configs": [{"job_name": "node",
                                                 "static_configs": [{"targets": [node_exporter.address]}]}]})
    prom.wait_for('count_over_time(up{job="node"}[1m]) >= 4')
    cut_s = time.time() - 1
    common = ["backfill", "--prometheus", prom.url, "--match", '{job="node"}', "--window", "2s",
              "--bootstrap-servers", settings.kafka.bootstrap_servers, "--data", str(settings.data),
              "--cluster", settings.cluster]
    env = {"GANGSCOPE_KAFKA_TOPIC_PREFIX": settings.kafka.topic_prefix,
           "GANGSCOPE_PIPELINE_GROUP_ID": settings.pipeline.group_id}
    cases = [
        (["--start", f"{cut_s - 60:.3f}", "--end", "253402300799"], "--end 253402300799 is more than 600 s in the "
                                                                       "future"),
        (["--start", f"{int((cut_s - 60) * 1000)}", "--end", f"{cut_s:.3f}"], "looks like milliseconds (seconds "
                                                                                "since 1970 expected)"),
        (["--start", "1970-01-02T00:00:00Z", "--end", f"{cut_s:.3f}"], "--start 1970-01-02T00:00:00+00:00 is "
                                                                         "before 2000-01-01"),
        (["--start", "9999-12-31T00:00:00Z", "--end", "9999-12-31T23:59:59Z"], "is more than 600 s in the future"),
        (["--start", "nan", "--end", f"{cut_s:.3f}"], "--start nan"),
    ]
    with _environ(env):
        for flags, why in cases:
            assert cli.main([*common, *flags]) == 2, flags
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and why in err[0], err
        admin = pkafka.admin(settings, settings.kafka.bootstrap_servers)
        try:  # refused before anything was published: gangscope's topics are not even created
            assert not [t for t in admin.list_topics() if t.startswith(settings.kafka.topic_prefix)]
        finally:
            admin.close()
        assert cli.main([*common, "--start", f"{cut_s - 120:.3f}", "--end", f"{cut_s:.3f}"]) == 0
    assert landed_samples(settings) == stored_samples(prom, int(cut_s * 1000))
