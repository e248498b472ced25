"""gangscope's own telemetry: Prometheus metrics, ``/metrics`` and ``/healthz``.

Every metric lives in the dedicated :data:`REGISTRY` (not the process-global default
registry) so tests and embedded uses never collide with other prometheus_client users.
Stages import the metric objects and increment them; the names below are a stable
interface (dashboards and alerts use them), documented in docs/deploy.md.

Liveness: long-running components call :func:`heartbeat` from their loop; ``/healthz``
answers 503 when any registered component has not beaten within its ``max_age_s``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

# --- pipeline (Kafka -> lake) ---------------------------------------------------------
RECORDS_CONSUMED = Counter(
    "gangscope_records_consumed_total", "Kafka records read by the pipeline.", ["topic"], registry=REGISTRY
)
RECORDS_LANDED = Counter(
    "gangscope_records_landed_total", "Records committed to the lake (after the catalog commit).", ["topic"],
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "gangscope_consumer_lag", "Records behind the partition's high-water mark after the last batch.",
    ["topic", "partition"], registry=REGISTRY,
)
BATCH_SECONDS = Histogram(
    "gangscope_batch_seconds", "Time to decode and land one batch (poll excluded).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY,
)
DEAD_LETTERS = Counter(
    "gangscope_dead_letters_total", "Records landed in raw.dead_letters instead of their table.", ["topic"],
    registry=REGISTRY,
)

# --- collectors -----------------------------------------------------------------------
SCRAPE_UP = Gauge(
    "gangscope_scrape_up", "1 if the last scrape of the target succeeded, else 0.", ["job", "instance"],
    registry=REGISTRY,
)
SCRAPE_DURATION = Gauge(
    "gangscope_scrape_duration_seconds", "Duration of the last scrape of the target.", ["job", "instance"],
    registry=REGISTRY,
)
WATCH_RECONNECTS = Counter(
    "gangscope_watch_reconnects_total", "Watch streams re-opened (closed by server, network error).", ["kind"],
    registry=REGISTRY,
)
WATCH_RELISTS = Counter(
    "gangscope_watch_relists_total", "Full re-lists of a kind (410 Gone / expired resourceVersion).", ["kind"],
    registry=REGISTRY,
)
REJECTED_AT_EDGE = Counter(
    "gangscope_rejected_at_edge_total", "Records a collector sent to the dead letter with a reason (time sanity, "
    "larger than kafka.max_record_bytes, nested too deep).", ["topic"], registry=REGISTRY,
)
PUBLISHER_BUFFERED = Gauge(  # one publisher per process (gangscope/transport/publish.py), so no label
    "gangscope_publisher_buffered_records", "Records waiting in the publisher for Kafka to accept them.",
    registry=REGISTRY,
)
PUBLISHER_DROPPED = Counter(
    "gangscope_publisher_dropped_total", "Records the publisher dropped because its buffer was full.", ["topic"],
    registry=REGISTRY,
)

# --- models and reports ---------------------------------------------------------------
MODEL_BUILD_SECONDS = Histogram(
    "gangscope_model_build_seconds", "Wall time of one build of the SQL models.",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=REGISTRY,
)
MODEL_BUILD_FAILURES = Counter(
    "gangscope_model_build_failures_total", "Model builds that raised.", registry=REGISTRY
)
LAST_REPORT = Gauge(
    "gangscope_last_report_timestamp_seconds", "Unix time the last report was written.", registry=REGISTRY
)
RETENTION_DELETED = Counter(
    "gangscope_retention_deleted_rows_total", "Rows removed by retention.", ["table"], registry=REGISTRY
)

# --- one-line hooks for the stages (keep their edits small) -----------------------------
_lag_seen: set[tuple[str, int]] = set()
_lag_at = 0.0


def batch_landed(records: Iterable[Sequence[Any]], dead: Iterable[Sequence[Any]] = (),
                 seconds: float | None = None) -> None:
    """After a lake commit: ``records`` (topic, partition, offset, value) landed (dead letters included),
    ``dead`` as (record, reason), ``seconds`` the batch's decode + write time."""
    if seconds is not None:
        BATCH_SECONDS.observe(seconds)
    for topic, n in collections.Counter(r[0] for r in records).items():
        RECORDS_LANDED.labels(topic).inc(n)
    for topic, n in collections.Counter(d[0][0] for d in dead).items():
        DEAD_LETTERS.labels(topic).inc(n)


