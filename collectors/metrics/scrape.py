"""Concurrent scraping: every target of an interval in one asyncio round, each with its own timeout.

One process scrapes 1,000 targets every 15 s: all requests of a round are in flight at once
(aiohttp, keep-alive connections reused across rounds), each bounded by its target's
``timeout_s``, so a slow target costs only its own scrape. A target whose previous scrape
is somehow still running when its next round starts is skipped for that round (recorded as
a failed scrape), so nothing piles up. Every scrape, good or failed, yields one
``ScrapeBatch`` whose ``up``/``duration_s``/``error`` are the scrape-health record.

The body is read to its end (chunked, gzip) up to ``max_body_bytes``, the format is negotiated
like Prometheus does (OpenMetrics 1.0 preferred, text 0.0.4 as fallback) and parsed by the
``Content-Type`` the target answered. A body that cannot be trusted as a whole (over the limit,
empty, cut short, OpenMetrics without ``# EOF``, another content type, a timeout) fails the
scrape: ``up=False`` with the reason in ``error``, and no samples. A broken *line* does not:
unlike Prometheus, which drops the whole scrape, the good lines land and ``error`` names the
broken ones (``up`` stays true), so one bad line of an exporter does not blind gangscope to a
node (docs/collectors-metrics.md, "Broken lines").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import ssl
import time
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import aiohttp

from collectors.metrics.parse import parse_text, to_batch
from collectors.metrics.targets import Target
from gangscope import clock, telemetry
from gangscope.records import EncodedScrapeBatch, ScrapeBatch
from gangscope.secrets import redact
from gangscope.timesanity import DEFAULT_SKEW_S, split_refused

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 << 20
# What Prometheus 3 sends with its default scrape protocols (scrape/scrape.go acceptHeader, model.NoEscaping): UTF-8
# names as they are (an exporter on a recent client_golang would otherwise escape "http.status" to "http_status").
ACCEPT = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
          "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
          "text/plain;version=0.0.4;q=0.2,*/*;q=0.1")
# Only gzip, as Prometheus asks, decompressed here: aiohttp's own decompression took a gzip stream cut short
# (Content-Length right, the stream's end missing) as a whole body and landed its first lines as a good scrape.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}

Emit = Callable[[ScrapeBatch], None]


class ScrapeFailed(Exception):
    """A scrape that yields no samples; the message is the stored reason."""


def body_format(content_type: str | None) -> str:
    """Parser for a response's ``Content-Type``: ``openmetrics`` or ``text`` (also when the header is missing,
    as Prometheus 2.x falls back); anything else fails the scrape."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/openmetrics-text":
        return "openmetrics"
    if media in ("", "text/plain"):
        return "text"
    raise ScrapeFailed(f"unsupported content type {media!r} (expected text/plain or application/openmetrics-text)")


def decode_body(body: bytes) -> str:
    """A response body as text; bytes that are not UTF-8 stay as surrogates, so the parser refuses
    exactly the lines that hold them (and names them) instead of the whole body."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("utf-8", "surrogateescape")


def parse_scrape(text: str, fmt: str, *, cluster: str, target: str, job: str, instance: str, scraped_at_ms: int,
                 fetch_s: float, labels: dict[str, str]) -> ScrapeBatch:
    """One fetched body as a ScrapeBatch: the samples of its good lines, ``error`` naming the broken ones
    (``up`` stays true); none and ``up=False`` for OpenMetrics without ``# EOF`` (the body may be cut) or a
    body without one good line (an HTML page sent as text/plain)."""
    return _parse_scrape(text, fmt, cluster=cluster, target=target, job=job, instance=instance,
                         scraped_at_ms=scraped_at_ms, fetch_s=fetch_s, labels=labels)[0]


def _parse_scrape(text: str, fmt: str, *, cluster: str, target: str, job: str, instance: str, scraped_at_ms: int,
                  fetch_s: float, labels: dict[str, str]) -> tuple[ScrapeBatch, list[str]]:
    """``parse_scrape`` and the parser's warnings (native histograms skipped, repeated timestamps dropped)."""
    t0 = time.perf_counter()
    parsed = parse_text(text, fmt=fmt)
    if parsed.cut or (parsed.errors and not parsed.value):  # maybe cut short, or not one good line
        return ScrapeBatch(cluster=cluster, target=target, job=job, instance=instance, scraped_at_ms=scraped_at_ms,
                           up=False, duration_s=fetch_s + (time.perf_counter() - t0),
                           error=f"parse error ({fmt}): {parsed.error_summary()}"), []
    b = to_batch(parsed, cluster=cluster, target=target, job=job, instance=instance, scraped_at_ms=scraped_at_ms,
                 duration_s=fetch_s + (time.perf_counter() - t0), extra_labels=labels)
    if parsed.errors:
        b.error = f"parse error ({fmt}): {parsed.error_summary()}; the other lines landed"
    return b, [reason for _, reason in parsed.warnings]


