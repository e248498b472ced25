"""The one publisher every collector hands records to.

Collectors must keep watching and scraping while Kafka is away, so ``publish`` never
blocks on the network and never raises because the broker is unreachable: records wait
in a bounded in-memory buffer and a sender thread delivers them in order. When the bound
is hit the oldest records are dropped and the drop is logged with a count.

Delivery is at-least-once (a send whose acknowledgement was lost is sent again); the
pipeline's stored offsets make landing exactly-once for whatever reaches Kafka. Per-key
order holds: records leave the buffer in publish order, one window at a time, and a
failed window goes back to the front of the buffer before anything newer is sent.

A caller that must know when its records are safe (the remote-write receiver answers
Prometheus only then) publishes them with a ``Ticket`` and waits on it: it is done when
Kafka acknowledged every one of them, failed when one was dropped; ``withdraw`` takes the
ticket's records that were not sent yet back out of the buffer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kafka.errors import MessageSizeTooLargeError

from gangscope import telemetry
from gangscope.config import Settings
from gangscope.records import K8S, SCRAPE, VERSION, K8sEvent, ScrapeBatch
from gangscope.transport import kafka as pkafka

log = logging.getLogger(__name__)

WINDOW_RECORDS = 2000  # records handed to the producer before waiting for their acks
RETRY_MAX_S = 5.0


class Ticket:
    """Acknowledgement of a group of published records: ``wait`` until Kafka acknowledged them all."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._left = 0
        self.failed: str | None = None

    def _add(self) -> None:
        with self._cond:
            self._left += 1

    def _acked(self) -> None:
        with self._cond:
            self._left -= 1
            if self._left <= 0:
                self._cond.notify_all()

    def _fail(self, reason: str) -> None:
        with self._cond:
            self.failed = self.failed or reason
            self._cond.notify_all()

    def wait(self, timeout_s: float) -> bool:
        """True once every record is acknowledged; False when one was dropped or on timeout."""
        with self._cond:
            self._cond.wait_for(lambda: self._left <= 0 or self.failed is not None, timeout_s)
            return self._left <= 0 and self.failed is None


@dataclass(slots=True)
class _Pending:
    topic: str
    key: bytes
    value: bytes
    ticket: Ticket | None = None
    kind: str = SCRAPE
    cluster: str = ""
    stub: bool = False  # value is already an oversize stub


def oversize_stub(kind: str, cluster: str, key: bytes, size: int, limit: int, why: str) -> bytes:
    """What travels instead of a record over the size limit (``why`` names it): its envelope and the reason,
    so it lands in ``raw.dead_letters`` (the object or samples themselves cannot travel)."""
    what = key.decode(errors="replace")[:300]
    return json.dumps({"v": VERSION, "kind": kind, "cluster": cluster,
                       "rejected": f"record {what!r} of {size} bytes exceeds {why} ({limit})"},
                      separators=(",", ":")).encode()