def records_polled(records: Sequence[Any]) -> None:
    """Kafka ``ConsumerRecord``s of one partition just polled."""
    if records:
        RECORDS_CONSUMED.labels(records[0].topic).inc(len(records))


def scrape_done(batch: Any) -> None:
    """A ``ScrapeBatch`` (up, duration_s, job, instance) just scraped: scrape health per target."""
    SCRAPE_UP.labels(batch.job, batch.instance).set(1 if batch.up else 0)
    SCRAPE_DURATION.labels(batch.job, batch.instance).set(batch.duration_s)


def track_publisher(publisher: Any) -> None:
    """Report ``publisher.buffered`` at scrape time, without keeping the publisher alive."""
    ref = weakref.ref(publisher)
    PUBLISHER_BUFFERED.set_function(lambda: float(p.buffered) if (p := ref()) is not None else 0.0)


def pipeline_tick(consumer: Any, component: str = "pipeline", every_s: float = 5.0) -> None:
    """Once per loop: heartbeat, and every ``every_s`` the lag of each assigned partition.

    Lag is the broker's last reported high-water mark minus the consumer's position; both
    are known locally after a fetch, so this never blocks on the network.
    """
    global _lag_at
    heartbeat(component)
    now = time.monotonic()
    if now - _lag_at < every_s:
        return
    _lag_at = now
    current: set[tuple[str, int]] = set()
    with contextlib.suppress(Exception):  # telemetry must never break the loop
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is None:
                continue
            pos = consumer.position(tp, timeout_ms=0)
            if pos is None:
                continue
            CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - pos))
            current.add((tp.topic, tp.partition))
    for topic, part in _lag_seen - current:  # revoked: not ours to report any more
        with contextlib.suppress(KeyError):
            CONSUMER_LAG.remove(topic, str(part))
    _lag_seen.clear()
    _lag_seen.update(current)


# --- liveness ---------------------------------------------------------------------------
DEFAULT_MAX_AGE_S = 120.0
_beats: dict[str, tuple[float, float]] = {}  # component -> (last beat monotonic, max age s)
_beats_lock = threading.Lock()


def heartbeat(component: str, max_age_s: float | None = None) -> None:
    """Mark ``component`` alive now; ``/healthz`` fails once it is silent for ``max_age_s``.

    The first call registers the component; later calls may omit ``max_age_s`` to keep it.
    """
    with _beats_lock:
        old = _beats.get(component)
        age = max_age_s if max_age_s is not None else (old[1] if old else DEFAULT_MAX_AGE_S)
        _beats[component] = (time.monotonic(), age)


def forget(component: str) -> None:
    """Unregister a component that stopped on purpose (a clean stop is not a failure)."""
    with _beats_lock:
        _beats.pop(component, None)


def health() -> tuple[bool, dict[str, object]]:
    """(all alive, JSON-able body) — what ``/healthz`` serves."""
    now = time.monotonic()
    with _beats_lock:
        items = sorted(_beats.items())
    comps = {
        name: {"ok": now - at <= max_age, "age_s": round(now - at, 3), "max_age_s": max_age}
        for name, (at, max_age) in items
    }
    ok = all(c["ok"] for c in comps.values())
    return ok, {"status": "ok" if ok else "unhealthy", "components": comps}


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9108``, ``:9108`` = all interfaces) into a bind address."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"server.listen: expected HOST:PORT, got {listen!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry = REGISTRY

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, CONTENT_TYPE_LATEST, generate_latest(self.registry))
        elif path == "/healthz":
            ok, body = health()
            self._send(200 if ok else 503, "application/json", json.dumps(body).encode())
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - scrapes are not news
        pass


class Server:
    """A running telemetry endpoint; call it (or ``.stop()``) to shut it down."""

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._httpd, self._thread = httpd, thread
        self.host, self.port = httpd.server_address[:2]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in str(self.host) else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    __call__ = stop


def start_http_server(listen: str, registry: CollectorRegistry = REGISTRY) -> Server:
    """Serve ``/metrics`` and ``/healthz`` on ``listen`` (port 0: any free port) in a daemon thread.

    Returns a callable that stops the server; it also carries ``.port`` and ``.url``.
    """
    host, port = parse_listen(listen)
    handler = type("TelemetryHandler", (_Handler,), {"registry": registry})
    server_cls = ThreadingHTTPServer
    if ":" in host:
        import socket

        server_cls = type("V6Server", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
    httpd = server_cls((host, port), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="gangscope-telemetry", daemon=True)
    thread.start()
    return Server(httpd, thread)

