"""Whole scrapes against real software: node_exporter and Prometheus (Debian packages), prometheus_client's
OpenMetrics exposition, and a server sending a captured real body gzipped in small chunks."""

from __future__ import annotations

import asyncio
import gzip
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import start_http_server as client_http_server

from collectors.metrics.parse import parse_text
from collectors.metrics.scrape import Scraper, failure_kind
from collectors.metrics.targets import Target
from gangscope.records import ScrapeBatch
from tests.collectors_metrics.httpserve import Route
from tests.collectors_metrics.httpserve import serve as http_serve
from tests.servers.prometheus import Process, free_port


def _scrape(targets: list[Target], **kw: object) -> list[ScrapeBatch]:
    async def go() -> list[ScrapeBatch]:
        async with Scraper("c1", lambda b: None, **kw) as s:  # type: ignore[arg-type]
            return await s.scrape_round(targets)

    return asyncio.run(go())


def _target(url: str, job: str = "node") -> Target:
    return Target(url=url, job=job, interval_s=15, timeout_s=10)


def _samples(b: ScrapeBatch) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted((b.series_metric[s], tuple(sorted(b.series_labels[s].items())), v)
                  for s, v in zip(b.sample_series, b.sample_value, strict=True))


def test_node_exporter_scrape_counts_what_prometheus_counts(node_exporter: Process, start_prometheus) -> None:
    prom = start_prometheus({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                             "scrape_configs": [{"job_name": "node",
                                                 "static_configs": [{"targets": [node_exporter.address]}]}]})
    scraped = prom.wait_for('scrape_samples_scraped{job="node"}')
    (b,) = _scrape([_target(node_exporter.url + "/metrics")])
    theirs = int(float(prom.query("query", query='scrape_samples_scraped{job="node"}')["result"][0]["value"][1]))
    assert scraped and b.up and b.error is None
    # The few series that come and go between two scrapes (handler counters, GC) are all the difference.
    assert abs(len(b.sample_value) - theirs) <= 5, (len(b.sample_value), theirs)
    assert len(b.sample_value) > 300  # the whole body, not what happened to be buffered
    names = set(b.series_metric)
    assert {"node_cpu_seconds_total", "node_memory_MemTotal_bytes", "promhttp_metric_handler_requests_total"} <= names
    # Prometheus itself found nothing wrong with the same target.
    up = prom.query("query", query='up{job="node"}')["result"]
    assert up[0]["value"][1] == "1"


def test_gzip_chunked_real_body_lands_sample_for_sample(node_exporter: Process) -> None:
    with urllib.request.urlopen(node_exporter.url + "/metrics", timeout=10) as r:
        body = r.read()
    expected = parse_text(body.decode())
    assert not expected.errors and len(expected) > 300
    routes = {"/gz": Route(body, gzip=True, chunk=97, chunk_delay_s=0.0005),
              "/plain": Route(body, chunk=61)}
    with http_serve(routes) as (base, seen):
        gz, plain = _scrape([_target(f"{base}/gz"), _target(f"{base}/plain")])
    want = sorted((m, tuple(sorted(lb.items())), v) for m, lb, v in
                  zip(expected.metric, expected.labels, expected.value, strict=True))
    for b in (gz, plain):
        assert b.up and b.error is None
        assert _samples(b) == want  # every sample once, nothing cut
    assert "gzip" in seen[0][1].get("Accept-Encoding", "")


@pytest.mark.parametrize("route, reason", [
    (Route(""), "empty body"),
    (Route("\n\n"), "empty body"),
    (Route("<html><body><h1>Login</h1></body></html>", content_type="text/html; charset=utf-8"),
     "unsupported content type 'text/html'"),
    (Route("<!DOCTYPE html>\n<html>\n</html>\n"), "parse error (text): line 1: "),
    (Route("up 1\n" + "x" * 5000 + " 1\n", chunk=512), "body exceeds the limit of 4096 bytes"),
    (Route("up 1\n" + "x" * 5000 + " 1\n"), "body of 5008 bytes exceeds the limit of 4096 bytes"),
    (Route('{"status":"success"}', content_type="application/json"), "unsupported content type"),
    (Route(b"m{a=\"\xff\"} 2\n"), "parse error (text): line 1: not UTF-8 (byte 0xff)"),
    (Route('up 1\n', content_type="application/openmetrics-text; version=1.0.0"),
     "parse error (openmetrics): line 1: OpenMetrics text does not end with # EOF"),
])
def test_bad_bodies_fail_the_scrape_with_their_reason(route: Route, reason: str) -> None:
    with http_serve({"/m": route}) as (base, _):
        (b,) = _scrape([_target(f"{base}/m")], max_body_bytes=4096)
    assert not b.up and b.error.startswith(reason), b.error
    assert b.sample_value == [] and b.series_metric == []  # nothing recorded as data


