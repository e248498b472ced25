"""Prometheus remote-write 1.0 receiver: ``POST /api/v1/write`` on the service's HTTP port.

The body is a snappy-compressed (block format, ``cramjam``) protobuf ``prometheus.WriteRequest``
(``protobuf``; the message is built from its descriptor below, the fields remote write 1.0 defines).
Samples are grouped into one ``ScrapeBatch`` per (job, instance) of the request, with every
label as sent (``job``/``instance`` become the batch's columns, as in a scrape), and published.

The answer follows the protocol's retry rules, so nothing is lost: 204 only after Kafka
acknowledged every record of the request; 400 for a body that cannot be decoded (Prometheus
drops it: retrying cannot help); 503 with ``Retry-After`` when the publisher is backed up, the
request was not decoded and acknowledged within ``ack_timeout_s`` of its arrival, its decoding worker
died, or the service is stopping (Prometheus retries). On a timeout the request's records not sent yet
are withdrawn; one already in flight may still land, so a retried request can land twice: identical
samples, which staging reads once.

Time sanity (gangscope/timesanity.py, as for scrapes): samples stamped before 2000, further than
``clock_skew_s`` in the future of the request's receipt, or in another unit than milliseconds leave
their batch and are published as a dead letter with the reason (``raw.dead_letters``, counted in
``gangscope_rejected_at_edge_total``); the request is still answered 204, so its sane samples land and
Prometheus does not resend what no retry can fix.

Staleness markers (the NaN with bits ``0x7ff0000000000002`` Prometheus writes when a series
ends) are not samples and are dropped; exemplars, metadata and native histograms are ignored.

Throughput: decoding and encoding run in worker processes (``remote_write.workers``) and the receiving
process only publishes the encoded records, so one GIL does not bound it. Each worker caches every
series it saw (labels as sent, their record text and node), as Prometheus sends the same series in
every request. A worker that dies fails only the requests it held, with 503, before any of their
records was published: Prometheus' retry lands them once.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import struct
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import cramjam
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from collectors.prom import DEFAULT_JOB
from gangscope.records import EncodedScrapeBatch, LabelSet, ScrapeBatch
from gangscope.timesanity import DEFAULT_SKEW_S, split_refused

log = logging.getLogger(__name__)

PATH = "/api/v1/write"
STALE_NAN = 0x7FF0000000000002
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")


def _classes() -> tuple[Any, Any, Any]:
    """``prometheus.WriteRequest`` and ``TimeSeries`` of remote write 1.0 (prompb/remote.proto, types.proto),
    built from their descriptor, plus ``SamplesWriteRequest``: the same message read without the labels
    declared (exemplars and histograms as bytes, ignored), so that a series' labels stay unknown fields,
    which protobuf keeps as their wire bytes: once the samples are read and cleared, serializing the series
    gives its labels' wire form, the key of the series cache, without a Python object per label (that was
    most of the decoding)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="gangscope_prompb.proto", package="prometheus", syntax="proto3")
    f = descriptor_pb2.FieldDescriptorProto
    repeated, optional = f.LABEL_REPEATED, f.LABEL_OPTIONAL

    def message(name: str, *fields: tuple[str, int, int, int, str | None]) -> None:
        m = fdp.message_type.add(name=name)
        for fname, number, label, ftype, type_name in fields:
            fd = m.field.add(name=fname, number=number, label=label, type=ftype)
            if type_name:
                fd.type_name = type_name

    message("Label", ("name", 1, optional, f.TYPE_STRING, None), ("value", 2, optional, f.TYPE_STRING, None))
    message("Sample", ("value", 1, optional, f.TYPE_DOUBLE, None), ("timestamp", 2, optional, f.TYPE_INT64, None))
    message("TimeSeries", ("labels", 1, repeated, f.TYPE_MESSAGE, ".prometheus.Label"),
            ("samples", 2, repeated, f.TYPE_MESSAGE, ".prometheus.Sample"))
    message("WriteRequest", ("timeseries", 1, repeated, f.TYPE_MESSAGE, ".prometheus.TimeSeries"))
    message("SamplesTimeSeries", ("samples", 2, repeated, f.TYPE_MESSAGE, ".prometheus.Sample"),
            ("exemplars", 3, repeated, f.TYPE_BYTES, None), ("histograms", 4, repeated, f.TYPE_BYTES, None))
    message("SamplesWriteRequest", ("timeseries", 1, repeated, f.TYPE_MESSAGE, ".prometheus.SamplesTimeSeries"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"prometheus.{n}"))  # type: ignore[return-value]
                 for n in ("WriteRequest", "TimeSeries", "SamplesWriteRequest"))


