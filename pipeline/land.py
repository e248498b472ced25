"""Landing a micro-batch of Kafka records into the raw lake tables, exactly once.

Rows, dead letters and each partition's next offset are written in one DuckLake
transaction, so after a crash the lake either holds a batch with its offsets or neither;
the consumer seeks to the stored offsets on start. Inside the transaction the stored
offsets are read again and records below them are skipped, so a batch that another
process (or an earlier life of this one) already landed is never landed twice.

That check cannot see a transaction still open elsewhere: a group member the broker gave up on (a missed
session, a pause) may still be landing a batch of a partition while its new owner lands the same records.
So a member *claims* its partitions when assigned (``claim``): a transaction that records it in
``raw.kafka_claims`` and rewrites each partition's newest ``raw.kafka_offsets`` row. A landing checks, inside
its transaction, that the partitions are still claimed by it and skips those that are not; one that was open
while a claim committed conflicts with it (DuckLake: an insert and a delete in one table) and is run again,
then sees the claim.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb
import polars as pl

from gangscope import telemetry
from pipeline import lake
from pipeline.decode import Decoded, decode_k8s, decode_scrapes, with_series_ids

log = logging.getLogger(__name__)

Record = tuple[str, int, int, bytes]  # topic, partition, offset, value
TopicPartition = tuple[str, int]


@dataclass
class LandStats:
    records: int = 0
    k8s_rows: int = 0
    samples: int = 0
    scrapes: int = 0
    dead: int = 0
    skipped: int = 0  # already landed before (offset below the stored next offset)
    decode_s: float = 0.0  # time spent decoding
    write_s: float = 0.0  # time spent in the lake transaction
    next_offsets: dict[TopicPartition, int] = field(default_factory=dict)

    def add(self, other: LandStats) -> None:
        for name in ("records", "k8s_rows", "samples", "scrapes", "dead", "skipped", "decode_s", "write_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.next_offsets.update(other.next_offsets)


def topic_kind(topic: str) -> str | None:
    """``k8s`` or ``metrics`` by the topic's name (``<prefix>k8s``/``<prefix>metrics``)."""
    if topic.endswith("k8s"):
        return "k8s"
    if topic.endswith("metrics"):
        return "metrics"
    return None


def stored_offsets(con: duckdb.DuckDBPyConnection,
                   topic_ids: dict[str, str] | None = None) -> dict[TopicPartition, int]:
    """Next offset per (topic, partition) stored in the lake, for the topics' current ids.

    With ``topic_ids`` (topic -> Kafka topic id), rows written for another incarnation of a
    topic are ignored; a topic missing from ``topic_ids`` matches any id.
    """
    rows = con.execute(
        'SELECT topic, "partition", coalesce(topic_id, \'\'), max(next_offset) FROM raw.kafka_offsets '
        "GROUP BY ALL"
    ).fetchall()
    out: dict[TopicPartition, int] = {}
    for topic, part, tid, nxt in rows:
        want = (topic_ids or {}).get(topic)
        if want is not None and tid != want:
            continue
        key = (topic, int(part))
        out[key] = max(out.get(key, 0), int(nxt))
    return out


def claim(con: duckdb.DuckDBPyConnection, parts: list[TopicPartition], topic_ids: dict[str, str],
          owner: str) -> tuple[str, dict[TopicPartition, int]]:
    """Claim ``parts`` for a new owner (one transaction): returns the claim's id and the stored offsets as of it.

    Deleting and writing back each partition's newest offset row (one at offset 0 where none is stored) is what
    makes a landing open meanwhile conflict, whatever partition it lands: it is run again and finds the claim."""
    claim_id = uuid.uuid4().hex
    if not parts:
        return claim_id, {}

    def body() -> tuple[bool, dict[TopicPartition, int]]:
        con.register("_parts", pl.DataFrame({
            "topic": [t for t, _ in parts], "partition": pl.Series([p for _, p in parts], dtype=pl.Int32),
            "topic_id": [topic_ids.get(t, "") for t, _ in parts]}).to_arrow())
        try:
            newest = con.execute(
                'SELECT o.topic, o."partition", o.next_offset, o.landed_at, o.topic_id FROM raw.kafka_offsets o '
                'JOIN _parts p ON p.topic = o.topic AND p."partition" = o."partition" '
                "AND (p.topic_id = '' OR coalesce(o.topic_id, '') = p.topic_id) "
                'QUALIFY o.next_offset = max(o.next_offset) OVER (PARTITION BY o.topic, o."partition")').fetchall()
            con.execute('DELETE FROM raw.kafka_claims c USING _parts p WHERE c.topic = p.topic '
                        'AND c."partition" = p."partition"')
            now = datetime.now(UTC)
            con.execute('INSERT INTO raw.kafka_claims SELECT topic, "partition", topic_id, ?, ?, ? FROM _parts',
                        [claim_id, owner, now])
        finally:
            con.unregister("_parts")
        if newest:
            con.executemany('DELETE FROM raw.kafka_offsets WHERE topic = ? AND "partition" = ? '
                            "AND next_offset = ?", [r[:3] for r in newest])
        have = {(r[0], r[1]) for r in newest}
        rows = list(dict.fromkeys(newest)) + [(t, p, 0, now, topic_ids.get(t, "")) for t, p in parts
                                              if (t, p) not in have]
        con.executemany("INSERT INTO raw.kafka_offsets VALUES (?, ?, ?, ?, ?)", rows)
        return True, stored_offsets(con, topic_ids)

    return claim_id, lake.transaction(con, body)


