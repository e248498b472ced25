"""gangscope's own telemetry: Prometheus metrics, ``/metrics`` and ``/healthz``.

Every metric lives in the dedicated :data:`REGISTRY` (not the process-global default
registry) so tests and embedded uses never collide with other prometheus_client users.
Stages import the metric objects and increment them; the names below are a stable
interface (dashboards and alerts use them), documented in docs/deploy.md.

Liveness: long-running components call :func:`heartbeat` from their loop; ``/healthz``
answers 503 when any registered component has not beaten within its ``max_age_s``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from gangscope.secrets import redact

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
# Targets are named scrape_job/scrape_instance: `job`/`instance` are the labels Prometheus itself sets when it
# scrapes gangscope (ours would become exported_job/exported_instance).
SCRAPE_UP = Gauge(
    "gangscope_scrape_up", "1 if the last scrape of the target succeeded, else 0.", ["scrape_job", "scrape_instance"],
    registry=REGISTRY,
)
SCRAPE_DURATION = Gauge(
    "gangscope_scrape_duration_seconds", "Duration of the last scrape of the target.",
    ["scrape_job", "scrape_instance"], registry=REGISTRY,
)
SCRAPE_FAILURES = Counter(
    "gangscope_scrape_failures_total", "Failed scrapes (no samples recorded), by reason: timeout, http_status, "
    "body_too_large, empty_body, content_type, parse_error, skipped, body_cut, connection.",
    ["scrape_job", "reason"], registry=REGISTRY,
)
SCRAPE_PARTIAL = Counter(
    "gangscope_scrape_partial_total", "Scrapes that landed with broken exposition lines refused (named in the "
    "scrape's error).", ["scrape_job"], registry=REGISTRY,
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
LAST_BUILD = Gauge(
    "gangscope_last_model_build_timestamp_seconds", "Unix time the last model build succeeded.", registry=REGISTRY
)
LAST_LANDING = Gauge(
    "gangscope_last_landing_timestamp_seconds", "Unix time the pipeline last committed records to the lake.",
    registry=REGISTRY,
)
FINDINGS_ACTIVE = Gauge(
    "gangscope_findings_active", "Findings open now (opened or updated, not resolved).", ["root_cause", "severity"],
    registry=REGISTRY,
)
FINDING_CHANGES = Counter(
    "gangscope_finding_changes_total", "Finding lifecycle changes published.", ["state"], registry=REGISTRY
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
    landed = collections.Counter(r[0] for r in records)
    if landed:
        LAST_LANDING.set(time.time())
    for topic, n in landed.items():
        RECORDS_LANDED.labels(topic).inc(n)
    for topic, n in collections.Counter(d[0][0] for d in dead).items():
        DEAD_LETTERS.labels(topic).inc(n)


def records_polled(records: Sequence[Any]) -> None:
    """Kafka ``ConsumerRecord``s of one partition just polled."""
    if records:
        RECORDS_CONSUMED.labels(records[0].topic).inc(len(records))


def scrape_done(batch: Any, failure: str | None = None, interval_s: float | None = None) -> None:
    """A ``ScrapeBatch`` (up, duration_s, job, instance) just scraped: scrape health per target;
    ``failure`` is the reason class of a failed one; a scrape that delivered keeps the metrics collector
    alive for 3 of its target's ``interval_s``."""
    SCRAPE_UP.labels(batch.job, batch.instance).set(1 if batch.up else 0)
    SCRAPE_DURATION.labels(batch.job, batch.instance).set(batch.duration_s)
    if not batch.up:
        SCRAPE_FAILURES.labels(batch.job, failure or "connection").inc()
        return
    if batch.error:
        SCRAPE_PARTIAL.labels(batch.job).inc()
    if interval_s:
        heartbeat("collector-metrics", 3 * interval_s)


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
        _problems.pop(component, None)
        _degraded.pop(component, None)


_problems: dict[str, str] = {}  # component -> why it is failing now
_degraded: dict[str, str] = {}  # component -> what it is waiting out (working, not failed)


def problem(component: str, reason: str | None) -> None:
    """Mark ``component`` failing for ``reason`` (``/healthz`` says so), or healthy again with ``None``.

    Reasons are redacted: they often quote an error, and errors quote URLs (a catalog DSN with its password)."""
    with _beats_lock:
        if reason is None:
            _problems.pop(component, None)
        else:
            _problems[component] = redact(reason)


def degraded(component: str, reason: str | None) -> None:
    """Mark ``component`` degraded for ``reason``, or not any more with ``None``.

    Degraded is working around an outage (the lake's object store or catalog away: writes wait and retry), not
    failing: ``/healthz`` answers 200 with status ``degraded`` and the reason, so a liveness probe does not
    restart a process that a restart would not help, while dashboards and readiness see it."""
    with _beats_lock:
        if reason is None:
            _degraded.pop(component, None)
        else:
            _degraded[component] = redact(reason)


