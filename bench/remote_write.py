"""Benchmark: Prometheus remote-write requests decoded and published, against a replay of the same samples.

The samples are a GPU cluster's dcgm-exporter series (``--nodes`` x 8 GPUs x 25 metrics, ``--rounds``
scrapes 15 s apart). Remote write: they are cut into requests as Prometheus' queue manager sends them
(series spread over shards by hash, one TimeSeries per sample, ``--per-request`` samples each, snappy
protobuf, built before the clock starts) and handed to the receiver (``collectors.prom.remote_write``)
from ``--shards`` threads, as Prometheus' shards send concurrently; each request counts when Kafka (the
embedded broker) acknowledged it, as its 204 says. Replay: the same samples written as a timestamped
text file and published by ``collectors.replay.publish`` (parse, batch, publish, acknowledged).
The receiver decodes in ``--workers`` processes (default as ``gangscope run``); their CPU is counted.

    .venv/bin/python bench/remote_write.py [--nodes 100] [--rounds 8] [--per-request 2000] [--workers N]

Ends with: ``remote_write: samples_per_s=<n> ratio=<n / replay samples_per_s of the same samples>``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METRICS = [f"DCGM_FI_DEV_METRIC_{i:02d}" for i in range(25)]


def children_cpu() -> float:
    """CPU seconds of this process' multiprocessing children so far (the receiver's workers)."""
    total = 0.0
    for p in multiprocessing.active_children():
        try:
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def samples(nodes: int, rounds: int, t0: int) -> list[tuple[dict[str, str], int, float]]:
    out = []
    for r in range(rounds):
        for n in range(nodes):
            for g in range(8):
                for m in METRICS:
                    labels = {"__name__": m, "job": "dcgm", "instance": f"10.1.{n // 250}.{n % 250}:9400",
                              "gpu": str(g), "UUID": f"GPU-{n:04d}-{g}", "Hostname": f"gpu-node-{n:04d}",
                              "modelName": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"00000000:{g + 16:02X}:00.0"}
                    out.append((labels, t0 + r * 15_000, float((n * 31 + g * 7 + r) % 100)))
    return out


def requests(data: list[tuple[dict[str, str], int, float]], per_request: int, shards: int) -> list[bytes]:
    from tests.collectors_prom.rw import write_request_body

    queues: list[list[tuple[dict[str, str], int, float]]] = [[] for _ in range(shards)]
    for s in data:  # Prometheus shards by series hash, so a request mixes many targets
        queues[zlib.crc32(repr(sorted(s[0].items())).encode()) % shards].append(s)
    out = []
    for q in queues:
        out += [write_request_body((labels, [(v, ts)]) for labels, ts, v in q[i:i + per_request])
                for i in range(0, len(q), per_request)]
    return out


def replay_file(path: Path, data: list[tuple[dict[str, str], int, float]]) -> None:
    with path.open("w") as f:
        for labels, ts, v in data:
            body = ",".join(f'{k}="{val}"' for k, val in labels.items() if k != "__name__")
            f.write(f"{labels['__name__']}{{{body}}} {v:g} {ts}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--per-request", type=int, default=2000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--workers", type=int, default=None,
                    help="the receiver's decoding processes (default: one per core, as `gangscope run`; 0: none)")
    args = ap.parse_args()

    from collectors.prom.remote_write import Receiver, default_workers
    from collectors.replay import publish
    from gangscope import config
    from gangscope.transport.broker import EmbeddedBroker
    from gangscope.transport.publish import Publisher

    t0 = int(time.time() * 1000) - 3_600_000
    data = samples(args.nodes, args.rounds, t0)
    bodies = requests(data, args.per_request, args.shards)
    print(f"{len(data):,} samples, {len(bodies)} requests of up to {args.per_request} samples, "
          f"{sum(map(len, bodies)) / len(bodies) / 1024:.0f} KiB each (snappy)")
    broker = EmbeddedBroker().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            def settings(prefix: str) -> config.Settings:
                return config.load(overrides={"data": tmp, "kafka": {"bootstrap_servers": broker.bootstrap,
                                                                     "topic_prefix": prefix}}, environ={})

            s = settings("rw.")
            publisher = Publisher(s, broker.bootstrap)
            workers = default_workers() if args.workers is None else args.workers
            receiver = Receiver(publisher, s.cluster, ack_timeout_s=120, max_buffered=10**9, workers=workers)
            headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}
            receiver.handle(bodies[0], headers)  # warm-up: connection, topics
            warm = receiver.samples
            start, cpu0, wcpu0 = time.perf_counter(), time.process_time(), children_cpu()
            with ThreadPoolExecutor(args.shards) as pool:
                codes = list(pool.map(lambda b: receiver.handle(b, headers)[0], bodies[1:]))
            rw_s, rw_cpu = time.perf_counter() - start, time.process_time() - cpu0
            rw_wcpu = children_cpu() - wcpu0
            receiver.close()
            publisher.close()
            assert set(codes) == {204}, set(codes)
            rw_rate = (receiver.samples - warm) / rw_s

            path = Path(tmp) / "replay.prom"
            replay_file(path, data)
            rs = settings("rp.")
            start, cpu0 = time.perf_counter(), time.process_time()
            stats = publish(rs, broker.bootstrap, [], [str(path)], progress=None)
            replay_s, replay_cpu = time.perf_counter() - start, time.process_time() - cpu0
            assert stats.metric_samples == len(data), stats.metric_samples
            replay_rate = len(data) / replay_s
    finally:
        broker.stop()
    n = len(data)
    per = 160_000 / (receiver.samples - warm)
    print(f"remote write: {rw_s:.2f}s, {rw_cpu + rw_wcpu:.2f}s CPU ({rw_cpu:.2f}s this process, {rw_wcpu:.2f}s its "
          f"{workers} workers; {(rw_cpu + rw_wcpu) * per:.2f} CPU-s per 160k samples, the broker's CPU not counted; "
          f"{len(bodies) - 1} requests, {args.shards} concurrent; load average {os.getloadavg()[0]:.1f})")
    print(f"replay: {replay_s:.2f}s, {replay_cpu:.2f}s CPU ({stats.metric_batches} records; "
          f"{n / replay_cpu:,.0f} samples per CPU-second)")
    print(f"replay: samples_per_s={replay_rate:,.0f}")
    print(f"remote_write: samples_per_s={rw_rate:.0f} ratio={rw_rate / replay_rate:.2f}")


if __name__ == "__main__":
    main()
