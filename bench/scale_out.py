"""Benchmark: landing rate of 1 vs 2 `gangscope pipeline` processes, SQLite vs PostgreSQL catalog, local disk vs S3.

Publishes ``--targets`` x ``--rounds`` scrape batches (200 GPU samples each, distinct targets, so
keys spread over the partitions) to the embedded broker once; each case then lands all of it
into a fresh lake with its own consumer group. The rate counts from the moment the last
writer got its final partition assignment (from the writers' logs) to the last commit
(``raw.kafka_offsets.landed_at``), so process start-up and the group's rebalances are left
out. The baseline is one writer on the default SQLite catalog, measured in the same run;
ratios are against it. PostgreSQL is a private cluster started for the run (tests/servers/postgres.py).

With SeaweedFS built (``.ci/build-kubernetes``; tests/servers/s3.py starts it on loopback ports), the
PostgreSQL cases run again with the Parquet files on S3 (``lake_data_path`` s3://, DuckDB's httpfs), and a
steady-state case lands a fleet-like trickle (``--steady-targets`` scrapes every 15 s) for ``--steady-s``
at the default ``pipeline.flush_seconds`` and at ``--flush``: objects written per minute per writer, their
sizes per table, and their sizes after compaction.

    .venv/bin/python bench/scale_out.py [--targets 100] [--rounds 20] [--partitions 4] [--batch-records 200]
                                        [--no-s3] [--steady-targets 400] [--steady-s 60] [--flush 2,30]

Ends with one line per case: ``scale_out: catalog=<c> storage=<local|s3> writers=<n> samples_per_s=<r>
ratio=<r/baseline>``, then ``scale_out: s3_vs_local writers=<n> ratio=<s3/local>`` and one ``steady:`` line
per flush setting. On a shared 2-core machine two writers compete for the same cores: read the ratios, not the
absolutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gangscope import config  # noqa: E402
from gangscope.records import ScrapeBatch  # noqa: E402
from gangscope.transport import kafka as pkafka  # noqa: E402
from gangscope.transport.broker import EmbeddedBroker  # noqa: E402
from gangscope.transport.publish import Publisher  # noqa: E402
from pipeline import compaction, lake  # noqa: E402
from tests.servers import postgres, s3  # noqa: E402

SAMPLES = 200


def _batch(target: int, rnd: int) -> ScrapeBatch:
    b = ScrapeBatch(cluster="bench", target=f"http://node-{target}:9400/metrics", job="dcgm",
                    instance=f"node-{target}:9400", scraped_at_ms=1_790_000_000_000 + rnd * 15_000)
    for gpu in range(8):
        for m in range(SAMPLES // 8):
            s = b.add_series(f"DCGM_FI_BENCH_{m}", {"gpu": str(gpu), "Hostname": f"node-{target}"})
            b.add_sample(s, float(rnd * gpu + m))
    return b


class Servers:
    """The private PostgreSQL and (unless --no-s3 or not built) SeaweedFS of the run, and a DuckDB secret for the
    bucket in a HOME of its own that every writer inherits."""

    def __init__(self, want_s3: bool) -> None:
        self.pg = postgres.start()
        self.s3: s3.S3Server | None = None
        self.home = Path(tempfile.mkdtemp(prefix="gangscope-bench-home-"))
        if want_s3:
            try:
                self.s3 = s3.start()
            except RuntimeError as e:
                print(f"  no S3 cases: {e}", file=sys.stderr)
        if self.s3 is not None:
            import duckdb

            con = duckdb.connect(config={"secret_directory": str(self.home / ".duckdb" / "stored_secrets")})
            lake.load_extensions(con, ("httpfs",))
            con.execute(self.s3.duckdb_secret(persistent=True))
            con.close()
            os.environ["HOME"] = str(self.home)  # this process's lake connections find the secret too

    def database(self) -> str:
        name = f"gangscope_bench_{uuid.uuid4().hex[:8]}"
        made = self.pg.psql(f"CREATE DATABASE {name}")
        if made.returncode != 0:
            raise SystemExit(f"PostgreSQL: {made.stderr}")
        return name

    def stop(self) -> None:
        if self.s3 is not None:
            self.s3.remove()
        self.pg.stop()


def _landed(settings: config.Settings) -> int:
    try:
        con = lake.connect(settings, read_only=True, create=False)
    except Exception:  # noqa: BLE001 - the lake may not exist yet
        return 0
    try:
        return con.execute("SELECT count(*) FROM raw.metric_points").fetchone()[0]
    except Exception:  # noqa: BLE001
        return 0
    finally:
        con.close()


def _ready_at(logs: list[Path]) -> datetime:
    """When the last writer logged its last assignment (the group is stable from then on)."""
    times = []
    for log in logs:
        lines = [ln for ln in log.read_text().splitlines() if "assigned" in ln and "partition(s)" in ln]
        times.append(datetime.strptime(lines[-1][:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC))
    return max(times)


def _rate(settings: config.Settings, ready: datetime) -> float:
    """Samples per second landed after ``ready``: each record is one scrape of SAMPLES samples."""
    con = lake.connect(settings, read_only=True, create=False)
    try:
        before, after, last = con.execute(
            "WITH p AS (SELECT topic, \"partition\", max(next_offset) FILTER (WHERE landed_at <= $ready) AS b, "
            "max(next_offset) AS a, max(landed_at) AS t FROM raw.kafka_offsets GROUP BY ALL) "
            "SELECT sum(coalesce(b, 0)), sum(a), max(t) FROM p", {"ready": ready}).fetchone()
    finally:
        con.close()
    span = (last - ready).total_seconds()
    return (after - before) * SAMPLES / span if span > 0 else float("nan")


def _writers(settings: config.Settings, broker: EmbeddedBroker, prefix: str, group: str, data: Path, n: int,
             args: argparse.Namespace, **env_extra: str) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")}
    env.update({"GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap, "GANGSCOPE_KAFKA_TOPIC_PREFIX": prefix,
                "GANGSCOPE_KAFKA_PARTITIONS": str(args.partitions), "GANGSCOPE_PIPELINE_GROUP_ID": group,
                "GANGSCOPE_DATA": str(data), "GANGSCOPE_LOG_LEVEL": "INFO", "GANGSCOPE_LOG_FORMAT": "text",
                **env_extra})
    if settings.catalog:
        env["GANGSCOPE_CATALOG"] = settings.catalog
    if settings.lake_data_path:
        env["GANGSCOPE_LAKE_DATA_PATH"] = settings.lake_data_path
    logs = [data / f"writer-{group}-{i}.log" for i in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", "import sys; from gangscope.app.cli import main; sys.exit(main())",
                               "pipeline"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
             for log in logs]
    return procs, logs


def _lake(servers: Servers, broker: EmbeddedBroker, prefix: str, catalog: str, storage: str,
          args: argparse.Namespace) -> tuple[config.Settings, Path]:
    """A fresh lake for a case: its data dir, and its catalog database and S3 prefix when asked for."""
    data = Path(tempfile.mkdtemp(prefix="gangscope-bench-"))
    over: dict[str, object] = {"data": str(data)}
    if catalog == "postgres":
        over["catalog"] = servers.pg.url(servers.database())
    if storage == "s3":
        assert servers.s3 is not None
        over["lake_data_path"] = f"s3://{servers.s3.bucket}/bench-{uuid.uuid4().hex[:8]}/"
    settings = _settings(broker, prefix, args, **over)
    lake.connect(settings).close()
    return settings, data


def case(servers: Servers, broker: EmbeddedBroker, prefix: str, catalog: str, storage: str, writers: int,
         args: argparse.Namespace) -> float:
    settings, data = _lake(servers, broker, prefix, catalog, storage, args)
    total = args.targets * args.rounds * SAMPLES
    procs, logs = _writers(settings, broker, prefix, f"g{uuid.uuid4().hex[:8]}", data, writers, args,
                           GANGSCOPE_PIPELINE_BATCH_RECORDS=str(args.batch_records))
    try:
        while True:
            n = _landed(settings)
            if n >= total:
                rate = _rate(settings, _ready_at(logs))
                break
            if all(p.poll() is not None for p in procs):
                raise SystemExit(f"writers exited with {total - n} samples not landed: "
                                 f"{logs[0].read_text()[-2000:]}")
            time.sleep(0.5)
    finally:
        for p in procs:
            p.terminate()
            p.wait(60)
    return rate


def _objects(servers: Servers, settings: config.Settings) -> dict[str, int]:
    """Objects under the case's prefix (key -> bytes), the write check left out."""
    assert servers.s3 is not None and settings.lake_data_path
    prefix = settings.lake_data_path.split("/", 3)[3]
    return {k: v for k, v in servers.s3.objects(prefix).items() if not k.endswith(lake.WRITE_CHECK)}