WriteRequest, TimeSeries, SamplesWriteRequest = _classes()


class BadRequest(ValueError):
    """A body that is not a snappy-compressed WriteRequest (answered 400)."""


Series = tuple[tuple[str, str], str, LabelSet]  # ((job, instance), name, the other labels)
_SERIES: dict[bytes, Series] = {}  # labels' wire bytes -> series
_LABEL_SETS: dict[tuple[tuple[str, str], ...], LabelSet] = {}  # one LabelSet per distinct label set
SERIES_CACHE_MAX = 1_000_000


def _series(key: bytes) -> Series:
    """A series by its labels' wire bytes (``key``: a ``TimeSeries`` without samples), decoded and cached on
    first sight: Prometheus sends the same series in every request. The label sets are shared between
    batches and must not be changed."""
    try:
        labels = {lb.name: lb.value for lb in TimeSeries.FromString(key).labels}
    except Exception as e:
        raise BadRequest(f"body is not a remote-write WriteRequest: {e}") from None
    name = labels.pop("__name__", "")
    if not name:
        raise BadRequest(f"a series without __name__: {labels}")
    if len(_SERIES) >= SERIES_CACHE_MAX:
        _SERIES.clear()
        _LABEL_SETS.clear()
    target = (labels.pop("job", "") or DEFAULT_JOB, labels.pop("instance", "") or DEFAULT_JOB)
    # Many series share their other labels (dcgm-exporter: all metrics of one GPU): their text is made once.
    items = tuple(labels.items())
    label_set = _LABEL_SETS.get(items)
    if label_set is None:
        label_set = _LABEL_SETS[items] = LabelSet(labels)
    hit = _SERIES[key] = (target, name, label_set)
    return hit


def decode(body: bytes, cluster: str) -> list[ScrapeBatch]:
    """The samples of one remote-write body as ScrapeBatches, one per (job, instance), in the order first seen."""
    try:
        raw = bytes(cramjam.snappy.decompress_raw(body))
    except Exception as e:
        raise BadRequest(f"body is not snappy-compressed: {e}") from None
    try:
        req = SamplesWriteRequest.FromString(raw)
    except Exception as e:
        raise BadRequest(f"body is not a remote-write WriteRequest: {e}") from None
    # Per (job, instance): series names, series labels, and the sample columns (series, ts, value).
    groups: dict[tuple[str, str], tuple[list[str], list[dict[str, str]], list[int], list[int], list[float]]] = {}
    pack, unpack, cache, series_of = _F64.pack, _U64.unpack, _SERIES, _series
    for ts in req.timeseries:
        samples = ts.samples
        if len(samples) == 1:  # as Prometheus sends them: one sample per series
            s = samples[0]
            v, t = s.value, s.timestamp
            points = None if v != v and unpack(pack(v))[0] == STALE_NAN else ((v, t),)
        elif samples:
            points = tuple((s.value, s.timestamp) for s in samples
                           if not (s.value != s.value and unpack(pack(s.value))[0] == STALE_NAN))
        else:  # exemplars or native histograms only: ignored
            continue
        if not points:  # (staleness markers only)
            continue
        ts.ClearField("samples")  # what is left is the labels' wire form: the cache key
        if ts.exemplars or ts.histograms:  # (some senders put exemplars beside the samples)
            ts.ClearField("exemplars")
            ts.ClearField("histograms")
        key = ts.SerializeToString()
        target, name, labels = cache.get(key) or series_of(key)
        g = groups.get(target)
        if g is None:
            g = groups[target] = ([], [], [], [], [])
        series = len(g[0])
        g[0].append(name)
        g[1].append(labels)
        for v, t in points:
            g[2].append(series)
            g[3].append(t)
            g[4].append(v)
    return [ScrapeBatch(cluster=cluster, target=instance, job=job, instance=instance, scraped_at_ms=min(times),
                        series_metric=names, series_labels=label_sets, sample_series=series_col,
                        sample_ts_ms=times, sample_value=values)  # type: ignore[arg-type]
            for (job, instance), (names, label_sets, series_col, times, values) in groups.items()]


