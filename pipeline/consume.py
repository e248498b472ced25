"""The consume loop: Kafka -> micro-batches -> ``land`` -> commit.

The lake is the source of truth for progress: on every assignment a partition is sought to
the next offset stored in ``raw.kafka_offsets`` (from the beginning if none), and Kafka's
committed offsets, written after each lake commit, are only advisory (for lag monitoring).
On revocation, records buffered for the lost partitions are dropped un-landed; their new
owner reads them again from the stored offsets. A group member claims its partitions on every assignment
(``pipeline.land.claim``): a batch it still had in hand after the group gave up on it is not landed beside
the new owner's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
from kafka import ConsumerRebalanceListener, KafkaAdminClient, TopicPartition
from kafka.structs import OffsetAndMetadata

from gangscope import telemetry
from gangscope.config import Settings
from gangscope.transport import kafka as pkafka
from pipeline import lake
from pipeline.land import LandStats, Prepared, Record, claim, merge, prepare, split, stored_offsets, write

log = logging.getLogger(__name__)

POLL_RECORDS = 500  # records per poll; batches fill over several polls, so the byte bound holds
NO_ASSIGNMENT_GIVE_UP_S = 60.0  # --once: exit if the group never assigns us a partition
STALL_S = 20.0  # no record polled this long while an owned partition is behind the broker: re-seek it
MERGE_BATCHES = 4  # at most this many decoded batches land in one transaction
DECODERS = 2  # decoding is the slowest stage; a second decoder uses the CPU the fetch and the writer leave
_NULL_ID = "00000000-0000-0000-0000-000000000000"


@dataclass
class ConsumeStats(LandStats):
    batches: int = 0
    elapsed_s: float = 0.0  # the whole run, group join and idle wait included
    active_s: float = 0.0  # from the first partition assignment to the last batch landed


def topic_ids(settings: Settings, bootstrap: str, topics: list[str]) -> dict[str, str]:
    """Kafka topic id per topic (empty if the broker does not tell): tells incarnations apart."""
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **dict(settings.kafka.security))
        try:
            described = admin.describe_topics(topics)
        finally:
            admin.close()
    except Exception as e:  # older brokers: offsets then match whatever id they were stored with
        log.debug("no topic ids: %s", e)
        return {}
    out = {}
    for t in described:
        tid = str(t.get("topic_id") or "")
        if tid and tid != _NULL_ID:
            out[t["name"]] = tid
    return out


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, loop: _Loop) -> None:
        self.loop = loop

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.loop.revoke(revoked)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.loop.revoke(lost)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.loop.assign(assigned)


def _beat() -> None:
    """The pipeline's heartbeat while it waits out a lake outage (it is doing what it should)."""
    telemetry.heartbeat("pipeline")


def _stored(loop: _Loop) -> dict[tuple[str, int], int]:
    """The lake's stored offsets, read on the consuming thread's connection; waits out a lake outage."""
    return lake.outlast(lambda: stored_offsets(loop.reader, loop.ids), "reading the stored offsets", beat=_beat,
                        reopen=loop.reopen)


