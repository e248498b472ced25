"""A real Prometheus remote-writing node_exporter samples to `gangscope run` (remote_write collector), compared
sample for sample with what Prometheus stored; a broker outage or a killed decoding worker in the middle loses
nothing; bad requests are 4xx."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cramjam
import pytest

from collectors.metrics.parse import parse_text
from collectors.prom.backfill import Source, signal_selector
from collectors.prom.remote_write import STALE_NAN, decode
from gangscope import config
from gangscope.app import cli
from gangscope.app.service import run_service
from gangscope.transport.broker import EmbeddedBroker
from pipeline.signals import signal_map
from tests.collectors_metrics.lakeread import Sample, landed_samples, value_key
from tests.collectors_prom.rw import HEADERS, write_request_body
from tests.servers.prometheus import Process, Prometheus, free_port


def service_settings(settings: config.Settings, **remote_write: Any) -> config.Settings:
    """The test's settings as `gangscope run` with only the remote-write collector and no scheduled jobs."""
    settings.collectors = ["remote_write"]
    settings.server.listen = f"127.0.0.1:{free_port()}"
    for job in ("models_build", "report_hourly", "report_daily", "compaction", "retention"):
        setattr(settings.schedule, job, "off")
    for k, v in remote_write.items():
        setattr(settings.remote_write, k, v)
    return settings


@contextmanager
def running(settings: config.Settings) -> Iterator[str]:
    """`gangscope run` in a thread; yields its remote-write URL; stops it (landing everything) on exit."""
    stop = threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(run_service(settings, stop)), daemon=True)
    t.start()
    url = f"http://{settings.server.listen}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2).close()
                break
            except urllib.error.HTTPError:  # it answers; unhealthy is fine here (other tests' components share
                break                        # this process's health registry)
            except OSError:
                if time.monotonic() > deadline or not t.is_alive():
                    raise RuntimeError("gangscope run did not start") from None
                time.sleep(0.2)
        yield url + "/api/v1/write"
    finally:
        stop.set()
        t.join(180)
    assert result == [0]


@contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def prometheus_config(node_exporter: Process, write_url: str) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": [node_exporter.address]}]}],
        "remote_write": [{"url": write_url, "remote_timeout": "30s", "metadata_config": {"send": False},
                          "queue_config": {"batch_send_deadline": "1s", "min_backoff": "100ms",
                                           "max_backoff": "1s"}}],
    }


def stored_samples(prom: Prometheus, cut_ms: int, job: str = "node") -> list[Sample]:
    """What Prometheus stored for ``job`` up to ``cut_ms``, as the lake rows would read."""
    result = prom.query("query", query=f'{{job="{job}"}}[10m]', time=f"{cut_ms / 1000:.3f}")["result"]
    ident = ("__name__", "job", "instance")
    return sorted((s["metric"]["job"], s["metric"]["instance"], s["metric"]["__name__"],
                   tuple(sorted((k, v) for k, v in s["metric"].items() if k not in ident)),
                   round(t * 1000), value_key(float(v)))
                  for s in result for t, v in s["values"])