def refuse_insane(batches: list[ScrapeBatch], received_ms: int, skew_s: float = DEFAULT_SKEW_S) -> list[ScrapeBatch]:
    """``batches`` with the samples time sanity refuses moved into dead-letter batches (``rejected``) beside
    them; a batch left without samples is dropped, the others keep their earliest sane time."""
    out = []
    for b in batches:
        refused = split_refused(b, received_ms, skew_s, where="remote write: ")
        if refused is None:
            out.append(b)
            continue
        out.append(refused)
        if b.sample_ts_ms:
            b.scraped_at_ms = min(b.sample_ts_ms)  # type: ignore[type-var]
            out.append(b)
    return out


# One record of a request, ready to publish: (job, instance, scraped_at_ms, record bytes, samples, rejected).
Encoded = tuple[str, str, int, bytes, int, str | None]


def decode_encode(body: bytes, cluster: str, received_ms: int, skew_s: float = DEFAULT_SKEW_S) -> list[Encoded]:
    """A request's records in their wire form: decoded, checked (time sanity) and encoded. Runs in a worker
    process when the receiver has some, so that decoding and encoding use another core than publishing."""
    return [(b.job, b.instance, b.scraped_at_ms, b.to_bytes(), len(b.sample_value), b.rejected)
            for b in refuse_insane(decode(body, cluster), received_ms, skew_s)]


def worker_pid(_: object = None) -> int:
    """The worker's process id (a call that imports this module in the worker: the warm-up)."""
    return os.getpid()


DEFAULT_MAX_WORKERS = 4  # each about 170k samples per CPU-second; each keeps its own series cache


