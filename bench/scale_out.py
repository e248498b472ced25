"""Benchmark: landing rate of 1 vs 2 `gangscope pipeline` processes, SQLite vs PostgreSQL catalog.

Publishes ``--targets`` x ``--rounds`` scrape batches (200 GPU samples each, distinct targets, so
keys spread over the partitions) to the embedded broker once; each case then lands all of it
into a fresh lake with its own consumer group. The rate counts from the moment the last
writer got its final partition assignment (from the writers' logs) to the last commit
(``raw.kafka_offsets.landed_at``), so process start-up and the group's rebalances are left
out. The baseline is one writer on the default SQLite catalog, measured in the same run;
ratios are against it. Needs the local PostgreSQL (127.0.0.1:5432, trust auth, `psql` on
PATH) for the PostgreSQL cases.

    .venv/bin/python bench/scale_out.py [--targets 100] [--rounds 20] [--partitions 4] [--batch-records 200]

Ends with one line per case: ``scale_out: catalog=<c> writers=<n> samples_per_s=<r> ratio=<r/baseline>``.
On a shared 2-core machine two writers compete for the same cores: read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gangscope import config  # noqa: E402
from gangscope.records import ScrapeBatch  # noqa: E402
from gangscope.transport import kafka as pkafka  # noqa: E402
from gangscope.transport.broker import EmbeddedBroker  # noqa: E402
from gangscope.transport.publish import Publisher  # noqa: E402
from pipeline import lake  # noqa: E402

SAMPLES = 200


def _batch(target: int, rnd: int) -> ScrapeBatch:
    b = ScrapeBatch(cluster="bench", target=f"http://node-{target}:9400/metrics", job="dcgm",
                    instance=f"node-{target}:9400", scraped_at_ms=1_790_000_000_000 + rnd * 15_000)
    for gpu in range(8):
        for m in range(SAMPLES // 8):
            s = b.add_series(f"DCGM_FI_BENCH_{m}", {"gpu": str(gpu), "Hostname": f"node-{target}"})
            b.add_sample(s, float(rnd * gpu + m))
    return b


def _psql(sql: str) -> bool:
    return subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qAtc", sql],
                          capture_output=True).returncode == 0


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


def case(broker: EmbeddedBroker, prefix: str, catalog: str, writers: int, args: argparse.Namespace) -> float:
    tag = uuid.uuid4().hex[:8]
    data = Path(tempfile.mkdtemp(prefix="gangscope-bench-"))
    db = None
    cat = None
    if catalog == "postgres":
        db = f"gangscope_bench_{tag}"
        if not _psql(f"CREATE DATABASE {db}"):
            raise SystemExit("PostgreSQL at 127.0.0.1:5432 not usable")
        cat = f"postgres://postgres@127.0.0.1:5432/{db}"
    settings = _settings(broker, prefix, args, data=str(data), catalog=cat)
    lake.connect(settings).close()
    total = args.targets * args.rounds * SAMPLES
    env = {k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")}
    env.update({"GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap, "GANGSCOPE_KAFKA_TOPIC_PREFIX": prefix,
                "GANGSCOPE_KAFKA_PARTITIONS": str(args.partitions), "GANGSCOPE_PIPELINE_GROUP_ID": f"g{tag}",
                "GANGSCOPE_PIPELINE_BATCH_RECORDS": str(args.batch_records), "GANGSCOPE_DATA": str(data),
                "GANGSCOPE_LOG_LEVEL": "INFO", "GANGSCOPE_LOG_FORMAT": "text"})
    if cat:
        env["GANGSCOPE_CATALOG"] = cat
    logs = [data / f"writer-{i}.log" for i in range(writers)]
    procs = [subprocess.Popen([sys.executable, "-c", "import sys; from gangscope.app.cli import main; sys.exit(main())",
                               "pipeline"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
             for log in logs]
    try:
        while True:
            n = _landed(settings)
            if n >= total:
                rate = _rate(settings, _ready_at(logs))
                break
            if all(p.poll() is not None for p in procs):
                raise SystemExit(f"writers exited with {total - n} samples not landed")
            time.sleep(0.5)
    finally:
        for p in procs:
            p.terminate()
            p.wait(60)
        if db:
            _psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    return rate


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
    args = ap.parse_args()
    broker = EmbeddedBroker().start()
    try:
        prefix = f"b{uuid.uuid4().hex[:8]}."
        settings = _settings(broker, prefix, args, data=tempfile.mkdtemp(prefix="gangscope-bench-"))
        pkafka.ensure_topics(settings, broker.bootstrap)
        with Publisher(settings, broker.bootstrap, max_buffered=10**7) as pub:
            for rnd in range(args.rounds):
                for t in range(args.targets):
                    pub.publish(_batch(t, rnd))
            assert pub.flush(600)
        results = {}
        for catalog, writers in (("sqlite", 1), ("postgres", 1), ("sqlite", 2), ("postgres", 2)):
            t0 = time.monotonic()
            results[(catalog, writers)] = case(broker, prefix, catalog, writers, args)
            print(f"  case {catalog} x{writers}: {time.monotonic() - t0:.1f}s wall", file=sys.stderr)
        base = results[("sqlite", 1)]
        for (catalog, writers), rate in results.items():
            print(f"scale_out: catalog={catalog} writers={writers} samples_per_s={rate:,.0f} ratio={rate / base:.2f}")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