class Publisher:
    """Buffered, ordered, never-raising publisher of ``K8sEvent``/``ScrapeBatch`` records.

    ``acked_offsets()`` tells, per (topic, partition), the offset after the last record this
    publisher got acknowledged, so a caller can wait until exactly that has landed.
    """

    def __init__(self, settings: Settings, bootstrap: str, max_buffered: int | None = None,
                 **producer_overrides: Any) -> None:
        self._settings = settings
        self._bootstrap = bootstrap
        self._max = max(1, max_buffered if max_buffered is not None else settings.k8s.buffer_max_records)
        self._window = max(1, min(WINDOW_RECORDS, self._max // 2 or 1))
        self._topics = pkafka.topics(settings)
        # Per topic: (largest record, what sets it); the broker's max.message.bytes once connected.
        self._limits: dict[str, tuple[int, str]] = {}
        self._overrides = {"delivery_timeout_ms": 10_000, "request_timeout_ms": 5_000, "max_block_ms": 5_000,
                           "reconnect_backoff_max_ms": 1_000, **producer_overrides}
        self._buf: deque[_Pending] = deque()
        self._inflight = 0
        self._cond = threading.Condition()
        self._closing = False
        self._acked: dict[tuple[str, int], int] = {}
        self.published = 0
        self.dropped = 0
        self._dropped_logged = 0
        self._last_drop_log = -1e9
        self.drop_log_interval_s = 5.0  # at most one drop warning per interval (the first at once)
        self._producer: Any = None
        self._thread = threading.Thread(target=self._run, name="gangscope-publisher", daemon=True)
        self._thread.start()
        telemetry.track_publisher(self)

    # -- API ---------------------------------------------------------------------------
    @property
    def buffered(self) -> int:
        """Records accepted but not yet acknowledged by Kafka."""
        with self._cond:
            return len(self._buf) + self._inflight

    def publish(self, record: K8sEvent | ScrapeBatch, ticket: Ticket | None = None) -> None:
        """Queue one record (counted on ``ticket``); raises only for a record that cannot be encoded (a caller
        bug) or a closed publisher."""
        if isinstance(record, K8sEvent):
            kind = K8S
        elif isinstance(record, ScrapeBatch):
            kind = SCRAPE
        else:
            raise TypeError(f"cannot publish {type(record).__name__}")
        topic = self._topics[kind]
        item = _Pending(topic, record.key(), record.to_bytes(), ticket, kind, record.cluster)
        if self._fits(item) and record.rejected:
            telemetry.REJECTED_AT_EDGE.labels(topic).inc()
        with self._cond:
            if self._closing:
                raise RuntimeError("publisher is closed")
            if ticket is not None:
                ticket._add()
            self._buf.append(item)
            self._enforce_bound()
            self._cond.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything published so far is acknowledged; False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._buf or self._inflight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.5 if left is None else min(0.5, left))
            return True

    def close(self, timeout_s: float | None = 30.0) -> None:
        """Flush (up to ``timeout_s``), stop the sender; records left undelivered are logged."""
        if self._closing:
            return
        self.flush(timeout_s)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(max(timeout_s or 0.0, 15.0))
        with self._cond:
            left = len(self._buf) + self._inflight
        if left:
            log.error("publisher closed with %d record(s) not delivered to Kafka", left)
        self._log_drops(force=True)

    def withdraw(self, ticket: Ticket) -> int:
        """Remove the ticket's records not sent yet (its caller gave up on them); returns how many."""
        with self._cond:
            keep = deque(p for p in self._buf if p.ticket is not ticket)
            removed = len(self._buf) - len(keep)
            self._buf = keep
            return removed

    def acked_offsets(self) -> dict[tuple[str, int], int]:
        with self._cond:
            return dict(self._acked)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------
    def _fits(self, item: _Pending) -> bool:
        """Whether ``item`` is within its topic's size limit; if not it becomes a stub (and is counted), so it is
        refused here with its reason rather than retried against the broker's limit. Checked when published
        and again when sent (the broker's limit is known once connected)."""
        limit, why = self._limits.get(item.topic, (self._settings.kafka.max_record_bytes, "kafka.max_record_bytes"))
        if item.stub or len(item.value) <= limit:
            return True
        item.value = oversize_stub(item.kind, item.cluster, item.key, len(item.value), limit, why)
        item.stub = True
        telemetry.REJECTED_AT_EDGE.labels(item.topic).inc()
        return False

    def _enforce_bound(self) -> None:
        """Drop the oldest queued records beyond the bound (caller holds the lock)."""
        over = len(self._buf) + self._inflight - self._max
        while over > 0 and self._buf:
            gone = self._buf.popleft()
            if gone.ticket is not None:
                gone.ticket._fail("dropped: publish buffer full")
            telemetry.PUBLISHER_DROPPED.labels(gone.topic).inc()
            self.dropped += 1
            over -= 1
        if self.dropped != self._dropped_logged:
            self._log_drops()

    def _log_drops(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.dropped == self._dropped_logged or (not force and now - self._last_drop_log < self.drop_log_interval_s):
            return
        log.warning("publish buffer full (%d records): dropped %d oldest record(s), %d in total",
                    self._max, self.dropped - self._dropped_logged, self.dropped)
        self._dropped_logged = self.dropped
        self._last_drop_log = now

    def _connect(self) -> Any:
        # A cheap TCP probe first: kafka-python's bootstrap backs off for up to 30 s per attempt,
        # which would delay recovery long after the broker is back.
        for server in self._bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            try:
                socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=1.0).close()
                break
            except (OSError, ValueError):
                continue
        else:
            raise ConnectionError(f"no broker of {self._bootstrap} accepts connections")
        own = self._settings.kafka.max_record_bytes
        limits = pkafka.ensure_topics(self._settings, self._bootstrap)
        self._limits = {t: (v, "kafka.max_record_bytes" if v >= own else f"the broker's max.message.bytes of {t}")
                        for t, v in limits.items()}
        # A batch of several records must fit the broker's limit too (kafka-python does not split a refused one).
        batch = min([1 << 20, *(v for v in limits.values())])
        return pkafka.producer(self._settings, self._bootstrap, **{"batch_size": batch, **self._overrides})

    def _drop_producer(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=1)
            self._producer = None

    def _run(self) -> None:
        backoff = 0.1
        while True:
            with self._cond:
                while not self._buf and not self._closing:
                    self._cond.wait(1.0)
                    self._log_drops()
                if not self._buf:
                    break
                window = [self._buf.popleft() for _ in range(min(self._window, len(self._buf)))]
                self._inflight = len(window)
            failed = self._send(window)
            with self._cond:
                self._inflight = 0
                if failed:
                    # Back to the front, in order, ahead of anything published meanwhile.
                    self._buf.extendleft(reversed(failed))
                    self._enforce_bound()
                self._cond.notify_all()
                closing = self._closing
            telemetry.problem("kafka", f"broker {self._bootstrap} unreachable: {self.buffered} record(s) buffered"
                              if failed else None)
            if failed:
                if closing:
                    break
                log.warning("kafka at %s unavailable; %d record(s) buffered, retrying in %.1fs",
                            self._bootstrap, self.buffered, backoff)
                self._drop_producer()
                # The whole backoff: publish() notifies on every record, and waking on those retried a
                # down broker at the rate records arrived.
                deadline = time.monotonic() + backoff
                with self._cond:
                    while not self._closing and (left := deadline - time.monotonic()) > 0:
                        self._cond.wait(left)
                backoff = min(RETRY_MAX_S, backoff * 2)
            else:
                backoff = 0.1
        self._drop_producer()

    def _send(self, window: list[_Pending]) -> list[_Pending]:
        """Send one window and wait for its acks; return the records not acknowledged."""
        try:
            if self._producer is None:
                self._producer = self._connect()
            futures = []
            for i, item in enumerate(window):
                self._fits(item)
                try:
                    futures.append(self._producer.send(item.topic, item.value, key=item.key))
                except Exception as e:  # metadata timeout, closed producer, ...
                    log.debug("send failed: %s", e)
                    self._producer.flush()
                    return self._settle(window[:i], futures) + window[i:]
            self._producer.flush()
            return self._settle(window, futures)
        except Exception as e:
            log.debug("producer failed: %s", e)
            return list(window)

    def _settle(self, window: list[_Pending], futures: list[Any]) -> list[_Pending]:
        failed: list[_Pending] = []
        acked: dict[tuple[str, int], int] = {}
        for item, fut in zip(window, futures, strict=True):
            if fut.is_done and fut.succeeded():
                md = fut.value
                acked[(md.topic, md.partition)] = md.offset + 1
                if item.ticket is not None:
                    item.ticket._acked()
            else:
                if isinstance(fut.exception, MessageSizeTooLargeError) and not item.stub:
                    # The broker's limit is below what we knew (changed since, or not told): resend as a stub.
                    self._limits[item.topic] = (len(item.value) - 1, f"the broker's max.message.bytes of {item.topic}")
                    self._fits(item)
                failed.append(item)
        with self._cond:
            # Offsets of one partition are acknowledged in order, so the last one wins (a broker
            # that restarted empty starts again from zero).
            self._acked.update(acked)
            self.published += len(window) - len(failed)
        return failed