def health() -> tuple[bool, dict[str, object]]:
    """(all alive, JSON-able body) — what ``/healthz`` serves; a failing component carries its ``reason``."""
    now = time.monotonic()
    with _beats_lock:
        items = sorted(_beats.items())
        problems = dict(_problems)
        slow = dict(_degraded)
    comps: dict[str, dict[str, object]] = {}
    for name, (at, max_age) in items:
        c: dict[str, object] = {"ok": now - at <= max_age, "age_s": round(now - at, 3), "max_age_s": max_age}
        if not c["ok"]:
            c["reason"] = f"nothing delivered for {now - at:.0f} s (limit {max_age:g} s)"
        comps[name] = c
    for name, reason in slow.items():
        c = comps.setdefault(name, {"ok": True})
        c["degraded"] = True
        c.setdefault("reason", reason)
    for name, reason in problems.items():
        comps.setdefault(name, {})
        comps[name].update(ok=False, reason=reason)
    ok = all(c["ok"] for c in comps.values())
    status = "unhealthy" if not ok else "degraded" if any(c.get("degraded") for c in comps.values()) else "ok"
    return ok, {"status": status, "components": dict(sorted(comps.items()))}


class _HealthCollector:
    """``gangscope_component_healthy{component}``: /healthz's verdict per component, at scrape time."""

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        g = GaugeMetricFamily("gangscope_component_healthy", "1 if the component is healthy, else 0 (the reason "
                              "is in /healthz).", labels=["component"])
        d = GaugeMetricFamily("gangscope_component_degraded", "1 if the component works around an outage (the reason "
                              "is in /healthz), else 0.", labels=["component"])
        for name, c in health()[1]["components"].items():  # type: ignore[union-attr]
            g.add_metric([name], 1.0 if c["ok"] else 0.0)
            d.add_metric([name], 1.0 if c.get("degraded") else 0.0)
        yield g
        yield d