def by_own_target(b: ScrapeBatch) -> list[ScrapeBatch]:
    """``honor_labels``: the samples of one scrape split by their own ``job``/``instance`` labels, each group a
    batch of that target (``target`` = its instance, as for a replayed file; the labels leave the label set).
    Samples without them stay in ``b``, which always comes first: it is the scrape's health record."""
    groups: dict[tuple[str, str], ScrapeBatch] = {}
    own = ScrapeBatch(cluster=b.cluster, target=b.target, job=b.job, instance=b.instance,
                      scraped_at_ms=b.scraped_at_ms, up=b.up, duration_s=b.duration_s, error=b.error)
    index: dict[tuple[int, int], int] = {}
    for s, ts, v in zip(b.sample_series, b.sample_ts_ms, b.sample_value, strict=True):
        labels = b.series_labels[s]
        if "job" in labels or "instance" in labels:
            job, inst = labels.get("job") or b.job, labels.get("instance") or b.instance
            out = groups.get((job, inst))
            if out is None:
                out = groups[(job, inst)] = ScrapeBatch(cluster=b.cluster, target=inst, job=job, instance=inst,
                                                        scraped_at_ms=b.scraped_at_ms, duration_s=b.duration_s)
            labels = {k: val for k, val in labels.items() if k not in ("job", "instance")}
        else:
            out = own
        key = (id(out), s)
        i = index.get(key)
        if i is None:
            i = index[key] = out.add_series(b.series_metric[s], labels)
        out.add_sample(i, v, ts)
    return [own, *groups.values()]


def _parse_encode(text: str, fmt: str, cluster: str, target: str, job: str, instance: str, scraped_at_ms: int,
                  fetch_s: float, labels: dict[str, str], skew_s: float = DEFAULT_SKEW_S,
                  ) -> tuple[bytes, int, bool, str | None, float, ScrapeBatch | None, list[str]]:
    """Worker side: parse and encode one scrape; returns (record bytes, samples, up, error, duration_s, refused:
    the samples time sanity took out, or None, warnings)."""
    b, warnings = _parse_scrape(text, fmt, cluster=cluster, target=target, job=job, instance=instance,
                                scraped_at_ms=scraped_at_ms, fetch_s=fetch_s, labels=labels)
    refused = split_refused(b, scraped_at_ms, skew_s) if b.up else None
    return b.to_bytes(), len(b.sample_value), b.up, b.error, b.duration_s, refused, warnings


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """Processes that parse and encode scrapes, so a round uses every core (spawned: no fork of threads).

    Started and warmed up here, so the first round does not pay for the workers' imports.
    """
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    list(pool.map(parse_text, [""] * workers))
    return pool


def _ssl_context(t: Target) -> ssl.SSLContext | bool | None:
    if not t.url.startswith("https"):
        return None
    if t.insecure_skip_verify:
        return False
    ctx = ssl.create_default_context(cafile=t.ca_file)
    if t.cert_file:
        ctx.load_cert_chain(t.cert_file, t.key_file)
    return ctx


_KINDS = (("timeout", "timeout"), ("HTTP ", "http_status"), ("body of ", "body_too_large"),
          ("body exceeds", "body_too_large"), ("empty body", "empty_body"),
          ("unsupported content type", "content_type"), ("parse error", "parse_error"), ("skipped", "skipped"),
          ("ClientPayloadError", "body_cut"), ("body cut", "body_cut"),
          ("unsupported content encoding", "content_type"))


def failure_kind(error: str | None) -> str:
    """The class of a failed scrape's reason (the ``reason`` label of ``gangscope_scrape_failures_total``)."""
    for prefix, kind in _KINDS:
        if (error or "").startswith(prefix):
            return kind
    return "connection"