def _by_table(objects: dict[str, int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for key, size in objects.items():
        parts = key.split("/")
        out.setdefault(parts[-2] if len(parts) > 2 else "?", []).append(size)
    return out


def steady(servers: Servers, broker: EmbeddedBroker, flush: float, args: argparse.Namespace) -> None:
    """One writer on S3 at ``flush`` seconds, fed ``--steady-targets`` scrapes every 15 s for ``--steady-s``: objects
    written per minute (before compaction) and their sizes per table, then the sizes after a compaction."""
    prefix = f"s{uuid.uuid4().hex[:8]}."
    settings, data = _lake(servers, broker, prefix, "postgres", "s3", args)
    pkafka.ensure_topics(settings, broker.bootstrap)
    procs, logs = _writers(settings, broker, prefix, f"g{uuid.uuid4().hex[:8]}", data, 1, args,
                           GANGSCOPE_PIPELINE_FLUSH_SECONDS=str(flush))
    stop = threading.Event()
    sent = [0]

    def feed() -> None:
        """Each target scraped every 15 s, the scrapes spread evenly over the interval."""
        with Publisher(settings, broker.bootstrap) as pub:
            gap = 15.0 / args.steady_targets
            rnd = 0
            while not stop.is_set():
                t0 = time.monotonic()
                for t in range(args.steady_targets):
                    if stop.is_set():
                        break
                    pub.publish(_batch(t, rnd))
                    sent[0] += 1
                    time.sleep(max(0.0, t0 + (t + 1) * gap - time.monotonic()))
                rnd += 1
            pub.flush(60)

    try:
        while not any("assigned" in ln for log in logs for ln in log.read_text().splitlines()):
            time.sleep(0.2)
        before = set(_objects(servers, settings))
        feeder = threading.Thread(target=feed, daemon=True)
        t0 = time.monotonic()
        feeder.start()
        time.sleep(args.steady_s)
        stop.set()
        feeder.join(60)
        elapsed = time.monotonic() - t0
        # Land what is left (a flush at most), then count what the writer wrote during the window and after.
        deadline = time.monotonic() + 60 + flush
        while _landed(settings) < sent[0] * SAMPLES and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        for p in procs:
            p.terminate()
            p.wait(60)
    written = {k: v for k, v in _objects(servers, settings).items() if k not in before}
    tables = _by_table(written)
    con = lake.connect(settings)
    try:
        compaction.compact(con, keep=timedelta(0), orphan_age=timedelta(0))
    finally:
        con.close()
    after = _by_table(_objects(servers, settings))
    rate = sent[0] * SAMPLES / elapsed

    def sizes(t: dict[str, list[int]]) -> str:
        return " ".join(f"{name}:{len(v)}x{statistics.median(v) / 1e6:.3f}MB" for name, v in sorted(t.items()))

    points = sum(tables.get("metric_points", [0])) / elapsed  # bytes/s of the largest table
    needed = 8e6 / points if points else float("nan")  # seconds of it that make one 8 MB object
    print(f"steady: flush_s={flush:g} samples_per_s={rate:,.0f} objects_per_min={len(written) * 60 / elapsed:.1f} "
          f"metric_points_bytes_per_s={points:,.0f} flush_for_8mb_points_s={needed:.0f} "
          f"written=[{sizes(tables)}] after_compaction=[{sizes(after)}]")


def _settings(broker: EmbeddedBroker, prefix: str, args: argparse.Namespace, **over: object) -> config.Settings:
    kafka = {"bootstrap_servers": broker.bootstrap, "topic_prefix": prefix, "partitions": args.partitions}
    return config.load(overrides={**over, "kafka": kafka}, environ={})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-records", type=int, default=200,
                    help="pipeline.batch_records (steady state: 1,000 targets / 15 s, 2 s flushes: ~130)")
    ap.add_argument("--no-s3", action="store_true", help="skip the cases on S3 (SeaweedFS)")
    ap.add_argument("--steady-targets", type=int, default=400, help="scrape targets of the steady S3 case (0: none)")
    ap.add_argument("--steady-s", type=float, default=60.0, help="seconds of the steady S3 case")
    ap.add_argument("--flush", default="2,30", help="pipeline.flush_seconds of the steady S3 cases, comma-separated")
    args = ap.parse_args()
    broker = EmbeddedBroker().start()
    servers = Servers(want_s3=not args.no_s3)
    try:
        prefix = f"b{uuid.uuid4().hex[:8]}."
        settings = _settings(broker, prefix, args, data=tempfile.mkdtemp(prefix="gangscope-bench-"))
        pkafka.ensure_topics(settings, broker.bootstrap)
        with Publisher(settings, broker.bootstrap, max_buffered=10**7) as pub:
            for rnd in range(args.rounds):
                for t in range(args.targets):
                    pub.publish(_batch(t, rnd))
            assert pub.flush(600)
        cases = [("sqlite", "local", 1), ("postgres", "local", 1), ("sqlite", "local", 2), ("postgres", "local", 2)]
        if servers.s3 is not None:  # interleaved with their local twins, so load swings hit both alike
            cases = [("sqlite", "local", 1), ("postgres", "local", 1), ("postgres", "s3", 1), ("sqlite", "local", 2),
                     ("postgres", "local", 2), ("postgres", "s3", 2)]
        results = {}
        for catalog, storage, writers in cases:
            t0 = time.monotonic()
            results[(catalog, storage, writers)] = case(servers, broker, prefix, catalog, storage, writers, args)
            print(f"  case {catalog}/{storage} x{writers}: {time.monotonic() - t0:.1f}s wall", file=sys.stderr)
        base = results[("sqlite", "local", 1)]
        for (catalog, storage, writers), rate in results.items():
            print(f"scale_out: catalog={catalog} storage={storage} writers={writers} samples_per_s={rate:,.0f} "
                  f"ratio={rate / base:.2f}")
        for writers in (1, 2):
            if ("postgres", "s3", writers) in results:
                ratio = results[("postgres", "s3", writers)] / results[("postgres", "local", writers)]
                print(f"scale_out: s3_vs_local writers={writers} ratio={ratio:.2f}")
        if servers.s3 is not None and args.steady_targets:
            for flush in (float(f) for f in args.flush.split(",")):
                steady(servers, broker, flush, args)
    finally:
        servers.stop()
        broker.stop()


if __name__ == "__main__":
    main()
