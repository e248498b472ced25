"""Benchmark: 1,000 local dcgm-exporter targets scraped, parsed and published per round.

Each target serves an 8-GPU H100 scrape (200 samples, ~56 KB, distinct per target through
its URL) from a minimal keep-alive HTTP server in a separate process; the scraper runs in
this process and publishes every ScrapeBatch through the real Publisher to the embedded
broker. A round counts until every batch is acknowledged by Kafka. The baseline, measured
in the same run on the same texts, is prometheus_client's parser (extrapolated from a
sample of the targets) and this project's parser alone.

    .venv/bin/python bench/scrape.py [--targets 1000] [--rounds 5] [--against REV]

``--against REV`` also times the parser of git revision REV (``2aef836``: before issue 38) on the same
texts, interleaved with this one, and prints ``parse vs REV: x<this parser's CPU time / REV's>``.

Ends with: ``scrape: targets=<n> round_s=<median seconds> share=<round_s/15>``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

INTERVAL_S = 15.0


def _server(port_q: mp.Queue, targets: int) -> None:
    """Keep-alive HTTP/1.1 server answering GET /t/<i>/metrics with target i's scrape."""
    from tests.collectors_metrics.synthetic import h100_scrape

    template = h100_scrape("HOSTNAME-PLACEHOLDER")
    bodies: dict[bytes, bytes] = {}
    for i in range(targets):
        body = template.replace("HOSTNAME-PLACEHOLDER", f"gpu-node-{i:04d}").encode()
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {len(body)}\r\n"
                "\r\n").encode()
        bodies[f"/t/{i}/metrics".encode()] = head + body
    not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                writer.write(bodies.get(path, not_found))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=2048)
        port_q.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _parser_at(rev: str):
    """The parse module of git revision ``rev``, loaded beside this one."""
    import importlib.util
    import subprocess

    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "-C", str(root), "show", f"{rev}:collectors/metrics/parse.py"], check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="gangscope-bench-")) / "parse_at_rev.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("parse_at_rev", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["parse_at_rev"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _ratio_against(rev: str, texts: list[str], repeats: int = 15) -> str:
    """This parser's CPU time over REV's on the same texts: each timed ``repeats`` times, alternately, best kept
    (CPU time and the best of many: the machine may be shared)."""
    from collectors.metrics import parse

    other = _parser_at(rev)
    if [len(other.parse_text(t)) for t in texts] != [len(parse.parse_text(t)) for t in texts]:
        raise SystemExit(f"{rev}'s parser reads other samples from the bench's texts")
    best = {parse: float("inf"), other: float("inf")}
    for _ in range(repeats):
        for m in best:
            t = time.process_time()
            for tx in texts:
                m.parse_text(tx)
            best[m] = min(best[m], time.process_time() - t)
    return (f"parse vs {rev}: {best[parse] / len(texts) * 1e3:.3f} ms / {best[other] / len(texts) * 1e3:.3f} ms "
            f"per target = x{best[parse] / best[other]:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="parse/encode worker processes, as `collect metrics` uses by default (0: in the scraper)")
    ap.add_argument("--baseline-sample", type=int, default=50, help="targets parsed by prometheus_client")
    ap.add_argument("--against", metavar="REV", help="also time the parser of this git revision on the same texts")
    args = ap.parse_args()

    from prometheus_client.parser import text_string_to_metric_families

    from collectors.metrics.parse import parse_text
    from collectors.metrics.scrape import Scraper, worker_pool
    from collectors.metrics.targets import Target
    from gangscope import config
    from gangscope.transport.broker import EmbeddedBroker
    from gangscope.transport.publish import Publisher
    from tests.collectors_metrics.synthetic import h100_scrape

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    server = ctx.Process(target=_server, args=(q, args.targets), daemon=True)
    server.start()
    port = q.get(timeout=60)
    broker = EmbeddedBroker().start()
    tmp = tempfile.TemporaryDirectory(prefix="gangscope-bench-")
    settings = config.load(overrides={"data": tmp.name, "kafka": {"bootstrap_servers": broker.bootstrap,
                                                                  "topic_prefix": "bench."}}, environ={})
    targets = [Target(url=f"http://127.0.0.1:{port}/t/{i}/metrics", job="dcgm", interval_s=INTERVAL_S,
                      timeout_s=10.0) for i in range(args.targets)]
    publisher = Publisher(settings, broker.bootstrap, max_buffered=args.targets * 4)
    try:
        # Baseline on the same texts: prometheus_client's parser, and ours alone.
        texts = [h100_scrape(f"gpu-node-{i:04d}") for i in range(args.baseline_sample)]
        t = time.perf_counter()
        ref_samples = sum(len(f.samples) for tx in texts for f in text_string_to_metric_families(tx))
        pc_s = (time.perf_counter() - t) / len(texts) * args.targets
        t = time.perf_counter()
        ours = sum(len(parse_text(tx)) for tx in texts)
        ours_s = (time.perf_counter() - t) / len(texts) * args.targets
        assert ours == ref_samples
        per_target = ours // len(texts)
        print(f"baseline: prometheus_client parse of one round ({args.targets} x {per_target} samples) "
              f"{pc_s:.2f}s = {per_target * args.targets / pc_s:,.0f} samples/s; "
              f"gangscope parse alone {ours_s:.2f}s = {per_target * args.targets / ours_s:,.0f} samples/s "
              f"({pc_s / ours_s:.1f}x)")
        if args.against:
            print(_ratio_against(args.against, texts), flush=True)

        async def rounds() -> list[tuple[float, int, int]]:
            out = []
            pool = worker_pool(args.workers) if args.workers else None
            async with Scraper(settings.cluster, publisher.publish, pool=pool) as scraper:
                for r in range(args.rounds + 1):
                    t0 = time.perf_counter()
                    samples0, fail0 = scraper.samples, scraper.failures
                    await scraper.scrape_round(targets)
                    if not publisher.flush(60):
                        raise SystemExit("publisher did not drain within 60 s")
                    took = time.perf_counter() - t0
                    label = "warm-up" if r == 0 else f"round {r}"
                    samples, failed = scraper.samples - samples0, scraper.failures - fail0
                    print(f"{label}: {took:.2f}s  {samples:,} samples  {samples / took:,.0f} samples/s  "
                          f"failed={failed}  share={took / INTERVAL_S:.2f}", flush=True)
                    if r:
                        out.append((took, samples, failed))
            if pool is not None:
                pool.shutdown()
            return out

        results = asyncio.run(rounds())
    finally:
        publisher.close()
        broker.stop()
        server.terminate()
        tmp.cleanup()
    med = statistics.median(r[0] for r in results)
    total_samples = sum(r[1] for r in results)
    print(f"rounds={len(results)} median_round_s={med:.2f} samples/s={total_samples / sum(r[0] for r in results):,.0f} "
          f"vs prometheus_client parse alone {pc_s:.2f}s/round ({pc_s / med:.1f}x the whole round); "
          f"failed={sum(r[2] for r in results)} published={publisher.published}")
    print(f"scrape: targets={args.targets} round_s={med:.2f} share={med / INTERVAL_S:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