class Scraper:
    """Scrapes targets and hands each result to ``emit``; one instance per process.

    ``cluster`` is stamped on every batch. Use ``scrape_round`` for one round (bench, capture,
    tests) or ``run`` for the interval loop. With ``pool`` (see ``worker_pool``) parsing and
    encoding happen in worker processes and ``emit`` gets ``EncodedScrapeBatch``es, ready to publish.
    """

    def __init__(self, cluster: str, emit: Emit, max_connections: int = 1000,
                 pool: ProcessPoolExecutor | None = None, max_body_bytes: int = MAX_BODY_BYTES,
                 skew_s: float = DEFAULT_SKEW_S) -> None:
        self.cluster = cluster
        self.skew_s = skew_s
        self.max_body_bytes = max_body_bytes
        self._last_error: dict[str, str | None] = {}
        self.emit = emit
        self.pool = pool
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._ssl: dict[Target, Any] = {}
        self._inflight: set[str] = set()
        self._refused_logged: set[str] = set()
        self._warned: set[tuple[str, str]] = set()
        self.rounds = 0
        self.samples = 0
        self.failures = 0

    async def __aenter__(self) -> Scraper:
        connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300,
                                         enable_cleanup_closed=True)
        self._session = aiohttp.ClientSession(connector=connector,
                                              headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"},
                                              auto_decompress=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, t: Target) -> dict[str, str] | None:
        if t.authorization is not None:  # the API server's credentials (pod proxy), renewed by its loader
            value = t.authorization()
            return {"Authorization": value} if value else None
        if not t.bearer_token_file:
            return None
        # Read per scrape: projected service-account tokens rotate. Never logged.
        with open(t.bearer_token_file) as f:
            return {"Authorization": f"Bearer {f.read().strip()}"}

    async def _fetch(self, t: Target) -> tuple[str, str]:
        """(body text, format) of one whole response; raises ``ScrapeFailed`` with the reason."""
        assert self._session is not None, "use `async with Scraper(...)`"
        if t not in self._ssl:
            self._ssl[t] = _ssl_context(t)
        kw: dict[str, Any] = {"headers": self._headers(t), "timeout": aiohttp.ClientTimeout(total=t.timeout_s)}
        if self._ssl[t] is not None:
            kw["ssl"] = self._ssl[t]
        limit = self.max_body_bytes
        async with self._session.get(t.url, **kw) as resp:
            if resp.status != 200:
                raise ScrapeFailed(f"HTTP {resp.status} {resp.reason or ''}".strip())
            fmt = body_format(resp.headers.get("Content-Type"))
            if (resp.content_length or 0) > limit:
                raise ScrapeFailed(f"body of {resp.content_length} bytes exceeds the limit of {limit} bytes")
            encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in _WBITS and encoding != "identity":
                raise ScrapeFailed(f"unsupported content encoding {encoding!r}")
            unzip = zlib.decompressobj(_WBITS[encoding]) if encoding in _WBITS else None
            body = bytearray()
            async for chunk in resp.content.iter_any():
                if unzip is not None:  # the limit is on what gets parsed: at most one byte past it is inflated
                    try:
                        chunk = unzip.decompress(chunk, limit + 1 - len(body))
                    except zlib.error as e:
                        raise ScrapeFailed(f"body cut or corrupt: {encoding}: {e}") from None
                body += chunk
                if len(body) > limit:
                    raise ScrapeFailed(f"body exceeds the limit of {limit} bytes")
            if unzip is not None and not unzip.eof:
                raise ScrapeFailed(f"body cut: the {encoding} stream ended early, after {len(body)} bytes")
            if not body.strip():
                raise ScrapeFailed("empty body")
            return decode_body(bytes(body)), fmt

    async def scrape_one(self, t: Target) -> ScrapeBatch:
        """Scrape, parse and emit one target; never raises (a failure is an ``up=False`` batch)."""
        start_ms = clock.now_ms()
        t0 = time.perf_counter()
        if t.url in self._inflight:
            batch = self._failed(t, start_ms, 0.0, "skipped: previous scrape still running")
            self._health(t, batch)
            self.emit(batch)
            return batch
        self._inflight.add(t.url)
        try:
            text, fmt = await self._fetch(t)
        except TimeoutError:
            batch = self._failed(t, start_ms, time.perf_counter() - t0, f"timeout after {t.timeout_s:g}s")
        except ScrapeFailed as e:
            batch = self._failed(t, start_ms, time.perf_counter() - t0, str(e)[:500])
        except (aiohttp.ClientError, OSError) as e:
            batch = self._failed(t, start_ms, time.perf_counter() - t0, f"{type(e).__name__}: {e}"[:500])
        else:
            batch = refused = None
            warnings: list[str] = []
            if self.pool is not None and not t.honor_labels:
                try:
                    loop = asyncio.get_running_loop()
                    encoded, samples, up, error, duration_s, refused, warnings = await loop.run_in_executor(
                        self.pool, _parse_encode, text, fmt, self.cluster, t.name, t.job, t.instance, start_ms,
                        time.perf_counter() - t0, t.labels, self.skew_s)
                except Exception as e:  # a broken pool (worker killed): parse here from now on
                    log.error("parse workers failed (%s: %s); parsing in the scraper from now on",
                              type(e).__name__, e)
                    self.pool = None
                else:
                    batch = EncodedScrapeBatch(cluster=self.cluster, target=t.name, job=t.job, instance=t.instance,
                                               scraped_at_ms=start_ms, up=up, duration_s=duration_s, error=error)
                    batch.encoded, batch.samples = encoded, samples
            if batch is None:
                batch, warnings = _parse_scrape(text, fmt, cluster=self.cluster, target=t.name, job=t.job,
                                                instance=t.instance, scraped_at_ms=start_ms,
                                                fetch_s=time.perf_counter() - t0, labels=t.labels)
                refused = split_refused(batch, start_ms, self.skew_s) if batch.up else None
                samples = len(batch.sample_value)
            for w in warnings:  # once per target and reason (native histograms, repeated timestamps)
                if (t.url, w) not in self._warned:
                    self._warned.add((t.url, w))
                    log.warning("scrape of %s (job %s): %s", t.name, t.job, w)
            if refused is not None:  # time sanity: these samples land as a dead letter with the reason
                if t.url not in self._refused_logged:  # once per target; the count is in /metrics
                    self._refused_logged.add(t.url)
                    log.warning("%s: sample(s) refused by time sanity: %s", t.name, refused.rejected)
                self.emit(refused)
            if batch.up:
                self.samples += samples
        finally:
            self._inflight.discard(t.url)
        self._health(t, batch)
        if t.honor_labels and batch.up:
            own, *others = by_own_target(batch)
            for b in (own, *others):
                self.emit(b)
            return own
        self.emit(batch)
        return batch

    def _health(self, t: Target, batch: ScrapeBatch) -> None:
        """Count and log a scrape's outcome: a failure once when it starts or its reason changes, and the recovery."""
        before = self._last_error.get(t.url)
        if batch.up and batch.error:  # broken lines refused, the others landed
            if before != batch.error:
                log.warning("scrape of %s (job %s): %s", t.name, t.job, batch.error)
            self._last_error[t.url] = batch.error
        elif batch.up:
            if before:
                log.info("scrape of %s (job %s) works again", t.name, t.job)
            self._last_error[t.url] = None
        else:
            self.failures += 1
            reason = batch.error or "failed"
            if before != reason:
                log.warning("scrape of %s (job %s) failed: %s", t.name, t.job, reason)
            self._last_error[t.url] = reason
        telemetry.scrape_done(batch, failure_kind(batch.error) if not batch.up else None, t.interval_s)

    def _failed(self, t: Target, start_ms: int, duration_s: float, error: str) -> ScrapeBatch:
        return ScrapeBatch(cluster=self.cluster, target=t.name, job=t.job, instance=t.instance,
                           scraped_at_ms=start_ms, up=False, duration_s=duration_s, error=redact(error))

    async def scrape_round(self, targets: Iterable[Target]) -> list[ScrapeBatch]:
        """Scrape all ``targets`` at once; returns their batches (already emitted) in target order."""
        out = await asyncio.gather(*(self.scrape_one(t) for t in targets))
        self.rounds += 1
        return list(out)

    async def run(self, targets: Callable[[], list[Target]], stop: asyncio.Event,
                  refresh_s: float = 60.0) -> None:
        """Scrape every target at its interval until ``stop`` is set.

        Targets are grouped by interval; each group's rounds start on a fixed grid (no drift).
        ``targets()`` is called again every ``refresh_s`` (discovery), between rounds.
        """
        current = targets()
        refreshed = time.monotonic()
        next_due: dict[float, float] = {}
        tasks: set[asyncio.Task[Any]] = set()
        while not stop.is_set():
            now = time.monotonic()
            if now - refreshed >= refresh_s:
                try:
                    current = targets()
                except Exception as e:  # keep the old targets, try again next time
                    log.warning("target refresh failed, keeping %d targets: %s", len(current), e)
                refreshed = now
            groups: dict[float, list[Target]] = {}
            for t in current:
                groups.setdefault(t.interval_s, []).append(t)
            for interval, group in groups.items():
                due = next_due.setdefault(interval, now)
                if now >= due:
                    task = asyncio.create_task(self.scrape_round(group))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    next_due[interval] = due + interval * max(1, int((now - due) // interval) + 1)
            wake = min(next_due.values(), default=now + 1.0) - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.01, min(wake, refresh_s)))
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def target_source(settings: Any, client: Any = None, failing: set[str] | None = None) -> Callable[[], list[Target]]:
    """A function returning the current targets: the static ones plus what discovery finds now.

    Validates the configuration at once (a bad entry is a ``UserError`` before any scraping).
    ``client`` (a ``collectors.k8s.client.Client``) is made from ``settings.k8s`` when discovery needs one.
    ``failing``: discovery jobs already known to fail (``run``'s summary said the server is unreachable), so the
    first failure is not said again.
    """
    from collectors.k8s.client import find_credentials
    from collectors.metrics.targets import discover, discovery_rules, static_targets
    from gangscope.errors import UserError

    static = static_targets(settings)
    found = find_credentials(settings.k8s.kubeconfig, settings.k8s.context)
    rules = discovery_rules(settings, in_cluster=found is not None and found.kind == "in-cluster")
    if not static and not rules:
        raise UserError("no metrics targets: set metrics.targets (url, job) and/or metrics.discovery (job, "
                        "label_selector, port) in the config file; see docs/collectors-metrics.md")
    if rules and client is None:
        from collectors.k8s.client import Client

        client = Client.from_config(settings.k8s.kubeconfig, settings.k8s.context)
    failing = set() if failing is None else failing

    def current() -> list[Target]:
        found = discover(rules, client, failing) if rules else []
        seen = {t.url for t in static}
        return static + [t for t in found if t.url not in seen and not seen.add(t.url)]  # type: ignore[func-returns-value]

    return current