@pytest.mark.parametrize("chunk", [0, 64])
def test_body_cut_short_fails_the_scrape(node_exporter: Process, chunk: int) -> None:
    """A connection that ends before the announced length / the last chunk: nothing of it is recorded."""
    with urllib.request.urlopen(node_exporter.url + "/metrics", timeout=10) as r:
        body = r.read()
    cut = body.index(b"\n", len(body) // 2) + 1  # a cut at a line end: what was sent parses cleanly
    assert not parse_text(body[:cut].decode()).errors
    with http_serve({"/m": Route(body, chunk=chunk, cut_at=cut)}) as (base, _):
        (b,) = _scrape([_target(f"{base}/m")])
    assert not b.up and b.sample_value == [] and failure_kind(b.error) == "body_cut", b.error


@pytest.mark.parametrize("chunk", [0, 97])
def test_gzip_stream_cut_short_fails_the_scrape(node_exporter: Process, chunk: int) -> None:
    """A gzip stream that ends early inside a complete HTTP body (Content-Length or the last chunk right: a proxy or
    exporter that wrote a cut stream): nothing of it is recorded, as for a cut connection. It landed the lines
    inflated so far as a good scrape (a value cut mid-number: 244 for 244272509)."""
    with urllib.request.urlopen(node_exporter.url + "/metrics", timeout=10) as r:
        body = r.read()
    whole = len(gzip.compress(body))
    routes = {f"/{cut}": Route(body, gzip=True, gzip_cut_at=cut, chunk=chunk) for cut in (82, whole // 2, whole - 9)}
    with http_serve(routes) as (base, seen):
        batches = _scrape([_target(f"{base}{path}") for path in routes])
    for b in batches:
        assert not b.up and b.sample_value == [] and failure_kind(b.error) == "body_cut", b.error
        assert "ended early" in b.error
    # Asked as Prometheus 3 asks: gzip only, UTF-8 names unescaped.
    headers = seen[0][1]
    assert headers["Accept-Encoding"] == "gzip"
    assert headers["Accept"].startswith("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,")


def test_gzip_body_inflating_past_the_limit_fails_the_scrape() -> None:
    """The limit is on what gets parsed, and no more than one byte past it is inflated (a small gzip bomb)."""
    with http_serve({"/m": Route("up 1\n" + "#" * 200_000 + "\n", gzip=True)}) as (base, _):
        (b,) = _scrape([_target(f"{base}/m")], max_body_bytes=4096)
    assert not b.up and b.error == "body exceeds the limit of 4096 bytes"


def test_openmetrics_is_negotiated_and_parsed() -> None:
    """prometheus_client's own server answers OpenMetrics to Prometheus' Accept header: exemplars and
    _created go, every value stays."""
    reg = CollectorRegistry()
    tokens = Counter("train_tokens", "Tokens seen.", ["pod"], registry=reg)
    tokens.labels("p-0").inc(1234, exemplar={"trace_id": "a # {b}"})
    steps = Histogram("step_seconds", "Step time.", registry=reg, buckets=(0.5, 1.0))
    steps.observe(0.7, exemplar={"trace_id": "t1"})
    Gauge("gpu_temp", "Temperature.", unit="celsius", registry=reg).set(61.5)
    port = free_port()
    httpd, _ = client_http_server(port, "127.0.0.1", reg)
    try:
        (b,) = _scrape([_target(f"http://127.0.0.1:{port}/metrics", job="training")])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert b.up and b.error is None
    got = {(m, tuple(sorted(b.series_labels[s].items()))): v
           for s, v in zip(b.sample_series, b.sample_value, strict=True) for m in [b.series_metric[s]]}
    assert got == {
        ("train_tokens_total", (("pod", "p-0"),)): 1234.0,
        ("step_seconds_bucket", (("le", "0.5"),)): 0.0,
        ("step_seconds_bucket", (("le", "1.0"),)): 1.0,
        ("step_seconds_bucket", (("le", "+Inf"),)): 1.0,
        ("step_seconds_count", ()): 1.0,
        ("step_seconds_sum", ()): 0.7,
        ("gpu_temp_celsius", ()): 61.5,
    }


def test_failures_are_counted_logged_once_and_recovery_noted(caplog: pytest.LogCaptureFixture) -> None:
    routes = {"/m": Route("")}
    with http_serve(routes) as (base, _):
        async def go() -> tuple[int, int]:
            async with Scraper("c1", lambda b: None) as s:
                for _ in range(3):
                    await s.scrape_round([_target(f"{base}/m")])
                routes["/m"] = Route("up 1\n")
                await s.scrape_round([_target(f"{base}/m")])
                return s.failures, s.samples

        with caplog.at_level("INFO", logger="collectors.metrics.scrape"):
            failures, samples = asyncio.run(go())
    assert (failures, samples) == (3, 1)
    failed = [r for r in caplog.records if "failed: empty body" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelname == "WARNING"
    assert any("works again" in r.getMessage() for r in caplog.records)



def test_federate_target_keeps_each_samples_own_target(node_exporter: Process, start_prometheus,
                                                       tmp_path) -> None:
    from collectors.metrics.targets import static_targets
    from gangscope import config

    prom = start_prometheus({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                             "scrape_configs": [{"job_name": "node",
                                                 "static_configs": [{"targets": [node_exporter.address]}]}]})
    prom.wait_for('count_over_time(up{job="node"}[1m]) >= 2')
    url = prom.url + '/federate?match[]={job="node"}'
    s = config.load(overrides={"data": str(tmp_path / "d"), "metrics": {"targets": [{"url": url, "job": "fed"}]}},
                    environ={})
    (target,) = static_targets(s)
    assert target.honor_labels  # the default for a /federate path
    emitted: list[ScrapeBatch] = []

    async def go() -> None:
        async with Scraper("c1", emitted.append) as sc:
            await sc.scrape_round([target])

    asyncio.run(go())
    series = int(float(prom.query("query", query='count({job="node"})')["result"][0]["value"][1]))
    own, *federated = emitted
    assert own.up and own.job == "fed" and own.sample_value == []  # the federate scrape's health, no samples
    assert [(b.job, b.instance, b.target) for b in federated] == [("node", node_exporter.address,
                                                                   node_exporter.address)]
    (b,) = federated
    assert abs(len(b.sample_value) - series) <= 5 and len(b.sample_value) > 300
    assert not any({"job", "instance"} & lb.keys() for lb in b.series_labels)  # identity is the batch's
    assert all(ts is not None for ts in b.sample_ts_ms)  # each sample keeps its own time