def claims_held(con: duckdb.DuckDBPyConnection, parts: list[TopicPartition]) -> dict[TopicPartition, str]:
    """The current claim of each of ``parts`` that has one."""
    want = set(parts)
    rows = con.execute('SELECT topic, "partition", claim FROM raw.kafka_claims').fetchall()
    return {(t, int(p)): c for t, p, c in rows if (t, int(p)) in want}


def _with_kafka(df: pl.DataFrame, parts: pl.Series, offs: pl.Series) -> pl.DataFrame:
    idx = df["_i"]
    return df.drop("_i").with_columns(kafka_partition=parts.gather(idx), kafka_offset=offs.gather(idx))


def _decode(batch: list[Record]) -> tuple[dict[str, pl.DataFrame], list[tuple[Record, str]]]:
    """Decode a batch into frames per raw table plus dead letters."""
    by_kind: dict[str, list[Record]] = {"k8s": [], "metrics": []}
    dead: list[tuple[Record, str]] = []
    for rec in batch:
        kind = topic_kind(rec[0])
        if kind is None:
            dead.append((rec, f"unknown topic {rec[0]!r}"))
        else:
            by_kind[kind].append(rec)
    frames: dict[str, pl.DataFrame] = {}
    for kind, recs in by_kind.items():
        if not recs:
            continue
        values = [r[3] for r in recs]
        d: Decoded = decode_k8s(values) if kind == "k8s" else decode_scrapes(values)
        parts = pl.Series([r[1] for r in recs], dtype=pl.Int32)
        offs = pl.Series([r[2] for r in recs], dtype=pl.Int64)
        dead.extend((recs[i], why) for i, why in d.dead)
        if kind == "k8s":
            frames["k8s_objects"] = _with_kafka(d.rows, parts, offs)
        else:
            assert d.scrapes is not None and d.series is not None
            frames["metric_points"] = d.rows
            frames["metric_series"] = d.series
            frames["scrapes"] = _with_kafka(d.scrapes, parts, offs)
    return frames, dead


_INSERT = {
    "k8s_objects": "INSERT INTO raw.k8s_objects SELECT cluster, observed_at, event_type, api_version, kind, namespace, "
                   "name, uid, resource_version, object, kafka_partition, kafka_offset, bad_time FROM _frame",
    "metric_points": "INSERT INTO raw.metric_points SELECT ts, series, value FROM _frame",
    # Only series not landed yet: the day filter lets DuckLake skip the files of older days.
    "metric_series": "INSERT INTO raw.metric_series SELECT series, day, cluster, metric, labels, node, target, job, "
                     "instance FROM _frame WHERE series NOT IN (SELECT series FROM raw.metric_series "
                     "WHERE day >= (SELECT min(day) FROM _frame))",
    "scrapes": "INSERT INTO raw.scrapes SELECT cluster, scraped_at, target, job, instance, up, duration_s, samples, "
               "error, kafka_partition, kafka_offset, first_sample_at FROM _frame",
    "dead_letters": 'INSERT INTO raw.dead_letters SELECT landed_at, topic, "partition", "offset", reason, payload '
                    "FROM _frame",
    "kafka_offsets": 'INSERT INTO raw.kafka_offsets SELECT topic, "partition", next_offset, landed_at, topic_id '
                     "FROM _frame",
}


