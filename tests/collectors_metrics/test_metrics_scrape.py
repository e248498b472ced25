"""Scraping real-shaped exporters served from a local HTTP server, and publishing to the real broker."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from collectors.k8s.client import Client
from collectors.metrics.parse import parse_text
from collectors.metrics.scrape import Scraper, serve, target_source
from collectors.metrics.targets import Target, discover, discovery_rules, static_targets
from gangscope import config
from gangscope.errors import UserError
from gangscope.records import ScrapeBatch
from gangscope.transport import kafka as pkafka
from gangscope.transport.publish import Publisher
from tests.collectors_metrics.httpserve import Route
from tests.collectors_metrics.httpserve import serve as http_serve
from tests.collectors_metrics.synthetic import IB_SAMPLE, L4_SAMPLE, h100_scrape, reference_text


def _settings(tmp_path: Path, **metrics: object) -> config.Settings:
    return config.load(overrides={"data": str(tmp_path / "d"), "cluster": "c1", "metrics": metrics}, environ={})


def _round(targets: list[Target]) -> tuple[list[ScrapeBatch], list[ScrapeBatch]]:
    """(batches in target order, batches in the order they were emitted)."""
    emitted: list[ScrapeBatch] = []

    async def go() -> list[ScrapeBatch]:
        async with Scraper("c1", emitted.append) as s:
            return await s.scrape_round(targets)

    return asyncio.run(go()), emitted


def test_scrapes_real_and_synthetic_exporters(tmp_path: Path) -> None:
    routes = {"/l4": Route(reference_text(L4_SAMPLE)), "/ib": Route(reference_text(IB_SAMPLE)),
              "/h100a": Route(h100_scrape("gpu-a")), "/h100b": Route(h100_scrape("gpu-b", hostname_key="hostname"))}
    with http_serve(routes) as (base, seen):
        s = _settings(tmp_path, targets=[
            {"url": f"{base}/l4", "job": "dcgm"}, {"url": f"{base}/ib", "job": "node", "labels": {"node": "ib-1"}},
            {"url": f"{base}/h100a", "job": "dcgm"}, {"url": f"{base}/h100b", "job": "dcgm", "timeout_s": 2},
        ])
        batches, _ = _round(static_targets(s))
    assert [b.up for b in batches] == [True] * 4 and all(b.error is None for b in batches)
    l4, ib, ha, hb = batches
    assert len(l4.sample_value) == len(parse_text(reference_text(L4_SAMPLE)))
    assert (l4.job, l4.cluster, l4.target) == ("dcgm", "c1", f"{base}/l4")
    assert l4.instance == base.removeprefix("http://")
    power = l4.series_metric.index("DCGM_FI_DEV_POWER_USAGE")
    assert l4.sample_value[power] == 16.365 and l4.series_labels[power]["Hostname"] == "i-030791dc5a37cd257"
    wait = ib.series_metric.index("node_infiniband_port_transmit_wait_total")
    assert ib.sample_value[wait] == 4294967295.0 and ib.series_labels[wait] == {
        "device": "mlx4_0", "port": "1", "node": "ib-1"}
    assert len(ha.sample_value) == len(hb.sample_value) == 200
    assert hb.series_labels[0]["hostname"] == "gpu-b"
    assert all(t is None for t in ha.sample_ts_ms) and ha.scraped_at_ms > 1.6e12
    # Negotiated like Prometheus 3: OpenMetrics preferred, text 0.0.4 as the fallback these exporters answer with.
    assert all(h["Accept"].startswith("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,") and
               "text/plain;version=0.0.4;q=0.2" in h["Accept"] for _, h in seen)


def test_slow_target_times_out_without_delaying_others(tmp_path: Path) -> None:
    routes = {f"/fast{i}": Route(h100_scrape(f"fast{i}")) for i in range(5)}
    routes["/slow"] = Route(h100_scrape("slow"), delay_s=6.0)
    with http_serve(routes) as (base, _):
        targets = [Target(url=f"{base}/slow", job="dcgm", interval_s=15, timeout_s=2.0)]
        targets += [Target(url=f"{base}/fast{i}", job="dcgm", interval_s=15, timeout_s=2.0) for i in range(5)]
        batches, emitted = _round(targets)
    slow, fast = batches[0], batches[1:]
    assert not slow.up and "timeout" in slow.error and slow.sample_value == []
    assert slow.duration_s >= 2.0
    assert all(b.up and len(b.sample_value) == 200 for b in fast)
    # The fast ones finished (and were handed on) before the slow one gave up, each well within its timeout.
    assert emitted[-1] is slow
    assert max(b.duration_s for b in fast) < slow.duration_s


def test_broken_lines_are_refused_and_the_good_lines_land(tmp_path: Path) -> None:
    lines = h100_scrape("gpu-x", gpus=1).splitlines()
    good = "\n".join(lines) + "\n"
    lines.insert(7, 'DCGM_FI_DEV_GPU_TEMP{gpu="0" 31')  # line 8: no closing brace
    lines.insert(9, 'DCGM_FI_DEV_GPU_TEMP{gpu="0",bad="X"} 31')  # line 10: a byte that is not UTF-8
    body = ("\n".join(lines) + "\n").encode().replace(b'bad="X"', b'bad="\xff"')
    routes = {"/m": Route(body), "/good": Route(good), "/err": Route("oops", status=500)}
    with http_serve(routes) as (base, _):
        batches, _ = _round([Target(url=f"{base}/m", job="dcgm", interval_s=15, timeout_s=2),
                             Target(url=f"{base}/good", job="dcgm", interval_s=15, timeout_s=2),
                             Target(url=f"{base}/err", job="dcgm", interval_s=15, timeout_s=2)])
    partial, whole, err = batches
    # Unlike Prometheus (which drops the scrape): the node is not blind, and the record names what was refused.
    assert partial.up and partial.error.startswith("parse error (text): line 8: missing '}' (+1 more)")
    assert partial.sample_value == whole.sample_value and partial.series_labels == whole.series_labels
    assert len(whole.sample_value) == 25 and whole.error is None
    assert not err.up and "HTTP 500" in err.error


def test_bearer_token_is_sent(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with http_serve({"/m": Route("up 1\n")}) as (base, seen):
        s = _settings(tmp_path, targets=[{"url": f"{base}/m", "job": "kueue", "bearer_token_file": str(token)}])
        (b,), _ = _round(static_targets(s))
    assert b.up and seen[0][1]["Authorization"] == "Bearer s3cret"


@pytest.mark.parametrize("entry, fragment", [
    ({"url": "ftp://x/metrics", "job": "dcgm"}, "url"),
    ({"url": "http://x:9400/metrics"}, "job"),
    ({"url": "http://x:9400/metrics", "job": "dcgm", "timeout_s": 20, "interval_s": 15}, "must not exceed"),
    ({"url": "http://x:9400/metrics", "job": "dcgm", "interval": 15}, "unknown key 'interval'"),
    ({"url": "http://x:9400/metrics", "job": "dcgm", "cert_file": "/c"}, "go together"),
    ({"url": "http://x:9400/metrics", "job": "dcgm", "interval_s": "soon"}, "interval_s"),
])
def test_bad_static_targets_are_clear_errors(tmp_path: Path, entry: dict, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment) as e:
        static_targets(_settings(tmp_path, targets=[entry]))
    assert "metrics.targets[0]" in str(e.value)


def test_no_targets_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no metrics targets"):
        target_source(_settings(tmp_path))


def _pod(name: str, ns: str, ip: str, node: str, phase: str = "Running", annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": "nvidia-dcgm-exporter"},
                         "annotations": annotations or {}},
            "spec": {"nodeName": node}, "status": {"phase": phase, "podIP": ip}}


def test_discovery_lists_pods_and_labels_training_samples(tmp_path: Path) -> None:
    with http_serve({"/metrics": Route("llm_tokens_per_second 1234.5\n")}) as (exporter, _):
        port = int(exporter.rsplit(":", 1)[1])
        dcgm_pods = {"kind": "PodList", "items": [
            _pod("dcgm-exporter-a", "gpu-operator", "127.0.0.1", "gpu-node-1"),
            _pod("dcgm-exporter-b", "gpu-operator", "10.0.0.9", "gpu-node-2", phase="Pending"),
        ]}
        train_pods = {"kind": "PodList", "items": [
            _pod("llm-0", "team-a", "127.0.0.1", "gpu-node-1",
                 annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}),
            _pod("other", "team-a", "127.0.0.2", "gpu-node-1"),  # not annotated: not scraped
        ]}
        api_routes = {"/api/v1/namespaces/gpu-operator/pods": Route(json.dumps(dcgm_pods)),
                      "/api/v1/pods": Route(json.dumps(train_pods))}
        with http_serve(api_routes) as (api, seen):
            s = _settings(tmp_path, discovery=[{"job": "dcgm", "namespace": "gpu-operator", "via": "pod_ip"},
                                               {"job": "training", "via": "pod_ip"}])
            targets = discover(discovery_rules(s), Client(api))
            assert "labelSelector=app%3Dnvidia-dcgm-exporter" in seen[0][0]
        dcgm, train = targets
        assert (dcgm.url, dcgm.job, dcgm.labels) == ("http://127.0.0.1:9400/metrics", "dcgm", {"node": "gpu-node-1"})
        assert train.url == f"http://127.0.0.1:{port}/metrics"
        assert train.labels == {"node": "gpu-node-1", "pod": "llm-0", "namespace": "team-a"}
        (b,), _ = _round([train])
    assert b.up and b.series_metric == ["llm_tokens_per_second"] and b.sample_value == [1234.5]
    assert b.series_labels[0] == {"node": "gpu-node-1", "pod": "llm-0", "namespace": "team-a"}


def _serve_until_up(tmp_path: Path, n: int, *, interval_s: float, timeout_s: float, **settings: object) -> list:
    """Run ``serve`` on one local target until ``n`` scrapes succeeded; what it emitted. The loop must stop."""
    got: list[ScrapeBatch] = []
    with http_serve({"/m": Route(h100_scrape("n", gpus=1))}) as (base, _):
        s = _settings(tmp_path, **settings,
                      targets=[{"url": f"{base}/m", "job": "dcgm", "interval_s": interval_s, "timeout_s": interval_s}])
        stop = threading.Event()
        th = threading.Thread(target=serve, args=(s, got.append, stop))
        th.start()
        deadline = time.monotonic() + timeout_s
        while sum(b.up for b in got) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        th.join(timeout_s / 2)
    assert not th.is_alive()
    return got


def test_serve_loop_scrapes_every_interval_and_stops(tmp_path: Path) -> None:
    got = _serve_until_up(tmp_path, 3, interval_s=0.4, timeout_s=20)
    up = [b for b in got if b.up]
    assert len(up) >= 3 and all(len(b.sample_value) == 25 for b in up)
    times = [b.scraped_at_ms for b in up]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert (times[-1] - times[0]) / (len(times) - 1) >= 350  # on the 0.4 s grid: one scrape per interval, no burst


def test_published_scrapes_read_back_from_kafka(settings: config.Settings) -> None:
    routes = {f"/n{i}": Route(h100_scrape(f"gpu-{i}")) for i in range(3)}
    routes["/down"] = Route("no", status=503)
    with http_serve(routes) as (base, _):
        targets = [Target(url=f"{base}/n{i}", job="dcgm", interval_s=15, timeout_s=2) for i in range(3)]
        targets.append(Target(url=f"{base}/down", job="dcgm", interval_s=15, timeout_s=2))
        pub = Publisher(settings, settings.kafka.bootstrap_servers)

        async def go() -> None:
            async with Scraper(settings.cluster, pub.publish) as sc:
                await sc.scrape_round(targets)

        asyncio.run(go())
        assert pub.flush(20)
        pub.close()
    topic = pkafka.topics(settings)["scrape"]
    consumer = pkafka.consumer(settings, settings.kafka.bootstrap_servers, group_id=None, consumer_timeout_ms=5000)
    consumer.subscribe([topic])
    recs = []
    deadline = time.monotonic() + 20
    while len(recs) < 4 and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=500).values():
            recs.extend(msgs)
    consumer.close()
    assert len(recs) == 4  # one record per scrape, nothing doubled
    by_target = {r.key.decode(): json.loads(r.value) for r in recs}
    assert set(by_target) == {t.url for t in targets}
    for i in range(3):
        rec = by_target[f"{base}/n{i}"]
        assert rec["up"] == 1 and len(rec["x"]) == 200 and rec["job"] == "dcgm"
        assert json.loads(rec["ls"][0])["Hostname"] == f"gpu-{i}"
        assert rec["dt"] == []  # every sample at scraped_at (compact form, docs/records.md)
    down = by_target[f"{base}/down"]
    assert down["up"] == 0 and "503" in down["error"] and down["x"] == []


def test_worker_pool_builds_the_same_records() -> None:
    from collectors.metrics.scrape import EncodedScrapeBatch, worker_pool

    routes = {"/a": Route(h100_scrape("gpu-a")), "/b": Route("x{a=1} 2\nok 1\n")}
    with http_serve(routes) as (base, _):
        targets = [Target(url=f"{base}/a", job="dcgm", interval_s=15, timeout_s=5, labels={"node": "n"}),
                   Target(url=f"{base}/b", job="training", interval_s=15, timeout_s=5)]
        inline, _ = _round(targets)
        pooled: list[ScrapeBatch] = []
        pool = worker_pool(1)
        try:
            async def go() -> None:
                async with Scraper("c1", pooled.append, pool=pool) as s:
                    await s.scrape_round(targets)

            asyncio.run(go())
        finally:
            pool.shutdown()
    by_url = {b.target: b for b in pooled}
    for ref in inline:
        got = by_url[ref.target]
        assert isinstance(got, EncodedScrapeBatch) and got.samples == len(ref.sample_value)
        a, b = json.loads(got.to_bytes()), json.loads(ref.to_bytes())
        a.pop("duration_s"), b.pop("duration_s"), a.pop("scraped_at"), b.pop("scraped_at"), a.pop("dt"), b.pop("dt")
        assert a == b and got.error == ref.error
    bad = by_url[f"{base}/b"]
    # The broken line is named, the good one landed, in the workers as in the scraper.
    assert bad.up and bad.samples == 1 and bad.error.startswith("parse error (text): line 1: ")


def test_serve_with_parse_workers(tmp_path: Path) -> None:
    from collectors.metrics.scrape import EncodedScrapeBatch

    got = _serve_until_up(tmp_path, 2, interval_s=0.5, timeout_s=30, parse_workers=1)
    up = [b for b in got if b.up]
    assert len(up) >= 2 and all(isinstance(b, EncodedScrapeBatch) and b.samples == 25 for b in up)
    assert len(json.loads(up[0].to_bytes())["x"]) == 25
    # A scrape still running when the next round is due is skipped, never doubled up.
    assert all(b.error == "skipped: previous scrape still running" for b in got if not b.up)