REGISTRY.register(_HealthCollector())  # type: ignore[arg-type]


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9108``, ``:9108`` = all interfaces) into a bind address."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"server.listen: expected HOST:PORT, got {listen!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds of the HTTP server: a request must send its headers and body in time and within size, and at
    most ``max_connections`` are open (a new one evicts the oldest still sending its headers, so idle or slow
    clients cannot lock out ``/healthz``)."""

    header_timeout_s: float = 5.0
    body_timeout_s: float = 10.0
    max_header_bytes: int = 16 << 10
    max_body_bytes: int = 8 << 20
    max_connections: int = 256


# A route: (request body, headers) -> (status, content type or response headers, body). Runs in a worker
# thread. Header names are looked up case-insensitively (the remote-write receiver asks for "Content-Type");
# the headers also carry the request's ``path`` and ``query`` (raw, still percent-encoded).
Route = Callable[[bytes, Any], tuple[int, "str | dict[str, str]", bytes]]
_REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 411: "Length Required", 413: "Content Too Large", 415: "Unsupported Media Type",
            429: "Too Many Requests", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


class _Headers(dict[str, str]):
    """Request headers keyed by lower-cased name; ``get`` and ``[]`` take any case. ``path`` and ``query`` are
    the request target's (raw)."""

    path = ""
    query = ""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class Server:
    """A running telemetry endpoint (asyncio, one thread); call it (or ``.stop()``) to shut it down.

    ``add_route(method, path, fn)`` mounts another route under the same limits (e.g. a POST receiver);
    ``prefix=True`` makes it answer every path under ``path`` (the live page's ``/jobs/...``).
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry, limits: Limits) -> None:
        self.limits = limits
        self._max_body: dict[tuple[str, str], int] = {}
        self._prefixes: list[tuple[str, str]] = []  # (method, path prefix) of the prefix routes
        self.routes: dict[tuple[str, str], Route] = {
            ("GET", "/metrics"): lambda body, headers: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
            ("GET", "/healthz"): _healthz,
        }
        self._loop = asyncio.new_event_loop()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gangscope-http")
        self._reading: collections.OrderedDict[asyncio.Task[None], None] = collections.OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self._open = 0
        self._evicting = 0
        self.evicted = 0
        started = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._srv = self._loop.run_until_complete(asyncio.start_server(
                    self._serve, host, port, limit=limits.max_header_bytes, reuse_address=True))
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                failed.append(e)
                started.set()
                return
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="gangscope-telemetry", daemon=True)
        self._thread.start()
        started.wait()
        if failed:
            raise failed[0]
        self.host, self.port = self._srv.sockets[0].getsockname()[:2]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in str(self.host) else self.host
        return f"http://{host}:{self.port}"

    def add_route(self, method: str, path: str, route: Route, max_body_bytes: int | None = None,
                  prefix: bool = False) -> None:
        """Mount ``route``; ``max_body_bytes`` overrides ``limits.max_body_bytes`` for it (a remote-write
        receiver takes bodies up to its own configured limit); ``prefix``: also every path under ``path``."""
        self.routes[(method.upper(), path)] = route
        if max_body_bytes is not None:
            self._max_body[(method.upper(), path)] = max_body_bytes
        if prefix:
            self._prefixes.append((method.upper(), path))
            self._prefixes.sort(key=lambda mp: -len(mp[1]))  # the longest prefix wins

    def _match(self, method: str, path: str) -> tuple[str, str] | None:
        """The route key answering ``method path``: the exact path, else the longest prefix route."""
        if (method, path) in self.routes:
            return method, path
        return next(((m, p) for m, p in self._prefixes if m == method and path.startswith(p)), None)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._open += 1
        while self._open - self._evicting > self.limits.max_connections and self._reading:
            oldest = next(iter(self._reading))
            self._reading.pop(oldest)
            oldest.cancel()  # it answers 503 and closes on its next turn
            self._evicting += 1
            self.evicted += 1
        self._reading[task] = None
        try:
            status, head_fields, body = await self._request(reader)
        except asyncio.CancelledError:
            self._evicting -= 1
            status, head_fields, body = 503, "text/plain", b"too many connections\n"
        finally:
            self._reading.pop(task, None)
        try:
            fields = {"Content-Type": head_fields} if isinstance(head_fields, str) else dict(head_fields)
            fields = {k: v for k, v in fields.items() if k.lower() not in ("content-length", "connection")}
            head = (f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
                    + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
                    + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
            writer.write(head + body)
            await asyncio.wait_for(writer.drain(), self.limits.body_timeout_s)
        except (OSError, TimeoutError, asyncio.CancelledError):
            pass
        finally:
            self._open -= 1
            writer.close()

    async def _request(self, reader: asyncio.StreamReader) -> tuple[int, str | dict[str, str], bytes]:
        text = "text/plain; charset=utf-8"
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.limits.header_timeout_s)
        except TimeoutError:
            return 408, text, b"request headers not received in time\n"
        except asyncio.LimitOverrunError:
            return 431, text, b"request headers too large\n"
        except (asyncio.IncompleteReadError, OSError):
            return 400, text, b"incomplete request\n"
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, text, b"bad request line\n"
        method, (path, _, query) = parts[0].upper(), parts[1].partition("?")
        headers = _Headers({k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)})
        headers.path, headers.query = path, query
        key = self._match(method, path)
        if key is None:
            if any(self._match(m, path) for m in {m for m, _ in self.routes}):
                return 405, {"Content-Type": text, "Allow": ", ".join(sorted(
                    m for m in {m for m, _ in self.routes} if self._match(m, path)))}, b"method not allowed\n"
            return 404, text, b"not found: try /metrics or /healthz\n"
        route = self.routes[key]
        length = headers.get("content-length", "0")
        if not length.isdigit():
            return 400, text, b"bad Content-Length\n"
        max_body = self._max_body.get(key, self.limits.max_body_bytes)
        if int(length) > max_body:
            return 413, text, f"body over {max_body} bytes\n".encode()
        body = b""
        if int(length):
            try:
                body = await asyncio.wait_for(reader.readexactly(int(length)), self.limits.body_timeout_s)
            except TimeoutError:
                return 408, text, b"request body not received in time\n"
            except (asyncio.IncompleteReadError, OSError):
                return 400, text, b"incomplete body\n"
        try:
            return await self._loop.run_in_executor(self._pool, route, body, headers)
        except Exception as e:  # noqa: BLE001 - a route's bug is a 500, not a dead server
            return 500, text, f"{type(e).__name__}\n".encode()

    def stop(self) -> None:
        if not self._loop.is_running():
            return

        async def close() -> None:
            self._srv.close()
            for task in list(self._reading):
                task.cancel()
            await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 5)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()
        self._pool.shutdown(wait=False)

    __call__ = stop


def _healthz(body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    ok, out = health()
    return 200 if ok else 503, "application/json", json.dumps(out).encode()


def start_http_server(listen: str, registry: CollectorRegistry = REGISTRY, limits: Limits | None = None) -> Server:
    """Serve ``/metrics`` and ``/healthz`` on ``listen`` (port 0: any free port) in a daemon thread, bounded
    by ``limits``. Returns a callable that stops the server; it also carries ``.port``, ``.url`` and
    ``.add_route``."""
    host, port = parse_listen(listen)
    return Server(host, port, registry, limits or Limits())
