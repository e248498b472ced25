"""Prometheus remote-write 1.0 receiver: ``POST /api/v1/write`` on the service's HTTP port.

The body is a snappy-compressed (block format, ``cramjam``) protobuf ``prometheus.WriteRequest``
(``protobuf``; the message is built from its descriptor below, the fields remote write 1.0 defines).
Samples are grouped into one ``ScrapeBatch`` per (job, instance) of the request, with every
label as sent (``job``/``instance`` become the batch's columns, as in a scrape), and published.

The answer follows the protocol's retry rules, so nothing is lost: 204 only after Kafka
acknowledged every record of the request; 400 for a body that cannot be decoded (Prometheus
drops it: retrying cannot help); 503 with ``Retry-After`` when the publisher is backed up,
Kafka did not acknowledge within ``ack_timeout_s``, or the service is stopping (Prometheus
retries). On a timeout the request's records not sent yet are withdrawn; one already in flight
may still land, so a retried request can land twice: identical samples, which staging reads once.

Time sanity (gangscope/timesanity.py, as for scrapes): samples stamped before 2000, further than
``clock_skew_s`` in the future of the request's receipt, or in another unit than milliseconds leave
their batch and are published as a dead letter with the reason (``raw.dead_letters``, counted in
``gangscope_rejected_at_edge_total``); the request is still answered 204, so its sane samples land and
Prometheus does not resend what no retry can fix.

Staleness markers (the NaN with bits ``0x7ff0000000000002`` Prometheus writes when a series
ends) are not samples and are dropped; exemplars, metadata and native histograms are ignored.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import cramjam
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from collectors.prom import DEFAULT_JOB
from gangscope.records import ScrapeBatch
from gangscope.timesanity import DEFAULT_SKEW_S, split_refused

log = logging.getLogger(__name__)

PATH = "/api/v1/write"
STALE_NAN = 0x7FF0000000000002
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")


def _write_request_class() -> Any:
    """``prometheus.WriteRequest`` of remote write 1.0 (prompb/remote.proto, types.proto), from its descriptor."""
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
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("prometheus.WriteRequest"))


WriteRequest = _write_request_class()


class BadRequest(ValueError):
    """A body that is not a snappy-compressed WriteRequest (answered 400)."""


_SERIES: dict[bytes, tuple[str, str, str, dict[str, str]]] = {}  # label bytes -> (name, job, instance, labels)
SERIES_CACHE_MAX = 1_000_000


def _series(ts: Any) -> tuple[str, str, str, dict[str, str]]:
    """A TimeSeries' (name, job, instance, other labels), from a cache keyed by its labels' wire bytes.

    Prometheus sends the same series in every request; reading labels field by field was most of the
    decoding. The label dicts are shared between batches and must not be changed.
    """
    ts.ClearField("samples")  # what is left is the labels' wire form
    key = ts.SerializeToString()
    hit = _SERIES.get(key)
    if hit is None:  # (decode looks the cache up itself first; this is the miss)
        labels = {lb.name: lb.value for lb in ts.labels}
        name = labels.pop("__name__", "")
        if not name:
            raise BadRequest(f"a series without __name__: {labels}")
        if len(_SERIES) >= SERIES_CACHE_MAX:
            _SERIES.clear()
        hit = _SERIES[key] = (name, labels.pop("job", "") or DEFAULT_JOB, labels.pop("instance", "") or DEFAULT_JOB,
                              labels)
    return hit


def decode(body: bytes, cluster: str) -> list[ScrapeBatch]:
    """The samples of one remote-write body as ScrapeBatches, one per (job, instance), in the order first seen."""
    try:
        raw = bytes(cramjam.snappy.decompress_raw(body))
    except Exception as e:
        raise BadRequest(f"body is not snappy-compressed: {e}") from None
    try:
        req = WriteRequest.FromString(raw)
    except Exception as e:
        raise BadRequest(f"body is not a remote-write WriteRequest: {e}") from None
    # Per (job, instance): series names, series labels, and the sample columns (series, ts, value).
    groups: dict[tuple[str, str], tuple[list[str], list[dict[str, str]], list[int], list[int], list[float]]] = {}
    pack, unpack, cache, series_of = _F64.pack, _U64.unpack, _SERIES, _series
    for ts in req.timeseries:
        points = [(s.value, s.timestamp) for s in ts.samples]
        ts.ClearField("samples")  # what is left is the labels' wire form: the cache key
        hit = cache.get(ts.SerializeToString()) or series_of(ts)
        name, job, instance, labels = hit
        g = None
        for v, t in points:
            if v != v and unpack(pack(v))[0] == STALE_NAN:
                continue
            if g is None:
                g = groups.get((job, instance))
                if g is None:
                    g = groups[(job, instance)] = ([], [], [], [], [])
                g[0].append(name)
                g[1].append(labels)
                series = len(g[0]) - 1
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


Reply = tuple[int, dict[str, str], bytes]


class Receiver:
    """Decodes remote-write requests, publishes them with a ``Ticket`` and answers once Kafka acknowledged.

    ``publisher`` is a ``gangscope.transport.publish.Publisher``. ``max_buffered`` records waiting in it
    make new requests 503 at once (back-pressure) instead of piling up. ``close()`` answers 503 from then on.
    """

    def __init__(self, publisher: Any, cluster: str, ack_timeout_s: float = 20.0, max_buffered: int = 50_000,
                 retry_after_s: int = 5, skew_s: float = DEFAULT_SKEW_S) -> None:
        self.publisher = publisher
        self.cluster = cluster
        self.skew_s = skew_s
        self._refused_logged: set[tuple[str, str]] = set()
        self.ack_timeout_s = ack_timeout_s
        self.max_buffered = max_buffered
        self.retry_after_s = retry_after_s
        self._closed = threading.Event()
        self.samples = 0
        self.requests = 0
        self.rejected = 0
        self.refused_samples = 0  # refused by time sanity (dead letters)

    def close(self) -> None:
        self._closed.set()

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
        try:
            batches = refuse_insane(decode(body, self.cluster), received_ms, self.skew_s)
        except BadRequest as e:
            log.warning("remote write refused (400): %s", e)
            return 400, text, (str(e)[:500] + "\n").encode()
        refused = [b for b in batches if b.rejected]
        for b in refused:
            if (b.job, b.instance) not in self._refused_logged:  # once per target; the count is in /metrics
                self._refused_logged.add((b.job, b.instance))
                log.warning("remote write from job %s instance %s: sample(s) refused by time sanity: %s",
                            b.job, b.instance, b.rejected)
        if self.publisher.buffered > self.max_buffered:
            return self._retry(f"{self.publisher.buffered} records wait for Kafka; try again")
        ticket = Ticket()
        try:
            for b in batches:
                self.publisher.publish(b, ticket)
        except RuntimeError:  # the publisher closed under us
            self.publisher.withdraw(ticket)
            return self._retry("the service is stopping")
        if not ticket.wait(self.ack_timeout_s):
            self.publisher.withdraw(ticket)
            return self._retry(ticket.failed or f"Kafka did not acknowledge within {self.ack_timeout_s:g} s")
        self.requests += 1
        self.refused_samples += sum(len(b.sample_value) for b in refused)
        self.samples += sum(len(b.sample_value) for b in batches if not b.rejected)
        return 204, {}, b""


def route(receiver: Receiver) -> tuple[str, Callable[[bytes, Mapping[str, str]], Reply]]:
    """(path, handler) to mount on the telemetry HTTP server (``gangscope.telemetry.start_http_server``)."""
    return PATH, receiver.handle