AUTO_WORKERS_MIN_TARGETS = 100


def serve(settings: Any, emit: Emit, stop: Any, client: Any = None, refresh_s: float = 60.0,
          failing: set[str] | None = None) -> None:
    """Scrape until the ``threading.Event`` ``stop`` is set (``collect metrics``, ``run``); blocks.

    Runs its own asyncio loop in the calling thread; ``emit`` is called from that thread. With
    ``metrics.parse_workers`` (by default one per core from 100 targets on), parsing and
    encoding run in worker processes and ``emit`` gets ``EncodedScrapeBatch``es: pass a publisher's
    ``publish``, not something that reads the samples.
    """
    targets = target_source(settings, client, failing)
    workers = settings.metrics.parse_workers
    if workers is None:
        cores = os.cpu_count() or 1
        workers = cores if cores > 1 and len(targets()) >= AUTO_WORKERS_MIN_TARGETS else 0
    pool = worker_pool(workers) if workers else None

    async def main() -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()

        async def watch_stop() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.2)
            done.set()

        watcher = loop.create_task(watch_stop())
        limit = settings.metrics.max_body_bytes
        async with Scraper(settings.cluster, emit, pool=pool, max_body_bytes=limit,
                           skew_s=settings.clock_skew_s) as scraper:
            await scraper.run(targets, done, refresh_s=refresh_s)
        watcher.cancel()
        log.info("metrics collector stopped after %d rounds, %d samples, %d failed scrapes",
                 scraper.rounds, scraper.samples, scraper.failures)

    try:
        asyncio.run(main())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