def default_workers() -> int:
    """Decoding processes when ``remote_write.workers`` is unset: one per core (at most 4) on a machine with more
    than one."""
    cores = os.cpu_count() or 1
    return min(cores, DEFAULT_MAX_WORKERS) if cores > 1 else 0


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """Processes that decode and encode requests (spawned: no fork of a threaded process), warmed up."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    list(pool.map(worker_pid, range(workers)))
    return pool


Reply = tuple[int, dict[str, str], bytes]


class Receiver:
    """Decodes remote-write requests, publishes them with a ``Ticket`` and answers once Kafka acknowledged.

    ``publisher`` is a ``gangscope.transport.publish.Publisher``. ``max_buffered`` records waiting in it
    make new requests 503 at once (back-pressure) instead of piling up. ``close()`` answers 503 from then on.
    With ``workers`` > 0, requests are decoded and encoded in that many worker processes (one GIL could not
    keep up with a large cluster); a worker that dies fails the requests it held with 503 (nothing of them
    was published, so Prometheus' retry lands them once) and the pool is started anew.
    """

    def __init__(self, publisher: Any, cluster: str, ack_timeout_s: float = 20.0, max_buffered: int = 50_000,
                 retry_after_s: int = 5, skew_s: float = DEFAULT_SKEW_S, workers: int = 0) -> None:
        self.publisher = publisher
        self.cluster = cluster
        self.skew_s = skew_s
        self._refused_logged: set[tuple[str, str]] = set()
        self.ack_timeout_s = ack_timeout_s
        self.max_buffered = max_buffered
        self.retry_after_s = retry_after_s
        self._closed = threading.Event()
        self.workers = workers
        self._pool_lock = threading.Lock()
        self._pool = worker_pool(workers) if workers > 0 else None
        self.samples = 0
        self.requests = 0
        self.rejected = 0
        self.refused_samples = 0  # refused by time sanity (dead letters)

    def close(self) -> None:
        self._closed.set()
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)

    def _restart_pool(self, broken: ProcessPoolExecutor) -> None:
        """A new pool in place of ``broken`` (unless another request replaced it already, or we are closing)."""
        with self._pool_lock:
            if self._pool is not broken or self._closed.is_set():
                return
            broken.shutdown(wait=False, cancel_futures=True)
            self._pool = worker_pool(self.workers)

    def _encoded(self, body: bytes, received_ms: int, timeout_s: float) -> list[Encoded]:
        """``decode_encode`` of the request, in a worker when there are workers; raises ``BadRequest``,
        ``BrokenProcessPool`` (a worker died), ``TimeoutError``."""
        pool = self._pool
        if pool is None:
            return decode_encode(body, self.cluster, received_ms, self.skew_s)
        try:
            future = pool.submit(decode_encode, body, self.cluster, received_ms, self.skew_s)
            return future.result(timeout_s)
        except BrokenProcessPool:
            self._restart_pool(pool)
            raise
        except TimeoutError:
            # CPython's pool can miss a worker's death and leave every later request waiting (CI, 7 Dec: after a
            # second SIGKILL, 503 "not decoded" for minutes; gh-94777's hang): a dead worker means a new pool.
            if any(not p.is_alive() for p in (getattr(pool, "_processes", None) or {}).values()):
                log.warning("remote write: a decoding worker died unnoticed; starting the pool anew")
                self._restart_pool(pool)
            raise

    def _retry(self, why: str) -> Reply:
        self.rejected += 1
        log.warning("remote write answered 503: %s", why)
        return 503, {"Content-Type": "text/plain; charset=utf-8", "Retry-After": str(self.retry_after_s)}, \
            (why + "\n").encode()

    def handle(self, body: bytes, headers: Mapping[str, str]) -> Reply:
        """One ``POST /api/v1/write``: (status, headers, body) to answer; never raises (a bug is a 500,
        which Prometheus retries)."""
        try:
            return self._handle(body, headers)
        except Exception as e:
            log.exception("remote write failed")
            return 500, {"Content-Type": "text/plain; charset=utf-8"}, f"{type(e).__name__}\n".encode()

    def _handle(self, body: bytes, headers: Mapping[str, str]) -> Reply:
        from gangscope.transport.publish import Ticket

        text = {"Content-Type": "text/plain; charset=utf-8"}
        ctype = (headers.get("Content-Type") or "application/x-protobuf").split(";")[0].strip().lower()
        if ctype != "application/x-protobuf":
            return 415, text, f"expected Content-Type application/x-protobuf, got {ctype!r}\n".encode()
        if (headers.get("Content-Encoding") or "snappy").strip().lower() != "snappy":
            return 415, text, b"expected Content-Encoding snappy\n"
        if self._closed.is_set():
            return self._retry("the service is stopping")
        received_ms = int(time.time() * 1000)
        deadline = time.monotonic() + self.ack_timeout_s
        try:
            records = self._encoded(body, received_ms, self.ack_timeout_s)
        except BadRequest as e:
            log.warning("remote write refused (400): %s", e)
            return 400, text, (str(e)[:500] + "\n").encode()
        except BrokenProcessPool:
            return self._retry("a decoding worker died; try again")
        except TimeoutError:
            return self._retry(f"not decoded within {self.ack_timeout_s:g} s")
        except (RuntimeError, CancelledError):  # the pool was shut down under us
            return self._retry("the service is stopping")
        for job, instance, _, _, _, rejected in records:
            if rejected and (job, instance) not in self._refused_logged:  # once per target; the count is in /metrics
                self._refused_logged.add((job, instance))
                log.warning("remote write from job %s instance %s: sample(s) refused by time sanity: %s",
                            job, instance, rejected)
        if self.publisher.buffered > self.max_buffered:
            return self._retry(f"{self.publisher.buffered} records wait for Kafka; try again")
        ticket = Ticket()
        try:
            for job, instance, at_ms, encoded, n, rejected in records:
                b = EncodedScrapeBatch(cluster=self.cluster, target=instance, job=job, instance=instance,
                                       scraped_at_ms=at_ms, rejected=rejected)
                b.encoded, b.samples = encoded, n
                self.publisher.publish(b, ticket)
        except RuntimeError:  # the publisher closed under us
            self.publisher.withdraw(ticket)
            return self._retry("the service is stopping")
        if not ticket.wait(max(0.0, deadline - time.monotonic())):
            self.publisher.withdraw(ticket)
            return self._retry(ticket.failed or f"Kafka did not acknowledge within {self.ack_timeout_s:g} s")
        self.requests += 1
        self.refused_samples += sum(r[4] for r in records if r[5])
        self.samples += sum(r[4] for r in records if not r[5])
        return 204, {}, b""


def route(receiver: Receiver) -> tuple[str, Callable[[bytes, Mapping[str, str]], Reply]]:
    """(path, handler) to mount on the telemetry HTTP server (``gangscope.telemetry.start_http_server``)."""
    return PATH, receiver.handle
