"""Ingest benchmark: land M realistic 8-GPU dcgm-exporter scrapes vs. merely reading them from Kafka.

Usage: ``python bench/ingest.py [--records M] [--broker tansu|kafka|both]``. Starts the broker
(default ``both``: the embedded Tansu broker, then Apache Kafka as the tests run it, each in its own
process run and each line prefixed with its name), publishes M scrape
records (200 samples each: the 23 dcgm-exporter series of the reference L4 scrape plus two DCP
profiling series, for 8 GPUs, with pod attribution labels), then times

  (a) a raw kafka-python consumer that only reads the records, and
  (b) the pipeline (``consume.run(..., once=True)``) decoding and landing them into the lake,

each from partition assignment to its last record read / landed (group joins and the idle wait
are excluded), ``--repeat`` times, alternating (each landing into a fresh lake). Prints the medians of
samples/s for both and the median of the runs' ratios b/a, ending with
``ingest: landed=<samples/s> raw=<samples/s> ratio=<b/a> rss_mb=<peak>`` (this process's peak RSS from
the start of a landing run on, so the publishing phase does not count; memory it kept counts). Before it,
a ``cpu:`` line gives CPU microseconds per sample of the raw read (c), of decoding (d) and of writing (w), and
the ratio they allow: the pipeline does the raw reader's work plus decoding and writing, so even with every
core busy all the time it lands at most cores / (c + d + w) samples/s; divided by the raw rate, that bounds
the ratio.
The default backlog (24000 scrapes, 4.8 M samples, ~1 s of raw reading) is long enough that the
pipeline's fill and drain (first batch decoded before anything is written, last batch written after
everything is read; ~0.3 s together) do not decide the ratio.
``--free-decode`` also runs, after each pipeline run, (c) the pipeline with decoding replaced by frames cut from
one real decode (right row counts, not the batch's own values): the ratio a decoder costing nothing would reach;
and (d) with nothing decoded and only the offsets written: the ratio of the consume loop and its commits alone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
from kafka import ConsumerRebalanceListener  # noqa: E402

from gangscope import config  # noqa: E402
from gangscope.records import ScrapeBatch, encode_scrape  # noqa: E402
from gangscope.transport import kafka as pkafka  # noqa: E402
from gangscope.transport.broker import EmbeddedBroker  # noqa: E402
from gangscope.transport.publish import Publisher  # noqa: E402
from pipeline import consume, lake, land  # noqa: E402
from tests.servers import kafka as kafka_server  # noqa: E402

REFERENCE = ROOT / "tests" / "fixtures" / "reference" / "telemetry"
SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\s+(\S+)')
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
EXTRA = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")  # DCP fields, in dcp-metrics-included
GPUS = 8
NODES = 32


def reference_series() -> list[tuple[str, dict[str, str]]]:
    """(metric, labels) of GPU 0 in the reference dcgm-exporter scrape, plus the DCP extras."""
    out = []
    for line in (REFERENCE / "dcgm-exporter_metrics_sample_L4_gpu-operator.prom").read_text().splitlines():
        m = SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(LABEL.findall(m.group(2)))))
    dcp = (REFERENCE / "dcgm-exporter_dcp-metrics-included.csv").read_text()
    for name in EXTRA:
        assert name in dcp, name
        out.append((name, dict(out[0][1])))
    return out


def scrape(series: list[tuple[str, dict[str, str]]], node: int, i: int, t_ms: int) -> ScrapeBatch:
    host = f"gpu-node-{node:03d}"
    b = ScrapeBatch("bench", f"http://{host}:9400/metrics", "nvidia-dcgm-exporter", f"10.0.{node}.7:9400", t_ms,
                    duration_s=0.04)
    for g in range(GPUS):
        for k, (metric, labels) in enumerate(series):
            lbl = dict(labels, gpu=str(g), device=f"nvidia{g}", Hostname=host,
                       UUID=f"GPU-{uuid.UUID(int=node * 64 + g)}", pci_bus_id=f"00000000:{0x18 + g * 0x10:02X}:00.0",
                       pod=f"trainer-{node // 4}-{node % 4}", namespace="ml-team", container="pytorch")
            s = b.add_series(metric, lbl)
            b.add_sample(s, float((i * 7 + g * 13 + k) % 100) + 0.5)
    return b


def scrapes(records: int) -> Iterator[ScrapeBatch]:
    """The bench's records: NODES nodes scraped in turn, a round every 15 s (bench/codecs.py reads them too)."""
    series = reference_series()
    for i in range(records):
        yield scrape(series, i % NODES, i, 1_767_225_600_000 + (i // NODES) * 15_000)


def publish(settings: config.Settings, bootstrap: str, records: int) -> int:
    samples = 0
    with Publisher(settings, bootstrap, max_buffered=records + 1) as pub:
        for b in scrapes(records):
            samples += len(b.sample_series)
            pub.publish(b)
        assert pub.flush(600), "publish did not finish"
        assert pub.dropped == 0
    return samples


class _Assigned(ConsumerRebalanceListener):
    at: float | None = None
    cpu_at: float = 0.0  # process CPU seconds at the assignment

    def on_partitions_assigned(self, assigned: set) -> None:
        if self.at is None:
            self.at, self.cpu_at = time.monotonic(), time.process_time()

    def on_partitions_revoked(self, revoked: set) -> None:
        pass


def raw_read(settings: config.Settings, bootstrap: str, records: int) -> tuple[float, float]:
    """Seconds from partition assignment to the last record for a consumer that only reads, and the process CPU
    seconds it spent meanwhile (kafka-python's I/O thread included).

    Same consumer settings as the pipeline's, and the same clock (the pipeline's ``active_s``
    also runs from assignment to its last batch landed).
    """
    c = pkafka.consumer(settings, bootstrap, group_id=f"raw-{uuid.uuid4().hex[:6]}",
                        max_poll_records=consume.POLL_RECORDS)
    listener = _Assigned()
    c.subscribe(list(pkafka.topics(settings).values()), listener=listener)
    n = 0
    while n < records:
        for recs in c.poll(timeout_ms=500).values():
            n += len(recs)
            for r in recs:  # touch each value, as a reader would
                len(r.value)
    elapsed = time.monotonic() - (listener.at or time.monotonic())
    cpu = time.process_time() - listener.cpu_at
    c.close()
    return elapsed, cpu


def stage_cpu(records: int = 2000, repeat: int = 3) -> tuple[float, float]:
    """Process CPU seconds per sample to decode (``land.prepare``) and to write (``land.write``) the bench's
    records as the pipeline does with a backlog (batches of ``records``, ``consume.MERGE_BATCHES`` landed in one
    transaction), in this thread, Polars' and DuckDB's own threads included; medians of ``repeat``."""
    values = [encode_scrape(b) for b in scrapes(records)]
    decode, write = [], []
    with tempfile.TemporaryDirectory() as tmp:
        con = lake.connect(config.load(overrides={"data": tmp}, environ={}))
        for r in range(repeat + 1):  # partitions of their own per round (none looks landed before); 0 warms up
            parts = range(r * consume.MERGE_BATCHES, (r + 1) * consume.MERGE_BATCHES)
            t0 = time.process_time()
            preps = [land.prepare([("gangscope.metrics", p, i, v) for i, v in enumerate(values)]) for p in parts]
            t1 = time.process_time()
            stats = land.write(con, land.merge(preps))
            t2 = time.process_time()
            if r:
                decode.append((t1 - t0) / stats.samples)
                write.append((t2 - t1) / stats.samples)
        con.close()
    return median(decode), median(write)


def _consume_batches(settings: config.Settings, bootstrap: str, records: int, listener: _Assigned,
                     batch: int = 2000) -> Iterator[list[bytes]]:
    """Record values in batches of ``batch``, read by a fresh consumer group (the peers' Kafka side)."""
    c = pkafka.consumer(settings, bootstrap, group_id=f"peer-{uuid.uuid4().hex[:6]}",
                        max_poll_records=consume.POLL_RECORDS)
    c.subscribe(list(pkafka.topics(settings).values()), listener=listener)
    n, buf = 0, []
    try:
        while n < records:
            for recs in c.poll(timeout_ms=500).values():
                n += len(recs)
                buf.extend(r.value for r in recs)
            if len(buf) >= batch or (n >= records and buf):
                yield buf
                buf = []
    finally:
        c.close()


_PEER_SCHEMA = {"scraped_at": pl.Int64(), "target": pl.String(), "mn": pl.List(pl.String), "mc": pl.List(pl.Int64),
                "ls": pl.List(pl.String), "lr": pl.List(pl.Int64), "x": pl.List(pl.Float64)}


def _peer_rows(values: list[bytes]) -> pa.Table:
    """What a hand-written lander makes of a batch: one wide row (ts, target, metric, labels, value) per sample.

    Handles only what these records use (one sample per series at the scrape's time, finite values):
    no checks, no dead letters, no series ids."""
    df = pl.read_ndjson(io.BytesIO(b"\n".join(values)), schema=_PEER_SCHEMA).with_row_index("r")
    metric = (df.select("r", "mn", "mc").explode(["mn", "mc"])
              .select(pl.col("mn").repeat_by("mc")).explode("mn")["mn"])
    runs = (df.select("r", "ls", f=pl.col("lr").list.gather_every(2), c=pl.col("lr").list.gather_every(2, 1))
            .explode(["f", "c"]).with_columns(i=pl.int_ranges("f", pl.col("f") + pl.col("c"))).explode("i"))
    labels = runs.select(pl.col("ls").list.get(pl.col("i")))["ls"]
    samples = df.select(ts=pl.from_epoch("scraped_at", "ms").dt.replace_time_zone("UTC"), target="target",
                        value="x").explode("value")
    return samples.with_columns(metric=metric, labels=labels).select("ts", "target", "metric", "labels",
                                                                     "value").to_arrow()


def minimal_land(settings: config.Settings, bootstrap: str, records: int, db: Path) -> tuple[float, int]:
    """Peer: kafka-python + Polars + DuckDB by hand, at least once (no offsets in the database), no dead
    letters; seconds from partition assignment to the last batch inserted into a plain DuckDB file, and rows."""
    listener = _Assigned()
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE samples (ts TIMESTAMPTZ, target VARCHAR, metric VARCHAR, labels VARCHAR, "
                "value DOUBLE)")
    for values in _consume_batches(settings, bootstrap, records, listener):
        rows = _peer_rows(values)  # noqa: F841 (read by DuckDB's replacement scan)
        con.execute("INSERT INTO samples SELECT * FROM rows")
    elapsed = time.monotonic() - (listener.at or time.monotonic())
    landed = con.execute("SELECT count(*) FROM samples").fetchone()[0]
    con.close()
    return elapsed, landed


def dlt_land(settings: config.Settings, bootstrap: str, records: int, work: Path) -> tuple[float, int] | None:
    """Peer: dlt (the ``bench`` extra) loading the same rows into DuckDB, handed over as Arrow tables (dlt's
    fastest path: written straight to Parquet, no per-row normalising). Seconds from partition assignment to the
    end of the load, and rows; None when dlt is not installed."""
    try:
        import dlt
    except ImportError:
        return None
    listener = _Assigned()

    @dlt.resource(name="samples", write_disposition="append")
    def samples() -> Iterator[pa.Table]:
        for values in _consume_batches(settings, bootstrap, records, listener):
            yield _peer_rows(values)

    pipe = dlt.pipeline(pipeline_name=f"bench_{uuid.uuid4().hex[:6]}", pipelines_dir=str(work / "dlt"),
                        destination=dlt.destinations.duckdb(str(work / "dlt.duckdb")), dataset_name="bench")
    pipe.run(samples())
    elapsed = time.monotonic() - (listener.at or time.monotonic())
    with duckdb.connect(str(work / "dlt.duckdb"), read_only=True) as con:
        return elapsed, con.execute("SELECT count(*) FROM bench.samples").fetchone()[0]


PEERS = {"minimal": "hand-written kafka-python + Polars + DuckDB lander (at least once, no dead letters)",
         "dlt": "dlt to DuckDB, Arrow tables in (the bench extra)"}


def run_peers(settings: config.Settings, bootstrap: str, records: int, samples: int, work: Path,
              rates: dict[str, list[float]]) -> None:
    """One run of each peer on the same records (each its own consumer group), appending samples/s to ``rates``."""
    work.mkdir(parents=True, exist_ok=True)
    s, landed = minimal_land(settings, bootstrap, records, work / "minimal.duckdb")
    assert landed == samples, (landed, samples)
    rates["minimal"].append(samples / s)
    line = f"  peers: minimal {s:.2f}s, {rates['minimal'][-1]:,.0f} samples/s"
    out = dlt_land(settings, bootstrap, records, work)
    if out is None:
        line += "; dlt not installed (pip install -e '.[bench]')"
    else:
        s, landed = out
        assert landed == samples, (landed, samples)
        rates["dlt"].append(samples / s)
        line += f"; dlt {s:.2f}s, {rates['dlt'][-1]:,.0f} samples/s"
    print(line, flush=True)


def reset_peak_rss() -> None:
    """Forget this process's peak RSS so far (Linux), so the publishing phase does not count as the pipeline's."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_rss_mb() -> float:
    """Peak RSS since ``reset_peak_rss`` (VmHWM), else since start."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextlib.contextmanager
def decoding_free(records: int, rows: bool = True) -> Iterator[None]:
    """``land``'s decoder replaced by slices of one real decode of ``records`` bench scrapes: what the pipeline lands
    if decoding cost nothing. Slicing is zero-copy; the rest (fetch, offsets, writing, commits) is the real one.
    Without ``rows``, no rows at all: each transaction writes only its offsets."""
    values = [encode_scrape(b) for b in scrapes(records)]
    frames, _ = land._decode([("gangscope.metrics", 0, i, v) for i, v in enumerate(values)])
    per_record = {t: frames[t].height // records for t in ("metric_points", "scrapes")}
    real = land._decode

    def sliced(fresh: list[land.Record]) -> tuple[dict[str, pl.DataFrame], list]:
        assert len(fresh) <= records, f"a batch of {len(fresh)} records, more than the {records} prepared"
        if not rows:
            return {}, []
        return {t: f.head(per_record[t] * len(fresh)) if t in per_record else f for t, f in frames.items()}, []

    land._decode = sliced
    try:
        yield
    finally:
        land._decode = real


def start_broker(name: str) -> EmbeddedBroker | kafka_server.KafkaServer:
    """The embedded broker, or Apache Kafka as tests/servers/kafka.py starts it (jars from .ci/run's cache)."""
    return EmbeddedBroker().start() if name == "tansu" else kafka_server.start()


def each_broker(argv: list[str]) -> int:
    """Run this benchmark once per broker, one after the other, each line prefixed with the broker's name."""
    rc = 0
    for name in ("tansu", "kafka"):
        proc = subprocess.Popen([sys.executable, __file__, *argv, "--broker", name], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout
        for line in proc.stdout:
            print(f"[{name}] {line}", end="", flush=True)
        rc = rc or proc.wait()
    return rc


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=24000, help="scrape records to publish (default 24000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each reader; medians are reported (default 3)")
    ap.add_argument("--batch-records", type=int, default=None, help="pipeline.batch_records (default: settings)")
    ap.add_argument("--broker", choices=("tansu", "kafka", "both"), default="both",
                    help="embedded Tansu, Apache Kafka, or both one after the other (default)")
    ap.add_argument("--no-peers", action="store_true", help="skip the hand-written lander and dlt")
    ap.add_argument("--free-decode", action="store_true",
                    help="also run the pipeline with decoding made free, and with only offsets written (bounds)")
    args = ap.parse_args()
    if args.broker == "both":
        return each_broker([a for a in sys.argv[1:] if a not in ("--broker", "both")])
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)  # "task ran for 0.1s": our own CPU load
    broker = start_broker(args.broker)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pipeline: dict[str, object] = {"idle_seconds": 2.0}
            if args.batch_records:
                pipeline["batch_records"] = args.batch_records
            settings = config.load(overrides={"data": f"{tmp}/publish", "pipeline": pipeline,
                                              "kafka": {"bootstrap_servers": broker.bootstrap}}, environ={})
            t = time.perf_counter()
            samples = publish(settings, broker.bootstrap, args.records)
            print(f"published {args.records} records, {samples} samples in {time.perf_counter() - t:.1f}s")
            raws, landeds, peaks, raw_cpus = [], [], [], []
            cases = (("decoding free", "c", True), ("only offsets written", "d", False)) if args.free_decode else ()
            bounds: dict[str, list[float]] = {case: [] for case, _, _ in cases}
            peers: dict[str, list[float]] = {"minimal": [], "dlt": []}
            # Interleaved, so a machine that gets busier or quieter during the run moves both alike.
            for run in range(args.repeat):
                raw_s, cpu_s = raw_read(settings, broker.bootstrap, args.records)
                raws.append(samples / raw_s)
                raw_cpus.append(cpu_s / samples)
                s = config.load(overrides={"data": f"{tmp}/lake{run}", "kafka": {"bootstrap_servers": broker.bootstrap},
                                           "pipeline": dict(pipeline, group_id=f"bench-{run}")}, environ={})
                reset_peak_rss()
                stats = consume.run(s, broker.bootstrap, once=True)
                peaks.append(peak_rss_mb())
                assert stats.samples == samples and stats.dead == 0, stats
                landeds.append(samples / stats.active_s)
                print(f"run {run + 1}: (a) raw consume {raw_s:.2f}s, {raws[-1]:,.0f} samples/s; (b) pipeline landing "
                      f"{stats.active_s:.2f}s in {stats.batches} batches, {landeds[-1]:,.0f} samples/s "
                      f"(decoder thread: {stats.decode_s:.2f}s, writer thread: {stats.write_s:.2f}s); "
                      f"b/a {landeds[-1] / raws[-1]:.2f}")
                for case, letter, rows in cases:
                    free = {"data": f"{tmp}/{letter}{run}", "pipeline": dict(pipeline, group_id=f"{letter}-{run}"),
                            "kafka": {"bootstrap_servers": broker.bootstrap}}
                    s = config.load(overrides=free, environ={})
                    with decoding_free(2 * s.pipeline.batch_records, rows):  # a batch is at most a poll past its size
                        stats = consume.run(s, broker.bootstrap, once=True)
                    assert stats.records == args.records and stats.samples == (samples if rows else 0), stats
                    bounds[case].append(samples / stats.active_s)
                    print(f"run {run + 1}: ({letter}) pipeline, {case} {stats.active_s:.2f}s, "
                          f"{bounds[case][-1]:,.0f} samples/s; {letter}/a {bounds[case][-1] / raws[-1]:.2f}")
                if not args.no_peers:
                    run_peers(settings, broker.bootstrap, args.records, samples, Path(tmp) / f"peers{run}", peers)
            raw, landed = median(raws), median(landeds)
            # The ratio is the median of the back-to-back pairs': the machine's speed moves both halves of a pair.
            ratio = median([b / a for a, b in zip(raws, landeds, strict=True)])
            rss_mb = max(peaks)
            print(f"medians of {args.repeat}: raw {raw:,.0f} samples/s, landed {landed:,.0f} samples/s")
            print(f"case raw consume (no decoding): {raw:,.0f} samples/s, ratio 1")
            print(f"case gangscope pipeline (exactly once, dead letters): {landed:,.0f} samples/s, ratio {ratio:.2f}")
            for case, rates in bounds.items():
                if rates:
                    r = median([b / a for a, b in zip(raws, rates, strict=True)])
                    print(f"case gangscope pipeline, {case} (a bound): {median(rates):,.0f} samples/s, ratio {r:.2f}")
            for name, rates in peers.items():
                if rates:
                    r = median([b / a for a, b in zip(raws, rates, strict=False)])
                    print(f"case {PEERS[name]}: {median(rates):,.0f} samples/s, ratio {r:.2f}")
            dlt_ratio = median([a / b for a, b in zip(landeds, peers["dlt"], strict=False)]) if peers["dlt"] else None
            c = median(raw_cpus)
            d, w = stage_cpu()
            cores = len(os.sched_getaffinity(0))
            print(f"cpu: consume_us={c * 1e6:.3f} decode_us={d * 1e6:.3f} write_us={w * 1e6:.3f} per sample; "
                  f"{cores} cores bound the ratio at {cores / (c + d + w) / raw:.2f}")
            print(f"ingest: landed={landed:.0f} raw={raw:.0f} ratio={ratio:.2f} rss_mb={rss_mb:.0f}"
                  + (f" dlt_ratio={dlt_ratio:.1f}" if dlt_ratio else ""))
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