class _Lander:
    """Lands batches on threads of its own so the next batch is polled and buffered meanwhile.

    Decoder threads turn batches N+1 and N+2 into frames while the writer thread commits batch N, in
    submission order (Polars and DuckDB release the GIL), and all overlap kafka-python's fetching. One
    batch waits to be decoded, which bounds memory to about seven batches (buffer, queued, two decoding
    or decoded, one more decoded, writing); the writer lands what is decoded in order in one transaction, so
    that bound is unchanged. bench/ingest.py, 24000 scrapes, alternating runs in one
    session: one decoder ratio 0.51 / 0.57, two 0.62 (and 0.54 / 0.57 just before). Decoding in the
    writer thread was slower still, and so were decoder processes (docs/lake.md).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, ids: dict[str, str], decoders: int = DECODERS,
                 claims: dict[tuple[str, int], str] | None = None,
                 reopen: Callable[[], None] | None = None) -> None:
        self.con, self.ids = con, ids  # ``reopen`` replaces ``con`` (lake.outlast)
        self.reopen = reopen
        self.claims = claims  # the loop's claim per owned partition (it updates it), None: no claims
        self.jobs: queue.Queue[tuple[int, list[Record]] | None] = queue.Queue(maxsize=1)
        self.cond = threading.Condition()
        self.decoded: dict[int, Prepared] = {}  # by sequence number, until the writer takes it in order
        self.submitted = 0
        self.written = 0  # sequence number of the next batch the writer takes
        # Decoders hold back against this: the batch after the first one the writer holds (so batches merged into
        # one transaction count against the bound, and it stays what it was with one batch per transaction).
        self.bound = 0
        self.decoders = decoders
        self.closing = False
        self.done: queue.Queue[LandStats] = queue.Queue()
        self.error: BaseException | None = None
        self.pending = 0  # batches handed over and not yet reported back
        self.landed_at: float | None = None  # time.monotonic() when the writer last committed
        self.threads = [threading.Thread(target=self._decode, name=f"gangscope-decoder-{i}", daemon=True)
                        for i in range(decoders)]
        self.threads.append(threading.Thread(target=self._write, name="gangscope-lander", daemon=True))
        for t in self.threads:
            t.start()

    def _decode(self) -> None:
        while (job := self.jobs.get()) is not None:
            seq, batch = job
            prep = Prepared(batch, {})  # after a failure: nothing to land, but still reported back
            try:
                if self.error is None:
                    prep = prepare(batch, self.ids)
            except BaseException as e:  # reported on the consuming thread
                self.error = e
            with self.cond:
                # A writer that falls behind holds the decoders back: at most one decoded batch per decoder
                # (plus the one it writes next) waits, so memory stays bounded whatever the backlog.
                while seq > self.bound + self.decoders:
                    self.cond.wait()
                self.decoded[seq] = prep
                self.cond.notify_all()

    def _write(self) -> None:
        """Batches land in the order they were submitted: a partition's stored offset only moves forward,
        so a later batch landed first would make the earlier one look landed already."""
        while True:
            with self.cond:
                seq = self.written
                while seq not in self.decoded and not (self.closing and seq == self.submitted):
                    self.cond.wait()
                if seq not in self.decoded:
                    return
                # Every batch decoded in order so far lands in one transaction (land.merge): a writer
                # that fell behind catches up with fewer commits, and holds no more than it already did.
                preps = []
                self.bound = seq + 1
                while seq in self.decoded and len(preps) < MERGE_BATCHES:
                    preps.append(self.decoded.pop(seq))
                    seq += 1
                self.written = seq
                self.cond.notify_all()
            results = [LandStats() for _ in preps]  # one per batch handed over, landed or not
            try:
                if self.error is None:
                    merged = merge(preps)
                    # An object store or catalog away: the batch waits (the decoders and then the consuming thread
                    # with it, Kafka keeping the records) and lands once the lake is back; /healthz says degraded.
                    stats = lake.outlast(lambda m=merged: write(self.con, m, self.ids, self.claims), "landing",
                                         beat=_beat, reopen=self.reopen)
                    results = split(stats, preps)
                    self.landed_at = time.monotonic()
            except BaseException as e:  # reported on the consuming thread
                self.error = e
            with self.cond:
                self.bound = self.written
                self.cond.notify_all()
            for st in results:
                self.done.put(st)

    def submit(self, batch: list[Record]) -> None:
        self.check()
        self.pending += 1
        with self.cond:
            seq = self.submitted
            self.submitted += 1
        self.jobs.put((seq, batch))

    def results(self, wait: bool = False) -> list[LandStats]:
        """Stats of batches landed since the last call; with ``wait``, wait for all pending."""
        out = []
        while self.pending:
            try:
                out.append(self.done.get(block=wait, timeout=None))
            except queue.Empty:
                break
            self.pending -= 1
        self.check()
        return out

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        for _ in self.threads[:-1]:
            self.jobs.put(None)
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        for t in self.threads:
            t.join()


class _Loop:
    def __init__(self, settings: Settings, bootstrap: str, claiming: bool = True) -> None:
        """``claiming``: a group member (claims what it is assigned); a bounded drain takes partitions without."""
        self.settings = settings
        self.topics = list(pkafka.topics(settings).values())
        pkafka.ensure_topics(settings, bootstrap)
        self.ids = topic_ids(settings, bootstrap, self.topics)
        self.con, self.reader = self._open()
        self.bootstrap = bootstrap
        try:
            self.consumer = self._new_consumer()
        except BaseException:
            self.con.close()
            raise
        self.join: Callable[[], None] | None = None  # how the consumer takes its partitions (``run`` sets it)
        self.sought: list[TopicPartition] = []  # what the last stall check re-sought
        self.claims: dict[tuple[str, int], str] | None = {} if claiming else None
        self.lander = _Lander(self.con, self.ids, claims=self.claims, reopen=self.reopen)
        self.buffer: list[Record] = []
        self.buffer_bytes = 0
        self.born = 0.0  # time.monotonic() when the buffer's oldest record was produced (Kafka timestamp) or polled
        self.handed_at = float("-inf")  # time.monotonic() when the last batch was handed to the lander
        self.draining = False  # a bounded run (--once, until): no later record is worth waiting for
        self.to_commit: dict[tuple[str, int], int] = {}
        self.assigned_at: float | None = None
        self.first_assigned_at: float | None = None
        self.stats = ConsumeStats()

    def _open(self) -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection]:
        """The writer's connection to the lake and, on the same DuckDB instance, the consuming thread's."""
        con = lake.connect(self.settings)
        # Rows carry their own time and Kafka offset; letting DuckDB write them out of order is faster.
        con.execute("SET preserve_insertion_order = false")
        # One DuckDB thread for the writer: a 400k-sample insert costs ~30% less CPU than with a thread per
        # core, and the other core decodes and fetches from Kafka (bench/ingest.py, same session: 1 thread
        # landed 850k/799k samples/s vs 797k/777k with 2 on a quiet machine; 430-670k vs 260-430k busy).
        con.execute("SET threads = 1")
        reader = con.cursor()  # this thread's own connection to the same lake
        reader.execute(f"USE {lake.ALIAS}")
        return con, reader

    def reopen(self) -> None:
        """A new DuckDB instance for both threads after an internal error invalidated the old one (lake.is_broken).

        Safe without a lock: the consuming thread reads the lake only while the writer is idle (an assignment
        waits for the batches in hand, the stall check and ``reached`` run with none pending)."""
        old = self.con, self.reader
        self.con, self.reader = self._open()
        self.lander.con = self.con
        lake.abandon(*old)  # not closed: that can abort the process (lake._ABANDONED)

    def _new_consumer(self) -> Any:
        return pkafka.consumer(self.settings, self.bootstrap,
                               max_poll_records=max(1, min(self.settings.pipeline.batch_records, POLL_RECORDS)))

    def assign(self, assigned: set[TopicPartition]) -> None:
        self.collect(wait=True)
        if self.claims is None:
            stored = _stored(self)
        else:
            parts = sorted((tp.topic, tp.partition) for tp in assigned)
            owner = f"{socket.gethostname()}:{os.getpid()}"
            claim_id, stored = lake.outlast(lambda: claim(self.reader, parts, self.ids, owner),
                                            "claiming the assigned partitions", beat=_beat, reopen=self.reopen)
            self.claims.update(dict.fromkeys(parts, claim_id))
        for tp in sorted(assigned):
            nxt = stored.get((tp.topic, tp.partition))
            if not nxt:  # none stored (a claim stores 0): Kafka may have deleted offset 0 by now
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, nxt)
        log.info("assigned %d partition(s): %s", len(assigned),
                 ", ".join(f"{tp.topic}[{tp.partition}]@{stored.get((tp.topic, tp.partition), 0)}"
                           for tp in sorted(assigned)))
        self.assigned_at = time.monotonic()
        if self.first_assigned_at is None:
            self.first_assigned_at = self.assigned_at

    def revoke(self, revoked: set[TopicPartition]) -> None:
        # Batches already handed to the lander were read while we owned these partitions: let them
        # land before giving the partitions up; what is only buffered is dropped.
        self.collect(wait=True)
        lost = {(tp.topic, tp.partition) for tp in revoked}
        if self.claims is not None:
            for tp in lost:
                self.claims.pop(tp, None)
        keep = [r for r in self.buffer if (r[0], r[1]) not in lost]
        if len(keep) != len(self.buffer):
            log.info("dropping %d buffered record(s) of %d revoked partition(s); their new owner re-reads them",
                     len(self.buffer) - len(keep), len(lost))
        self.buffer = keep
        self.buffer_bytes = sum(len(r[3] or b"") for r in keep)

    def poll(self, timeout_ms: int) -> int:
        n = 0
        for recs in self.consumer.poll(timeout_ms=timeout_ms).values():
            telemetry.records_polled(recs)
            now, wall_ms = time.monotonic(), time.time() * 1000
            for r in recs:
                # A record's age from its Kafka timestamp (none, or one ahead of our clock: polled now).
                born = now - max(0.0, wall_ms - r.timestamp) / 1000 if (r.timestamp or 0) > 0 else now
                self.born = born if not self.buffer else min(self.born, born)
                self.buffer.append((r.topic, r.partition, r.offset, r.value))
                self.buffer_bytes += len(r.value or b"")
            n += len(recs)
        return n

    def late(self, now: float) -> bool:
        """The buffer holds a record produced ``flush_seconds`` ago or more, or this is a bounded drain."""
        return self.draining or now - self.born >= self.settings.pipeline.flush_seconds

    def poll_ms(self) -> int:
        """How long the next poll may wait: briefly while a late batch is buffered, so it is handed over as soon
        as the lander is free (a 200 ms poll left the lander idle that long at the end of a backlog); while
        fresh records wait for their flush, no longer than that."""
        if not self.buffer:
            return 200
        now = time.monotonic()
        if self.late(now):
            return 20
        return int(min(200.0, max(20.0, (self.handed_at + self.settings.pipeline.flush_seconds - now) * 1000)))

    def due(self, got: int) -> bool:
        """Whether to hand the buffer to the lander now, after a poll that returned ``got`` records.

        Fresh records wait until the batch is full or ``flush_seconds`` have passed since the last hand-over, so a
        steady trickle lands once per interval (landing at every poll that came back empty wrote one small
        object per table per poll: docs/scaling.md section 7), and a
        record after an idle gap lands at once. A late batch (its oldest record produced ``flush_seconds``
        ago or more: a backlog, or the pipeline was away) or a bounded drain does not wait: it lands a quarter
        full while the lander has nothing to do (so a backlog starts landing at once and batches grow only
        while the lander is busy), and at once when a poll brings nothing new and the decoder is free (the
        tail of a backlog; waiting until the writer was idle too left it idle ~0.15 s).
        """
        if not self.buffer:
            return False
        p = self.settings.pipeline
        now = time.monotonic()
        full = len(self.buffer) >= p.batch_records or self.buffer_bytes >= p.batch_bytes
        if full or now - self.handed_at >= p.flush_seconds:
            return True
        if not self.late(now):
            return False
        quarter = len(self.buffer) >= p.batch_records // 4 or self.buffer_bytes >= p.batch_bytes // 4
        return (quarter and not self.lander.pending) or (not got and self.lander.jobs.empty())

    def flush(self, wait: bool = False) -> None:
        """Hand the buffer to the lander (blocks while another batch waits); ``wait``: until all landed."""
        if self.buffer:
            batch = [(t, p, o, v or b"") for t, p, o, v in self.buffer]
            self.buffer, self.buffer_bytes = [], 0
            self.lander.submit(batch)
            self.handed_at = time.monotonic()  # after a submit that waited: the next batch gets its full interval
        self.collect(wait)

    def collect(self, wait: bool = False) -> None:
        """Account for landed batches; their offsets are committed by ``commit`` (not from callbacks)."""
        for st in self.lander.results(wait):
            self.stats.add(st)
            self.stats.batches += 1
            self.to_commit.update(st.next_offsets)
            if self.first_assigned_at is not None and self.lander.landed_at is not None:
                # The writer's clock: the main thread may collect a batch up to a poll's timeout after it landed.
                self.stats.active_s = self.lander.landed_at - self.first_assigned_at

    def commit(self) -> None:
        """Commit landed offsets to Kafka: advisory only (lag monitoring); the lake holds the truth."""
        if self.to_commit:
            offsets, self.to_commit = self.to_commit, {}
            with contextlib.suppress(Exception):  # e.g. a rebalance in progress: the next commit catches up
                self.consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                                      for (t, p), o in offsets.items()})

    def unstick(self) -> list[TopicPartition]:
        """Re-seek owned partitions that the broker says are behind (end offset past the lake's) to the lake's
        offsets; what was re-sought. Called after ``STALL_S`` without a record.

        kafka-python 3.0 can stop returning a partition's records while its lag grows (dpkp/kafka-python
        #3106, #3131: a position left awaiting validation or revocation); once, on Apache Kafka under load, a
        pipeline landed one batch and then nothing for 3 minutes. A seek resets the partition's fetch state,
        and the lake's offsets are the truth, so nothing is skipped or landed twice.
        """
        owned = sorted(self.consumer.assignment())
        if not owned or self.buffer or self.lander.pending:
            return []
        try:
            ends = self.consumer.end_offsets(owned)
            stored = lake.retry(lambda: stored_offsets(self.reader, self.ids))
        except Exception as e:  # a broker away: the poll loop reports that; try again next time
            log.debug("stall check skipped: %s", e)
            return []
        behind = [tp for tp in owned if stored.get((tp.topic, tp.partition), 0) < (ends.get(tp) or 0)]
        if behind and behind == self.sought and self.join is not None:
            # The last seek did not help (seen on Apache Kafka under load: the same two partitions re-sought every
            # 20 s for minutes): a new consumer, joined as the first was, starts from the lake's offsets.
            log.warning("no record for %.0fs after re-seeking %s: replacing the Kafka consumer", STALL_S,
                        ", ".join(f"{tp.topic}[{tp.partition}]" for tp in behind))
            with contextlib.suppress(Exception):
                self.consumer.close()
            self.consumer = self._new_consumer()
            self.join()
            self.sought = []
            return behind
        self.sought = behind
        for tp in behind:
            self.consumer.seek(tp, stored.get((tp.topic, tp.partition), 0))
        if behind:
            log.warning("no record for %.0fs although %d owned partition(s) are behind; re-seeking them to the "
                        "lake's offsets: %s", STALL_S, len(behind),
                        ", ".join(f"{tp.topic}[{tp.partition}]@{stored.get((tp.topic, tp.partition), 0)}"
                                  f"<{ends.get(tp)}" for tp in behind))
        return behind

    def reached(self, until: dict[tuple[str, int], int]) -> bool:
        stored = _stored(self)
        return all(stored.get(tp, 0) >= off for tp, off in until.items())

    def close(self) -> None:
        self.lander.close()
        with contextlib.suppress(Exception):
            self.consumer.close()
        self.reader.close()
        self.con.close()


def _partitions(loop: _Loop, extra: set[tuple[str, int]], timeout_s: float = 30.0) -> set[TopicPartition]:
    """Every partition of the loop's topics (plus ``extra``), once the broker's metadata lists them."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = {(t, p) for t in loop.topics for p in (loop.consumer.partitions_for_topic(t) or ())}
        if {t for t, _ in found} >= set(loop.topics) or time.monotonic() > deadline:
            return {TopicPartition(t, p) for t, p in found | extra}
        time.sleep(0.1)


def _joiner(loop: _Loop, until: dict[tuple[str, int], int] | None) -> Callable[[], None]:
    """How the loop's consumer takes its partitions, now and whenever ``unstick`` replaces it."""
    if until is not None:
        # A bounded drain takes its partitions directly instead of joining the group: a group join
        # right after another member left waits for that member's session to expire (the embedded
        # broker keeps leavers until then) and a rebalance can stall it. Landing stays exactly once
        # without the group: every transaction skips what the lake already stores.
        parts = _partitions(loop, set(until))

        def assign() -> None:
            loop.consumer.assign(sorted(parts))
            loop.assign(parts)

        return assign

    def subscribe() -> None:
        # Join only once the metadata lists every topic: a leader that assigns before it knows a topic gives
        # nobody its partitions, and kafka-python 3.0 did not always rejoin when the metadata came (on Apache
        # Kafka under load, a member stayed without partitions for over a minute; a replacement consumer, new
        # and without metadata, was assigned nothing).
        _partitions(loop, set())
        loop.consumer.subscribe(loop.topics, listener=_Rebalance(loop))

    return subscribe


def end_offsets(settings: Settings, bootstrap: str, parts: set[TopicPartition],
                timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
    """The next offset of every partition now, from a fetch's high watermark.

    ListOffsets alone is not trusted: the embedded Tansu broker answers the base offset of the last
    batch plus one (350 records acked, 7 listed). A group-less consumer seeks one before the listed
    end and reads the high watermark its fetch reports, which both brokers get right.
    """
    probe = pkafka.consumer(settings, bootstrap, group_id=None, max_partition_fetch_bytes=1 << 20)
    try:
        probe.assign(sorted(parts))
        listed = probe.end_offsets(sorted(parts))
        for tp in parts:
            probe.seek(tp, max(listed[tp] - 1, 0))
        deadline = time.monotonic() + timeout_s
        while any(probe.highwater(tp) is None for tp in parts) and time.monotonic() < deadline:
            probe.poll(timeout_ms=200)
        return {(tp.topic, tp.partition): max(probe.highwater(tp) or 0, listed[tp]) for tp in parts}
    finally:
        probe.close()


def run(settings: Settings, bootstrap: str, *, once: bool = False,
        until: dict[tuple[str, int], int] | None = None, stop: threading.Event | None = None) -> ConsumeStats:
    """Consume both topics and land them until ``stop`` is set (or drained/reached, see below).

    ``once``: a drain that holds for the whole group. The end offsets of every partition are taken
    at start; the run stops once the lake stores every partition up to them (whichever member landed
    it) and nothing new arrived for ``pipeline.idle_seconds``. A member never stops while a partition
    it does not own is still behind, so a rebalance cannot leave records unlanded behind two exits.
    ``until``: stop once every listed (topic, partition) has its stored next offset at or beyond the
    given offset. The batch in hand is always landed before returning.
    """
    stop = stop or threading.Event()
    started = time.monotonic()
    loop = _Loop(settings, bootstrap, claiming=until is None)
    loop.draining = once or until is not None
    try:
        goal: dict[tuple[str, int], int] = {}
        if once:
            goal = end_offsets(settings, bootstrap, _partitions(loop, set()))
            for tp, off in (until or {}).items():
                goal[tp] = max(goal.get(tp, 0), off)
        loop.join = _joiner(loop, until)
        loop.join()
    except BaseException:
        loop.close()
        raise
    last_new = last_unstick = time.monotonic()
    last_log = time.monotonic()
    logged = 0
    try:
        while not stop.is_set():
            got = loop.poll(loop.poll_ms())
            now = time.monotonic()
            if got:
                last_new = now
            elif now - max(last_new, last_unstick, loop.assigned_at or started) >= STALL_S:
                last_unstick = now
                loop.unstick()
            if loop.due(got):
                loop.flush()
            else:
                loop.collect()
            loop.commit()
            telemetry.pipeline_tick(loop.consumer)  # /healthz heartbeat, consumer lag
            if now - last_log >= 10.0 and loop.stats.records != logged:
                rate = (loop.stats.records - logged) / (now - last_log)
                log.info("landed %d record(s) so far (%d samples, %d k8s rows, %d dead letters); %.0f records/s",
                         loop.stats.records, loop.stats.samples, loop.stats.k8s_rows, loop.stats.dead, rate)
                last_log, logged = now, loop.stats.records
            if until is not None and not loop.buffer and not loop.lander.pending and loop.reached(until):
                break
            if once and not got:
                idle_since = max(last_new, loop.assigned_at or started)
                if now - idle_since >= settings.pipeline.idle_seconds:
                    loop.flush(wait=True)
                    if loop.reached(goal):
                        break
                    if loop.assigned_at is None and now - started > NO_ASSIGNMENT_GIVE_UP_S:
                        log.warning("no partitions assigned within %.0fs and the group is behind; giving up",
                                    NO_ASSIGNMENT_GIVE_UP_S)
                        break
        loop.flush(wait=True)
        loop.commit()
    finally:
        loop.close()
        telemetry.forget("pipeline")  # stopped on purpose: not unhealthy
    loop.stats.elapsed_s = time.monotonic() - started
    return loop.stats
