"""Replay's source side: captured inputs published in timestamp order (landing is ``gangscope.app.replay``).

Watch files are checked in a first pass (nothing is published when one has a malformed
line); then all inputs are streamed, never loaded whole: each file is an iterator and a heap merge picks
the next record by time (``observedAt`` for watch events, scrape time for metric
batches). Within one file the order of the file is kept (a capture is written in
order, and an object's events must not be reordered). ``publish`` is throttled so the
publisher's bounded buffer never drops a replayed record.
"""

from __future__ import annotations

import heapq
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gangscope.config import Settings
from gangscope.errors import UserError
from gangscope.records import K8sEvent, ScrapeBatch

Record = K8sEvent | ScrapeBatch


@dataclass
class ReplayStats:
    """What a replay did: records by kind, how long, and whether it waited for landing."""

    k8s_events: int = 0
    metric_batches: int = 0
    metric_samples: int = 0
    seconds: float = 0.0
    landed: bool = False
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return self.k8s_events + self.metric_batches


def _time_ms(rec: Record) -> int:
    if isinstance(rec, K8sEvent):
        return int(rec.observed_at.timestamp() * 1000)
    return rec.scraped_at_ms


def _inputs(settings: Settings, k8s_files: list[str], metrics_files: list[str], job: str | None,
            instance: str | None) -> list[Iterator[Record]]:
    from collectors.k8s.jsonl import read_events

    its: list[Iterator[Record]] = [read_events(f, settings.cluster, settings.clock_skew_s,
                                               settings.kafka.max_record_bytes) for f in k8s_files]
    if metrics_files:
        try:
            from collectors.metrics.replayfile import read_metrics_file
        except ImportError:
            raise UserError("replaying --metrics files is not built yet (issue #4)") from None
        its += [read_metrics_file(f, settings.cluster, job=job, instance=instance, skew_s=settings.clock_skew_s)
                for f in metrics_files]
    return its


def merged(settings: Settings, k8s_files: list[str], metrics_files: list[str], job: str | None = None,
           instance: str | None = None) -> Iterator[Record]:
    """All inputs, merged by timestamp (stable: ties keep the order the files were given)."""
    return heapq.merge(*_inputs(settings, k8s_files, metrics_files, job, instance), key=_time_ms)


def stderr_progress(stats: ReplayStats, final: bool) -> None:
    rate = stats.records / stats.seconds if stats.seconds > 0 else 0.0
    end = "\n" if final or not sys.stderr.isatty() else "\r"
    print(f"replay: {stats.records} records ({stats.k8s_events} k8s events, {stats.metric_batches} metric batches, "
          f"{stats.metric_samples} samples) {rate:,.0f} records/s", end=end, file=sys.stderr, flush=True)


def check_readable(k8s_files: list[str], metrics_files: list[str]) -> None:
    """Fail before anything is published when an input is missing or unreadable."""
    if not k8s_files and not metrics_files:
        raise UserError("nothing to replay: give --k8s FILE and/or --metrics FILE")
    for f in [*k8s_files, *metrics_files]:
        try:
            open(f, "rb").close()
        except OSError as e:
            raise UserError(f"cannot read {f}: {e.strerror}") from None


def publish(settings: Settings, bootstrap: str, k8s_files: list[str], metrics_files: list[str],
            job: str | None = None, instance: str | None = None,
            progress: Callable[[ReplayStats, bool], None] | None = stderr_progress,
            interval_s: float = 2.0) -> ReplayStats:
    """Publish every record of the files in time order; ``stats.offsets`` are the acknowledged ends."""
    # Check the watch files before publishing anything: a malformed line found half-way would
    # otherwise leave half a replay in Kafka, doubled when the fixed file is replayed. (Cheap:
    # JSON only. Metric files are checked as they stream: parsing them twice would double the
    # cost of a replay.)
    for it in _inputs(settings, k8s_files, [], job, instance):
        for _ in it:
            pass
    # main's admin() names the broker and fails within 15 s when nothing answers (no second reachability check).
    from gangscope.transport.kafka import ensure_topics

    ensure_topics(settings, bootstrap)
    return publish_records(settings, bootstrap, merged(settings, k8s_files, metrics_files, job, instance),
                           progress, interval_s)


def publish_records(settings: Settings, bootstrap: str, records: Iterable[Record],
                    progress: Callable[[ReplayStats, bool], None] | None = stderr_progress,
                    interval_s: float = 2.0) -> ReplayStats:
    """Publish ``records`` (any source: files, a Prometheus backfill) without dropping one; ``stats.offsets``
    are the acknowledged ends, for landing exactly up to them."""
    from gangscope.transport.publish import Publisher

    stats = ReplayStats()
    bound = max(2, settings.k8s.buffer_max_records)
    start = time.monotonic()
    last_report = start
    publisher = Publisher(settings, bootstrap, max_buffered=bound)
    try:
        for rec in records:
            if publisher.buffered >= bound // 2:
                _drain(publisher, bound // 4, bootstrap)
            publisher.publish(rec)
            if isinstance(rec, K8sEvent):
                stats.k8s_events += 1
            else:
                stats.metric_batches += 1
                stats.metric_samples += len(rec.sample_value)
            now = time.monotonic()
            if progress and now - last_report >= interval_s:
                stats.seconds = now - start
                progress(stats, False)
                last_report = now
        if not publisher.flush(timeout_s=120.0):
            raise UserError(f"Kafka at {bootstrap} did not acknowledge the replayed records within 120 s")
        stats.offsets = publisher.acked_offsets()
    finally:
        publisher.close(timeout_s=5.0)
    stats.seconds = time.monotonic() - start
    if progress:
        progress(stats, True)
    return stats


def _drain(publisher: Any, low: int, bootstrap: str, stall_s: float = 120.0) -> None:
    """Wait until the publisher's buffer is down to ``low``; fail if Kafka stops acknowledging."""
    last, since = publisher.buffered, time.monotonic()
    while (n := publisher.buffered) > low:
        if n < last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise UserError(f"Kafka at {bootstrap} acknowledged nothing for {stall_s:.0f} s; replay stopped")
        time.sleep(0.01)
