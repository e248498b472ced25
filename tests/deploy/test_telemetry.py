"""gangscope's own /metrics and /healthz, scraped over HTTP and parsed with prometheus_client."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gangscope import telemetry
from gangscope.records import ScrapeBatch


def _no_publisher_running() -> None:
    """Wait for the publishers of earlier tests in this worker to stop: a running one reports to the process-wide
    ``kafka`` component after every send (CI, 7 Dec: the problem a test had just set was cleared under it)."""
    import threading

    deadline = time.monotonic() + 60
    while running := [t for t in threading.enumerate() if t.name == "gangscope-publisher"]:
        assert time.monotonic() < deadline, f"{len(running)} publisher(s) of an earlier test still running"
        time.sleep(0.1)


@pytest.fixture
def server() -> Iterator[telemetry.Server]:
    _no_publisher_running()
    with telemetry._beats_lock:  # beats other tests' components may have left
        telemetry._beats.clear()
        telemetry._problems.clear()
        telemetry._degraded.clear()
    srv = telemetry.start_http_server("127.0.0.1:0")
    yield srv
    srv()
    with telemetry._beats_lock:
        telemetry._beats.clear()
        telemetry._problems.clear()
        telemetry._degraded.clear()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text) for s in fam.samples
    }


def test_metrics_endpoint_exposes_every_metric(server: telemetry.Server) -> None:
    topic = f"t{time.monotonic_ns()}"  # labels unique to this test: the registry is process-wide
    telemetry.RECORDS_CONSUMED.labels(topic).inc(7)
    telemetry.RECORDS_LANDED.labels(topic).inc(5)
    telemetry.DEAD_LETTERS.labels(topic).inc(2)
    telemetry.CONSUMER_LAG.labels(topic, "3").set(11)
    telemetry.BATCH_SECONDS.observe(0.2)
    telemetry.scrape_done(ScrapeBatch(cluster="c", target="u", job=f"dcgm-{topic}", instance=topic, scraped_at_ms=0,
                                      up=False, duration_s=0.05), "timeout")
    telemetry.WATCH_RECONNECTS.labels(topic).inc()
    telemetry.WATCH_RELISTS.labels(topic).inc(2)
    class Pub:
        buffered = 100

    pub = Pub()
    telemetry.track_publisher(pub)  # the way the publisher reports it (a live one may own the gauge)
    telemetry.PUBLISHER_DROPPED.labels(topic).inc(4)
    telemetry.MODEL_BUILD_SECONDS.observe(3.0)
    telemetry.LAST_REPORT.set(1_700_000_000)

    status, ctype, body = _get(server.url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    s = _samples(body)
    assert s[("gangscope_records_consumed_total", (("topic", topic),))] == 7
    assert s[("gangscope_records_landed_total", (("topic", topic),))] == 5
    assert s[("gangscope_dead_letters_total", (("topic", topic),))] == 2
    assert s[("gangscope_consumer_lag", (("partition", "3"), ("topic", topic)))] == 11
    # Targets under scrape_job/scrape_instance: job/instance are Prometheus' own labels when it scrapes gangscope.
    target = (("scrape_instance", topic), ("scrape_job", f"dcgm-{topic}"))
    assert s[("gangscope_scrape_up", target)] == 0
    assert s[("gangscope_scrape_duration_seconds", target)] == 0.05
    assert s[("gangscope_scrape_failures_total", (("reason", "timeout"), ("scrape_job", f"dcgm-{topic}")))] == 1
    assert not any(k[0].startswith("gangscope_scrape") and dict(k[1]).keys() & {"job", "instance"} for k in s)
    assert s[("gangscope_watch_reconnects_total", (("kind", topic),))] == 1
    assert s[("gangscope_watch_relists_total", (("kind", topic),))] == 2
    assert s[("gangscope_publisher_buffered_records", ())] == 100
    assert s[("gangscope_publisher_dropped_total", (("topic", topic),))] == 4
    assert s[("gangscope_last_report_timestamp_seconds", ())] == 1_700_000_000
    assert s[("gangscope_batch_seconds_count", ())] >= 1
    assert s[("gangscope_model_build_seconds_bucket", (("le", "5.0"),))] >= 1
    # Only gangscope's registry: no process-global default metrics leak in.
    assert all(name.startswith("gangscope_") for name, _ in s)

    # Counting goes on between scrapes.
    telemetry.RECORDS_LANDED.labels(topic).inc(2)
    assert _samples(_get(server.url + "/metrics")[2])[("gangscope_records_landed_total", (("topic", topic),))] == 7


def test_healthz_follows_heartbeats(server: telemetry.Server) -> None:
    status, ctype, body = _get(server.url + "/healthz")
    assert status == 200 and ctype == "application/json"
    assert json.loads(body) == {"status": "ok", "components": {}}

    telemetry.heartbeat("pipeline", max_age_s=0.3)
    telemetry.heartbeat("collector.k8s", max_age_s=60)
    status, _, body = _get(server.url + "/healthz")
    assert status == 200 and set(json.loads(body)["components"]) == {"pipeline", "collector.k8s"}

    time.sleep(0.4)  # the pipeline stops beating
    status, _, body = _get(server.url + "/healthz")
    doc = json.loads(body)
    assert status == 503 and doc["status"] == "unhealthy"
    assert doc["components"]["pipeline"]["ok"] is False and doc["components"]["collector.k8s"]["ok"] is True

    telemetry.heartbeat("pipeline")  # beats again, keeping its max age
    assert _get(server.url + "/healthz")[0] == 200
    time.sleep(0.4)
    telemetry.forget("pipeline")  # stopped on purpose: not a failure
    assert _get(server.url + "/healthz")[0] == 200


def test_unknown_path_and_stop(server: telemetry.Server) -> None:
    assert _get(server.url + "/nope")[0] == 404
    url = server.url
    server.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/metrics", timeout=2)


def test_parse_listen() -> None:
    assert telemetry.parse_listen("0.0.0.0:9108") == ("0.0.0.0", 9108)
    assert telemetry.parse_listen(":9108") == ("0.0.0.0", 9108)
    assert telemetry.parse_listen("[::1]:9108") == ("::1", 9108)
    with pytest.raises(ValueError, match="HOST:PORT"):
        telemetry.parse_listen("localhost")


def test_hooks_count_landed_dead_and_lag(settings) -> None:
    """The one-line hooks the pipeline calls, against a real consumer on the embedded broker."""
    from kafka import TopicPartition

    from gangscope.transport import kafka as pkafka

    topic = f"{settings.kafka.topic_prefix}lag"
    prod = pkafka.producer(settings, settings.kafka.bootstrap_servers)
    for i in range(10):
        prod.send(topic, key=b"k", value=str(i).encode(), partition=0)
    prod.flush()
    prod.close()
    consumer = pkafka.consumer(settings, settings.kafka.bootstrap_servers, max_poll_records=3)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=500).values():
                telemetry.records_polled(recs)
                got.extend(recs)
        assert len(got) == 3
        telemetry._lag_at = 0.0
        telemetry.pipeline_tick(consumer, component=f"pipeline-{topic}")
        lag = telemetry.REGISTRY.get_sample_value("gangscope_consumer_lag", {"topic": topic, "partition": "0"})
        assert lag == 7
        assert telemetry.REGISTRY.get_sample_value("gangscope_records_consumed_total", {"topic": topic}) == 3
        assert telemetry.health()[1]["components"][f"pipeline-{topic}"]["ok"] is True

        consumer.unsubscribe()  # partition gone: its lag series goes too
        telemetry._lag_at = 0.0
        telemetry.pipeline_tick(consumer, component=f"pipeline-{topic}")
        assert telemetry.REGISTRY.get_sample_value("gangscope_consumer_lag", {"topic": topic, "partition": "0"}) is None
    finally:
        consumer.close()
        telemetry.forget(f"pipeline-{topic}")

    records = [(topic, 0, i, b"x") for i in range(5)] + [(f"{topic}.b", 1, 0, b"y")]
    telemetry.LAST_LANDING.set(0)
    telemetry.batch_landed([])  # nothing landed: not a landing
    assert telemetry.REGISTRY.get_sample_value("gangscope_last_landing_timestamp_seconds") == 0
    before = time.time()
    telemetry.batch_landed(records, dead=[(records[0], "bad json")])
    assert before <= telemetry.REGISTRY.get_sample_value("gangscope_last_landing_timestamp_seconds") <= time.time()
    assert telemetry.REGISTRY.get_sample_value("gangscope_records_landed_total", {"topic": topic}) == 5
    assert telemetry.REGISTRY.get_sample_value("gangscope_records_landed_total", {"topic": f"{topic}.b"}) == 1
    assert telemetry.REGISTRY.get_sample_value("gangscope_dead_letters_total", {"topic": topic}) == 1


def test_publisher_buffer_gauge_follows_a_live_publisher() -> None:
    class Pub:
        buffered = 42

    pub = Pub()
    telemetry.track_publisher(pub)
    assert telemetry.REGISTRY.get_sample_value("gangscope_publisher_buffered_records") == 42
    pub.buffered = 3
    assert telemetry.REGISTRY.get_sample_value("gangscope_publisher_buffered_records") == 3
    del pub  # a publisher that is gone reports nothing buffered and is not kept alive
    assert telemetry.REGISTRY.get_sample_value("gangscope_publisher_buffered_records") == 0


def test_pipeline_run_moves_the_metrics(settings) -> None:
    """consume.run over real records: consumed, landed, dead letters and batch latency all count."""
    from datetime import UTC, datetime

    from gangscope.records import K8sEvent
    from gangscope.transport import kafka as pkafka
    from gangscope.transport.publish import Publisher
    from pipeline import consume

    bootstrap = settings.kafka.bootstrap_servers
    topic = pkafka.topics(settings)["k8s"]

    def value(name: str) -> float:
        return telemetry.REGISTRY.get_sample_value(name, {"topic": topic}) or 0.0

    batches_before = telemetry.REGISTRY.get_sample_value("gangscope_batch_seconds_count") or 0.0
    pkafka.ensure_topics(settings, bootstrap)
    with Publisher(settings, bootstrap) as pub:
        for i in range(50):
            obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "ns",
                                                                   "uid": f"u{i}", "resourceVersion": str(i)}}
            pub.publish(K8sEvent(cluster="c1", type="ADDED", observed_at=datetime.now(UTC), object=obj))
        assert pub.flush(30)
    prod = pkafka.producer(settings, bootstrap)
    prod.send(topic, key=b"bad", value=b"{not json")  # lands as a dead letter, counted as one
    prod.flush()
    prod.close()

    stats = consume.run(settings, bootstrap, once=True)
    assert stats.k8s_rows == 50 and stats.dead == 1
    assert value("gangscope_records_consumed_total") == 51
    assert value("gangscope_records_landed_total") == 51
    assert value("gangscope_dead_letters_total") == 1
    assert (telemetry.REGISTRY.get_sample_value("gangscope_batch_seconds_count") or 0) > batches_before
    assert "pipeline" not in telemetry.health()[1]["components"]  # a clean stop is not a failure


def test_healthz_names_what_fails_and_why(server: telemetry.Server) -> None:
    up = ScrapeBatch(cluster="c", target="http://n:9400/metrics", job="dcgm", instance="n:9400", scraped_at_ms=1)
    telemetry.scrape_done(up, interval_s=0.1)  # a delivered scrape: alive for 3 intervals
    telemetry.heartbeat("watch-pods", 60)
    assert _get(server.url + "/healthz")[0] == 200
    telemetry.problem("kafka", "broker 127.0.0.1:1 unreachable: 7 record(s) buffered")
    telemetry.problem("models_build", "last run failed: UserError: model marts.findings failed")
    time.sleep(0.35)  # three metrics intervals without a delivered scrape
    telemetry.scrape_done(ScrapeBatch(cluster="c", target="http://n:9400/metrics", job="dcgm", instance="n:9400",
                                      scraped_at_ms=2, up=False, error="timeout"), interval_s=0.1)
    code, _, body = _get(server.url + "/healthz")
    comps = json.loads(body)["components"]
    assert code == 503
    assert comps["kafka"] == {"ok": False, "reason": "broker 127.0.0.1:1 unreachable: 7 record(s) buffered"}
    assert comps["models_build"]["reason"].startswith("last run failed: UserError")
    assert not comps["collector-metrics"]["ok"] and "nothing delivered for" in comps["collector-metrics"]["reason"]
    assert comps["watch-pods"]["ok"] and "reason" not in comps["watch-pods"]
    samples = _samples(_get(server.url + "/metrics")[2])
    expected = {"collector-metrics": 0.0, "kafka": 0.0, "models_build": 0.0, "watch-pods": 1.0}
    assert {c: samples[("gangscope_component_healthy", (("component", c),))] for c in expected} == expected
    telemetry.problem("kafka", None)
    telemetry.problem("models_build", None)
    telemetry.scrape_done(up, interval_s=0.1)
    assert _get(server.url + "/healthz")[0] == 200


def test_degraded_is_said_with_200_and_its_reason_redacted(server: telemetry.Server) -> None:
    """A component waiting out an outage (the lake's object store away) is degraded, not failing: /healthz answers
    200 (a liveness probe must not restart it), names it and why, without the credentials the error quoted."""
    telemetry.heartbeat("pipeline", 60)
    telemetry.degraded("lake", "landing waits for the lake's storage or catalog: Unable to connect to Postgres at "
                               "\"postgres://gs:pw-canary-1@pg:5432/lake\"")
    code, _, body = _get(server.url + "/healthz")
    health = json.loads(body)
    assert code == 200 and health["status"] == "degraded"
    assert health["components"]["lake"]["degraded"] and health["components"]["lake"]["ok"]
    assert "Unable to connect" in health["components"]["lake"]["reason"] and "pw-canary-1" not in body
    assert health["components"]["pipeline"] == {**health["components"]["pipeline"], "ok": True}
    samples = _samples(_get(server.url + "/metrics")[2])
    assert samples[("gangscope_component_degraded", (("component", "lake"),))] == 1.0
    assert samples[("gangscope_component_healthy", (("component", "lake"),))] == 1.0
    telemetry.problem("kafka", "broker 127.0.0.1:1 unreachable")  # a failure beside it: unhealthy wins
    assert _get(server.url + "/healthz")[0] == 503
    telemetry.problem("kafka", None)
    telemetry.degraded("lake", None)
    code, _, body = _get(server.url + "/healthz")
    assert code == 200 and json.loads(body)["status"] == "ok" and "lake" not in json.loads(body)["components"]


def test_a_down_broker_makes_the_publisher_unhealthy(offline_settings) -> None:
    from gangscope.transport.broker import free_port
    from gangscope.transport.publish import Publisher

    with telemetry._beats_lock:
        telemetry._problems.clear()
    pub = Publisher(offline_settings, f"127.0.0.1:{free_port()}")  # nothing listens there
    try:
        pub.publish(ScrapeBatch(cluster="c", target="t", job="j", instance="i", scraped_at_ms=1))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "kafka" not in telemetry._problems:
            time.sleep(0.1)
        ok, body = telemetry.health()
        assert not ok
        assert "unreachable" in body["components"]["kafka"]["reason"]  # type: ignore[index]
    finally:
        pub.close(timeout_s=1)
        telemetry.problem("kafka", None)


def test_idle_and_slow_connections_do_not_stop_healthz() -> None:
    """500 half-open requests (some idle, some trickling headers): /healthz still answers.

    The timeout is a hang guard, not the 1 s the issue asks for: wall-clock bounds fail on a loaded CI
    machine (this one did at load 6). What holds the answer up without eviction is the connection limit,
    and ``evicted`` shows eviction made the room."""
    import socket
    import urllib.request

    srv = telemetry.start_http_server("127.0.0.1:0", limits=telemetry.Limits(max_connections=100))
    socks = []
    try:
        for i in range(500):
            s = socket.create_connection(("127.0.0.1", srv.port))
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            socks.append(s)
        with urllib.request.urlopen(f"{srv.url}/healthz", timeout=15.0) as resp:
            assert resp.status == 200 and json.loads(resp.read())["status"] in ("ok", "unhealthy")
        assert srv.evicted >= 400  # the oldest half-open ones made room, the rest stay within the limit
    finally:
        for s in socks:
            s.close()
        srv.stop()


def test_header_timeout_body_limit_and_a_mounted_route() -> None:
    import socket

    srv = telemetry.start_http_server("127.0.0.1:0", limits=telemetry.Limits(header_timeout_s=0.3, max_body_bytes=10))
    got: list[bytes] = []
    srv.add_route("POST", "/api/v1/write", lambda body, headers: (got.append(body) or 204, "text/plain", b""))
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")  # and then nothing
            assert s.recv(100).startswith(b"HTTP/1.1 408 ")  # closed by the server, not held open

        def post(body: bytes, length: int) -> bytes:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
                s.sendall(b"POST /api/v1/write HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % length + body)
                return s.recv(100)

        assert post(b"x" * 11, 11).startswith(b"HTTP/1.1 413 ")
        assert post(b"snappy", 6).startswith(b"HTTP/1.1 204 ") and got == [b"snappy"]
        assert post(b"", 0).startswith(b"HTTP/1.1 204 ")
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET /api/v1/write HTTP/1.1\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 405 ")
    finally:
        srv.stop()


def test_a_route_with_its_own_body_limit_and_response_headers() -> None:
    """The remote-write receiver takes bodies up to its own limit (above the server's general one), reads
    headers in any case and answers with its own headers (Retry-After on 503)."""
    import socket

    srv = telemetry.start_http_server("127.0.0.1:0", limits=telemetry.Limits(max_body_bytes=10))
    seen: list[tuple[int, str | None]] = []

    def route(body: bytes, headers: Any) -> tuple[int, dict[str, str], bytes]:
        seen.append((len(body), headers.get("Content-Encoding")))
        return 503, {"Content-Type": "text/plain", "Retry-After": "7"}, b"busy\n"

    srv.add_route("POST", "/api/v1/write", route, max_body_bytes=100)
    srv.add_route("POST", "/other", route)

    def post(path: str, n: int) -> bytes:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"POST %s HTTP/1.1\r\ncontent-encoding: snappy\r\nContent-Length: %d\r\n\r\n"
                      % (path.encode(), n) + b"x" * n)
            out = b""
            while chunk := s.recv(4096):
                out += chunk
            return out

    try:
        answer = post("/api/v1/write", 50)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: 7\r\n" in answer
        assert answer.endswith(b"busy\n")
        assert post("/api/v1/write", 101).startswith(b"HTTP/1.1 413 ")
        assert post("/other", 50).startswith(b"HTTP/1.1 413 ")  # the general limit still holds elsewhere
        assert seen == [(50, "snappy")]  # refused bodies never reach the route
    finally:
        srv.stop()


def test_prefix_routes_see_path_and_query_and_other_methods_get_405_with_allow() -> None:
    """The live page's routes: ``/`` exactly, ``/jobs/`` and everything under it, the raw path and query given to
    the route; a method no route takes is 405 naming the one that is."""
    import socket

    srv = telemetry.start_http_server("127.0.0.1:0")
    seen: list[tuple[str, str]] = []

    def route(name: str) -> telemetry.Route:
        return lambda body, headers: (seen.append((name, headers.path, headers.query)) or 200, "text/plain", b"ok")

    srv.add_route("GET", "/", route("root"))
    srv.add_route("GET", "/jobs/", route("jobs"), prefix=True)
    srv.add_route("GET", "/jobs/special/", route("special"), prefix=True)

    def ask(line: str) -> bytes:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(line.encode() + b"\r\n\r\n")
            out = b""
            while chunk := s.recv(4096):
                out += chunk
            return out

    try:
        assert ask("GET /?live=1&v=ab HTTP/1.1").startswith(b"HTTP/1.1 200 ")
        assert ask("GET /jobs/ns/a%2Fb?live=1 HTTP/1.1").startswith(b"HTTP/1.1 200 ")
        assert ask("GET /jobs/special/x HTTP/1.1").startswith(b"HTTP/1.1 200 ")
        assert ask("GET /jobsx HTTP/1.1").startswith(b"HTTP/1.1 404 ")
        assert ask("GET /other HTTP/1.1").startswith(b"HTTP/1.1 404 ")
        answer = ask("POST /jobs/ns/j HTTP/1.1")
        assert answer.startswith(b"HTTP/1.1 405 ") and b"\r\nAllow: GET\r\n" in answer
        assert ask("GET /metrics HTTP/1.1").startswith(b"HTTP/1.1 200 ")
        assert seen == [("root", "/", "live=1&v=ab"), ("jobs", "/jobs/ns/a%2Fb", "live=1"),
                        ("special", "/jobs/special/x", "")]
    finally:
        srv.stop()