def wait_landed_past(settings: config.Settings, cut_ms: int, timeout_s: float = 120.0) -> None:
    """Until the lake holds a node sample newer than ``cut_ms`` from every series Prometheus sends in order."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            newest = max((s[4] for s in landed_samples(settings, "job = 'node' AND metric = 'up'")), default=0)
        except Exception:  # the lake may be mid-commit
            newest = 0
        if newest > cut_ms + 2000:
            return
        time.sleep(0.5)
    raise AssertionError(f"no node sample past {cut_ms} landed within {timeout_s:.0f} s")


def test_remote_write_and_backfill_land_what_prometheus_stored(node_exporter: Process, start_prometheus,
                                                               settings: config.Settings, tmp_path: Path) -> None:
    s = service_settings(settings)
    with running(s) as write_url:
        prom = start_prometheus(prometheus_config(node_exporter, write_url))
        prom.wait_for('count_over_time(up{job="node"}[1m]) >= 4')
        cut_ms = int(time.time() * 1000) - 1000
        wait_landed_past(s, cut_ms)
        expected = stored_samples(prom, cut_ms)
    landed = [x for x in landed_samples(s, "job = 'node'") if x[4] <= cut_ms]
    assert len(expected) >= 4 * 300
    assert landed == expected  # every sample once, labels as sent, job/instance from Prometheus' target
    assert {x[1] for x in landed} == {node_exporter.address}
    assert all(v != "nan" for *_, v in landed)  # no staleness markers as data

    # Backfill of the same window from that Prometheus, into another lake, through the CLI: the same samples.
    first = min(x[4] for x in landed)
    data2 = tmp_path / "backfill-data"
    argv = ["backfill", "--prometheus", prom.url, "--start", f"{(first - 60_000) / 1000:.3f}",
            "--end", f"{cut_ms / 1000:.3f}", "--match", '{job="node"}', "--window", "2s",
            "--bootstrap-servers", s.kafka.bootstrap_servers, "--data", str(data2), "--cluster", s.cluster]
    s2 = config.load(overrides={"data": str(data2), "kafka": {"bootstrap_servers": s.kafka.bootstrap_servers,
                                                               "topic_prefix": s.kafka.topic_prefix + "bf."},
                                "pipeline": {"group_id": s.pipeline.group_id + "bf", "idle_seconds": 3.0}},
                     environ={})
    env = {"GANGSCOPE_KAFKA_TOPIC_PREFIX": s2.kafka.topic_prefix, "GANGSCOPE_PIPELINE_GROUP_ID": s2.pipeline.group_id}
    with _environ(env):
        assert cli.main(argv) == 0
    assert landed_samples(s2) == expected  # many small windows: nothing twice at their edges, nothing missed
    # The default selector (every metric of the signal map) is PromQL Prometheus accepts.
    default = signal_selector(signal_map(s))
    assert default.startswith('{__name__=~"') and "DCGM_FI_DEV_XID_ERRORS" in default
    assert Source(prom.url).query(f"{default}[1m]", cut_ms) == []  # no GPUs here: nothing, and no error


def _prom_counter(prom: Prometheus, name: str) -> float:
    with urllib.request.urlopen(prom.url + "/metrics", timeout=10) as r:
        p = parse_text(r.read().decode())
    return sum(v for m, v in zip(p.metric, p.value, strict=True) if m == name)


def test_broker_outage_during_remote_write_loses_nothing(node_exporter: Process, start_prometheus,
                                                         settings: config.Settings, tmp_path: Path) -> None:
    broker = EmbeddedBroker().start()
    try:
        settings.kafka.bootstrap_servers = broker.bootstrap
        s = service_settings(settings, ack_timeout_s=2.0)
        with running(s) as write_url:
            prom = start_prometheus(prometheus_config(node_exporter, write_url))
            prom.wait_for('count_over_time(up{job="node"}[1m]) >= 2')
            assert broker._proc is not None
            os.kill(broker._proc.pid, signal.SIGSTOP)  # the broker hangs: nothing is acknowledged
            try:
                time.sleep(8)
            finally:
                os.kill(broker._proc.pid, signal.SIGCONT)
            prom.wait_for('count_over_time(up{job="node"}[1m]) >= 14')
            cut_ms = int(time.time() * 1000) - 1000
            wait_landed_past(s, cut_ms, timeout_s=180)
            expected = stored_samples(prom, cut_ms)
            retried = _prom_counter(prom, "prometheus_remote_storage_samples_retried_total")
            failed = _prom_counter(prom, "prometheus_remote_storage_samples_failed_total")
    finally:
        broker.stop()
    landed = [x for x in landed_samples(s, "job = 'node'") if x[4] <= cut_ms]
    assert retried > 0 and failed == 0  # we answered 503 during the outage, and Prometheus retried
    # Nothing lost, nothing invented. (A request cut off mid-send may be written twice: identical rows.)
    assert sorted(set(landed)) == expected
    assert len(landed) - len(set(landed)) <= len(expected) // 2


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_malformed_requests_are_4xx_and_land_nothing(settings: config.Settings) -> None:
    s = service_settings(settings)
    now = int(time.time() * 1000)
    body = write_request_body([({"__name__": "up", "instance": "n1:9100", "job": "node", "zone": "a"},
                                [(1.0, now), (0.0, now + 1)])])
    with running(s) as url:
        assert _post(url, b"not snappy at all", HEADERS) == 400
        assert _post(url, bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff")), HEADERS) == 400
        assert _post(url, body, {**HEADERS, "Content-Type": "application/json"}) == 415
        assert _post(url, body, HEADERS) == 204
    landed = landed_samples(s)
    assert landed == [("node", "n1:9100", "up", (("zone", "a"),), now, "1.0"),
                      ("node", "n1:9100", "up", (("zone", "a"),), now + 1, "0.0")]


def test_decode_drops_staleness_markers_and_names_unlabelled_series() -> None:
    import struct

    stale = struct.unpack("<d", struct.pack("<Q", STALE_NAN))[0]
    out = decode(write_request_body([
        ({"__name__": "node_load1", "instance": "h:9100", "job": "node"},
         [(0.5, 1000), (stale, 2000), (float("nan"), 3000)]),  # an ordinary NaN is a value
        ({"__name__": "job:rate5m"}, [(2.0, 1500)]),  # a recording rule: no job/instance
    ]), "c1")
    assert [(x.job, x.instance, x.scraped_at_ms, x.series_metric, x.sample_ts_ms) for x in out] == [
        ("node", "h:9100", 1000, ["node_load1"], [1000, 3000]),
        ("prometheus", "prometheus", 1500, ["job:rate5m"], [1500])]
    assert out[0].series_labels == [{}]
    with pytest.raises(ValueError, match="snappy"):
        decode(b"\x00garbage", "c1")


def test_exemplars_and_native_histograms_are_ignored_and_do_not_split_a_series() -> None:
    """Exemplars beside a series' samples (some senders put them there) or alone, and native histograms, are
    not read; a series whose exemplar changes from request to request is still one series of the cache."""
    from collectors.prom import remote_write as rw

    labels = {"__name__": "node_load1", "instance": "h:9100", "job": "node", "zone": f"z{time.time_ns()}"}

    def body(at: int, trace: str) -> bytes:
        req = rw.SamplesWriteRequest.FromString(bytes(cramjam.snappy.decompress_raw(write_request_body([
            (labels, [(0.5, at)]), ({**labels, "__name__": "node_load5"}, [])]))))
        exemplar = rw.TimeSeries(labels=[{"name": "trace_id", "value": trace}]).SerializeToString()  # (labels, 1)
        req.timeseries[0].exemplars.append(exemplar)
        req.timeseries[1].exemplars.append(exemplar)  # an exemplar alone, as Prometheus sends them
        req.timeseries[1].histograms.append(b"\x08\x01")
        return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))

    cached = len(rw._SERIES)
    out = [b for at, trace in ((1000, "a1"), (2000, "b2")) for b in decode(body(at, trace), "c1")]
    assert [(b.job, b.instance, b.series_metric, b.series_labels, b.sample_ts_ms, b.sample_value) for b in out] == [
        ("node", "h:9100", ["node_load1"], [{"zone": labels["zone"]}], [at], [0.5]) for at in (1000, 2000)]
    assert len(rw._SERIES) == cached + 1  # one series, whatever its exemplars


def test_backpressure_and_unacknowledged_requests_are_503_and_withdrawn(tmp_path: Path) -> None:
    """A publisher whose Kafka is unreachable (nothing listens on the port): a backlog makes new requests 503 at
    once; a request Kafka does not acknowledge in time is 503 too, and its records leave the publisher."""
    from collectors.prom.remote_write import Receiver
    from gangscope.records import ScrapeBatch
    from gangscope.transport.publish import Publisher

    s = config.load(overrides={"data": str(tmp_path / "d")}, environ={})
    publisher = Publisher(s, f"127.0.0.1:{free_port()}")
    try:
        receiver = Receiver(publisher, "c1", ack_timeout_s=0.5, max_buffered=3)
        body = write_request_body(({"__name__": "up", "instance": f"n{i}:9100", "job": "node"},  # two targets
                                   [(1.0, 1_796_000_000_000)]) for i in range(2))
        code, headers, text = receiver.handle(body, HEADERS)
        assert code == 503 and headers["Retry-After"] and b"did not acknowledge" in text
        assert publisher.buffered == 0  # withdrawn: the retry will not double them
        for i in range(4):  # a backlog (scrapes waiting for Kafka)
            publisher.publish(ScrapeBatch(cluster="c1", target=f"t{i}", job="j", instance="i", scraped_at_ms=1))
        code, _, text = receiver.handle(body, HEADERS)
        assert code == 503 and b"records wait for Kafka" in text and publisher.buffered == 4
        receiver.close()
        assert receiver.handle(body, HEADERS)[0] == 503
        assert receiver.samples == 0 and receiver.rejected == 3
    finally:
        publisher.close(timeout_s=0.1)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _new_children(before: set[multiprocessing.Process]) -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p not in before]


def test_a_worker_killed_mid_request_answers_503_publishes_nothing_and_the_retry_lands_once(
        settings: config.Settings) -> None:
    """The request's worker is killed while it decodes: 503 (Prometheus retries), nothing of it reaches Kafka; the
    same body again is decoded by a new worker, answered 204 only once Kafka has every record, and lands once."""
    from collectors.prom.remote_write import Receiver
    from gangscope.transport.publish import Publisher
    from pipeline import consume

    now = int(time.time() * 1000) - 60_000
    sent = [({"__name__": f"m{i % 50}", "job": "node", "instance": f"n{i % 7}:9100", "k": str(i)}, float(i), now + i)
            for i in range(150_000)]  # new series: slow enough to decode (cache misses) to be killed in the middle
    body = write_request_body((labels, [(v, ts)]) for labels, v, ts in sent)
    publisher = Publisher(settings, settings.kafka.bootstrap_servers)
    before = set(multiprocessing.active_children())
    receiver = Receiver(publisher, settings.cluster, ack_timeout_s=60, workers=1)
    try:
        [worker] = _new_children(before)
        idle = _cpu_s(worker.pid)
        replies: list[tuple[int, dict[str, str], bytes]] = []
        t = threading.Thread(target=lambda: replies.append(receiver.handle(body, HEADERS)))
        t.start()
        deadline = time.monotonic() + 60
        while _cpu_s(worker.pid) < idle + 0.1:  # it is decoding this request
            assert time.monotonic() < deadline and t.is_alive(), "the worker did not start on the request"
            time.sleep(0.01)
        os.kill(worker.pid, signal.SIGKILL)
        t.join(60)
        [(code, headers, text)] = replies
        assert code == 503 and headers["Retry-After"] and b"worker died" in text
        assert publisher.buffered == 0 and publisher.published == 0  # nothing of it was published
        assert receiver.samples == 0

        code, _, _ = receiver.handle(body, HEADERS)  # Prometheus' retry, to a new worker
        assert code == 204
        assert publisher.buffered == 0  # 204 only once Kafka acknowledged every record
        assert [p.pid for p in _new_children(before)] != [worker.pid]
        offsets = publisher.acked_offsets()
    finally:
        receiver.close()
        publisher.close(timeout_s=10)
    assert receiver.samples == len(sent)
    consume.run(settings, settings.kafka.bootstrap_servers, until=offsets)
    assert landed_samples(settings) == sorted(
        ("node", lb["instance"], lb["__name__"], (("k", lb["k"]),), ts, value_key(v)) for lb, v, ts in sent)


def test_a_pool_that_missed_its_worker_dying_is_started_anew(settings: config.Settings) -> None:
    """The worker is killed and the pool hangs instead of failing (what CPython's pool did in CI after a second kill):
    the request times out with 503, the dead worker is seen, and the next request is decoded by a new one."""
    from concurrent.futures import Future

    from collectors.prom.remote_write import Receiver
    from gangscope.transport.publish import Publisher

    now = int(time.time() * 1000) - 60_000
    body = write_request_body(({"__name__": "up", "job": "node", "instance": "n1:9100"}, [(1.0, now)]) for _ in [0])
    publisher = Publisher(settings, settings.kafka.bootstrap_servers)
    before = set(multiprocessing.active_children())
    receiver = Receiver(publisher, settings.cluster, ack_timeout_s=1, workers=1)
    try:
        [worker] = _new_children(before)
        hung = receiver._pool
        assert hung is not None
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(10)
        hung.submit = lambda *a, **k: Future()  # type: ignore[method-assign]  # the hang: never done, never broken
        code, _, text = receiver.handle(body, HEADERS)
        assert code == 503 and b"not decoded" in text
        assert receiver._pool is not hung
        receiver.ack_timeout_s = 60
        code, _, _ = receiver.handle(body, HEADERS)
        assert code == 204 and receiver.samples == 1
        assert [p.pid for p in _new_children(before) if p.is_alive()] not in ([], [worker.pid])
    finally:
        receiver.close()
        publisher.close(timeout_s=10)


def test_killed_decoding_workers_lose_nothing_and_double_nothing(node_exporter: Process, start_prometheus,
                                                                 settings: config.Settings) -> None:
    """Real Prometheus remote-writing to `gangscope run` while its decoding worker is killed, twice: the requests it
    held are answered 503 and Prometheus' retries land them, each sample exactly once."""
    s = service_settings(settings, workers=1)
    before = set(multiprocessing.active_children())
    with running(s) as write_url:
        prom = start_prometheus(prometheus_config(node_exporter, write_url))
        prom.wait_for('count_over_time(up{job="node"}[1m]) >= 2')
        killed = set()
        for _ in range(2):
            deadline = time.monotonic() + 60
            while not (workers := [p for p in _new_children(before) if p.pid not in killed and p.is_alive()]):
                assert time.monotonic() < deadline, "no decoding worker came back"
                time.sleep(0.1)
            [worker] = workers
            os.kill(worker.pid, signal.SIGKILL)
            killed.add(worker.pid)
            time.sleep(3)
        prom.wait_for('count_over_time(up{job="node"}[1m]) >= 10')
        cut_ms = int(time.time() * 1000) - 1000
        wait_landed_past(s, cut_ms)
        expected = stored_samples(prom, cut_ms)
        retried = _prom_counter(prom, "prometheus_remote_storage_samples_retried_total")
        failed = _prom_counter(prom, "prometheus_remote_storage_samples_failed_total")
    landed = [x for x in landed_samples(s, "job = 'node'") if x[4] <= cut_ms]
    assert retried > 0 and failed == 0  # the requests the dead workers held were answered 503 and retried
    assert landed == expected  # every sample, once: a failed request published nothing