def insert_samples(con: duckdb.DuckDBPyConnection, samples: pl.DataFrame) -> None:
    """Land wide sample rows (``cluster``, ``ts``, ``metric``, ``labels``, ``value``, ``node``, ``target``, ``job``,
    ``instance``) into ``raw.metric_points`` / ``raw.metric_series`` as the pipeline would, without Kafka
    offsets: for tests, benchmarks and imports."""
    rows = with_series_ids(samples)
    for table, frame in (("metric_points", rows), ("metric_series", rows.unique("series"))):
        con.register("_frame", frame.to_arrow())
        try:
            con.execute(_INSERT[table])
        finally:
            con.unregister("_frame")


@dataclass
class Prepared:
    """A batch decoded into the frames of its lake transaction: ``prepare`` builds it, ``write`` lands it.

    The two halves run on different threads in the consume loop, so batch N+1 is decoded while
    batch N is written (Polars and DuckDB release the GIL).
    """

    batch: list[Record]
    stored: dict[TopicPartition, int]  # offsets known stored when prepared: records below were skipped
    fresh: list[Record] = field(default_factory=list)  # the batch minus those skipped records
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    dead: list[tuple[Record, str]] = field(default_factory=list)
    nxt: dict[TopicPartition, int] = field(default_factory=dict)  # next offset per partition after the batch
    low: dict[TopicPartition, int] = field(default_factory=dict)  # first offset per partition in the batch
    skipped: int = 0
    decode_s: float = 0.0


def land(con: duckdb.DuckDBPyConnection, batch: list[Record], topic_ids: dict[str, str] | None = None) -> LandStats:
    """Decode ``batch`` in bulk and land rows, dead letters and next offsets in one transaction.

    ``batch`` holds (topic, partition, offset, value); records whose offset is below the stored
    next offset of their partition were landed before and are skipped. Returns what was landed.
    """
    return write(con, prepare(batch, topic_ids), topic_ids)


def prepare(batch: list[Record], topic_ids: dict[str, str] | None = None,
            stored: dict[TopicPartition, int] | None = None) -> Prepared:
    """Decode ``batch`` (minus records below ``stored``) into the frames ``write`` lands."""
    stored = stored or {}
    fresh = [r for r in batch if r[2] >= stored.get((r[0], r[1]), 0)]
    prep = Prepared(batch, stored, fresh, skipped=len(batch) - len(fresh))
    if not fresh:
        return prep
    t0 = time.perf_counter()
    frames, dead = _decode(fresh)
    now = datetime.now(UTC)
    if dead:
        frames["dead_letters"] = pl.DataFrame({
            "landed_at": [now] * len(dead),
            "topic": [r[0] for r, _ in dead],
            "partition": pl.Series([r[1] for r, _ in dead], dtype=pl.Int32),
            "offset": pl.Series([r[2] for r, _ in dead], dtype=pl.Int64),
            "reason": [why for _, why in dead],
            "payload": pl.Series([r[3] for r, _ in dead], dtype=pl.Binary),
        })
    for topic, part, off, _ in fresh:
        tp = (topic, part)
        prep.nxt[tp] = max(prep.nxt.get(tp, 0), off + 1)
        prep.low[tp] = min(prep.low.get(tp, off), off)
    frames["kafka_offsets"] = pl.DataFrame({
        "topic": [t for t, _ in prep.nxt],
        "partition": pl.Series([p for _, p in prep.nxt], dtype=pl.Int32),
        "next_offset": pl.Series(list(prep.nxt.values()), dtype=pl.Int64),
        "landed_at": [now] * len(prep.nxt),
        "topic_id": [(topic_ids or {}).get(t, "") for t, _ in prep.nxt],
    })
    prep.frames, prep.dead = frames, dead
    prep.decode_s = time.perf_counter() - t0
    return prep


def merge(preps: list[Prepared]) -> Prepared:
    """Consecutive prepared batches as one, to land in one transaction.

    A transaction has a fixed cost (reading the stored offsets, checking the batch's series against the
    lake, the catalog commit: ~70 ms of the ~120 ms a 400k-sample batch took to write), so a writer that
    falls behind lands what has queued up at once. Frames are concatenated without copying.
    """
    if len(preps) == 1:
        return preps[0]
    out = Prepared([r for p in preps for r in p.batch], {}, [r for p in preps for r in p.fresh],
                   dead=[d for p in preps for d in p.dead], skipped=sum(p.skipped for p in preps),
                   decode_s=sum(p.decode_s for p in preps))
    for p in preps:
        out.stored.update(p.stored)
        for tp, nxt in p.nxt.items():
            out.nxt[tp] = max(out.nxt.get(tp, 0), nxt)
        for tp, low in p.low.items():
            out.low[tp] = min(out.low.get(tp, low), low)
    for table in dict.fromkeys(t for p in preps for t in p.frames):
        parts = [p.frames[table] for p in preps if table in p.frames]
        frame = pl.concat(parts, rechunk=False) if len(parts) > 1 else parts[0]
        if table == "metric_series":
            frame = frame.unique("series", keep="first", maintain_order=True)
        elif table == "kafka_offsets":  # one row per partition, as for a single batch
            frame = frame.group_by("topic", "partition", "topic_id", maintain_order=True).agg(
                pl.col("next_offset").max(), pl.col("landed_at").max()).select(frame.columns)
        out.frames[table] = frame
    return out


def split(stats: LandStats, preps: list[Prepared]) -> list[LandStats]:
    """The stats of a merged write as one per batch (in order), from each batch's own frames; when part of the
    merged batch turned out landed before, the whole goes to the first batch and the others report nothing."""
    if len(preps) == 1:
        return [stats]
    if stats.skipped != sum(p.skipped for p in preps):
        return [stats] + [LandStats() for _ in preps[1:]]
    rows = sum(p.frames["metric_points"].height for p in preps if "metric_points" in p.frames) or 1
    out = []
    for p in preps:
        def height(table: str, p: Prepared = p) -> int:
            return p.frames[table].height if table in p.frames else 0

        out.append(LandStats(records=len(p.batch), k8s_rows=height("k8s_objects"), samples=height("metric_points"),
                             scrapes=height("scrapes"), dead=len(p.dead), skipped=p.skipped, decode_s=p.decode_s,
                             write_s=stats.write_s * (height("metric_points") or 0) / rows, next_offsets=p.nxt))
    return out


GONE = 1 << 62  # a stored offset beyond any: a partition claimed by another member is skipped whole


def write(con: duckdb.DuckDBPyConnection, prep: Prepared, topic_ids: dict[str, str] | None = None,
          claims: dict[TopicPartition, str] | None = None) -> LandStats:
    """Land a prepared batch in one transaction; what turns out landed meanwhile is skipped (re-prepared).

    ``claims``: a group member's claim per partition it owns (see ``claim``); records of a partition another
    member claimed since are not landed (their new owner lands them). None: no check (files, bounded drains)."""
    stats = LandStats(records=len(prep.batch), skipped=prep.skipped, decode_s=prep.decode_s)
    if not prep.nxt:
        return stats
    frames, low = prep.frames, prep.low

    def body() -> tuple[bool, dict[TopicPartition, int] | None]:
        now_stored = stored_offsets(con, topic_ids)
        lost = {} if claims is None else {
            tp: GONE for tp, c in claims_held(con, list(prep.nxt)).items() if c != claims.get(tp)}
        if lost:
            log.warning("partition(s) %s were claimed by another member: their records are left to it",
                        ", ".join(f"{t}[{p}]" for t, p in sorted(lost)))
            return False, {**now_stored, **lost}
        if any(now_stored.get(tp, 0) > first for tp, first in low.items()):
            return False, now_stored  # landed before (or meanwhile): start over, skipping that part
        for table, frame in frames.items():
            if frame.height:
                con.register("_frame", frame.to_arrow())
                try:
                    con.execute(_INSERT[table])
                finally:
                    con.unregister("_frame")
        return True, None

    t0 = time.perf_counter()
    # The whole (short) transaction under the commit lock: its catalog lock is held from the first write.
    landed_before = lake.transaction(con, body)
    stats.write_s += time.perf_counter() - t0
    if landed_before is not None:
        log.info("part of a batch was landed before; landing the rest")
        again = write(con, prepare(prep.batch, topic_ids, landed_before), topic_ids, claims)
        again.decode_s += stats.decode_s
        again.write_s += stats.write_s
        return again
    telemetry.batch_landed(prep.fresh, prep.dead, stats.decode_s + stats.write_s)
    for (topic, part, off, _), why in prep.dead[:5]:
        log.warning("dead letter %s[%d]@%d: %s", topic, part, off, why)
    stats.k8s_rows = frames["k8s_objects"].height if "k8s_objects" in frames else 0
    stats.samples = frames["metric_points"].height if "metric_points" in frames else 0
    stats.scrapes = frames["scrapes"].height if "scrapes" in frames else 0
    stats.dead = len(prep.dead)
    stats.next_offsets = prep.nxt
    return stats
