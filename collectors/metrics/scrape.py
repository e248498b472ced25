"""Concurrent scraping: every target of an interval in one asyncio round, each with its own timeout.

One process scrapes 1,000 targets every 15 s: all requests of a round are in flight at once
(aiohttp, keep-alive connections reused across rounds), each bounded by its target's
``timeout_s``, so a slow target costs only its own scrape. A target whose previous scrape
is somehow still running when its next round starts is skipped for that round (recorded as
a failed scrape), so nothing piles up. Every scrape, good or failed, yields one
``ScrapeBatch`` whose ``up``/``duration_s``/``error`` are the scrape-health record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import ssl
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import aiohttp

from collectors.metrics.parse import parse_text, to_batch
from collectors.metrics.targets import Target
from gangscope import telemetry
from gangscope.records import ScrapeBatch
from gangscope.secrets import redact
from gangscope.timesanity import DEFAULT_SKEW_S, split_refused

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 << 20
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"  # never OpenMetrics: we parse the Prometheus text format

Emit = Callable[[ScrapeBatch], None]


class EncodedScrapeBatch(ScrapeBatch):
    """A scrape whose wire form a worker process already built (``to_bytes``); no sample columns here.

    ``samples`` is the sample count. Only for emitters that publish (``collect``, ``run``).
    """

    __slots__ = ("encoded", "samples")

    def to_bytes(self) -> bytes:
        return self.encoded


def _parse_encode(text: str, cluster: str, target: str, job: str, instance: str, scraped_at_ms: int,
                  fetch_s: float, labels: dict[str, str],
                  skew_s: float = DEFAULT_SKEW_S) -> tuple[bytes, int, str | None, float, ScrapeBatch | None]:
    """Worker side: parse and encode one scrape; returns (record bytes, samples, error, duration_s, refused)."""
    t0 = time.perf_counter()
    parsed = parse_text(text)
    b = to_batch(parsed, cluster=cluster, target=target, job=job, instance=instance, scraped_at_ms=scraped_at_ms,
                 extra_labels=labels)
    refused = split_refused(b, scraped_at_ms, skew_s)
    b.duration_s = fetch_s + (time.perf_counter() - t0)
    return b.to_bytes(), len(b.sample_value), b.error, b.duration_s, refused


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


class Scraper:
    """Scrapes targets and hands each result to ``emit``; one instance per process.

    ``cluster`` is stamped on every batch. Use ``scrape_round`` for one round (bench, capture,
    tests) or ``run`` for the interval loop. With ``pool`` (see ``worker_pool``) parsing and
    encoding happen in worker processes and ``emit`` gets ``EncodedScrapeBatch``es, ready to publish.
    """

    def __init__(self, cluster: str, emit: Emit, max_connections: int = 1000,
                 pool: ProcessPoolExecutor | None = None, skew_s: float = DEFAULT_SKEW_S) -> None:
        self.cluster = cluster
        self.skew_s = skew_s
        self.emit = emit
        self.pool = pool
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._ssl: dict[Target, Any] = {}
        self._inflight: set[str] = set()
        self._refused_logged: set[str] = set()
        self.rounds = 0
        self.samples = 0
        self.failures = 0

    async def __aenter__(self) -> Scraper:
        connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300,
                                         enable_cleanup_closed=True)
        self._session = aiohttp.ClientSession(connector=connector, headers={"Accept": ACCEPT},
                                              auto_decompress=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, t: Target) -> dict[str, str] | None:
        if not t.bearer_token_file:
            return None
        # Read per scrape: projected service-account tokens rotate. Never logged.
        with open(t.bearer_token_file) as f:
            return {"Authorization": f"Bearer {f.read().strip()}"}

    async def _fetch(self, t: Target) -> str:
        assert self._session is not None, "use `async with Scraper(...)`"
        if t not in self._ssl:
            self._ssl[t] = _ssl_context(t)
        kw: dict[str, Any] = {"headers": self._headers(t), "timeout": aiohttp.ClientTimeout(total=t.timeout_s)}
        if self._ssl[t] is not None:
            kw["ssl"] = self._ssl[t]
        async with self._session.get(t.url, **kw) as resp:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status} {resp.reason or ''}".strip())
            if (resp.content_length or 0) > MAX_BODY_BYTES:
                raise RuntimeError(f"body of {resp.content_length} bytes exceeds {MAX_BODY_BYTES}")
            body = await resp.content.read(MAX_BODY_BYTES + 1)
            if len(body) > MAX_BODY_BYTES:
                raise RuntimeError(f"body exceeds {MAX_BODY_BYTES} bytes")
            return body.decode("utf-8", errors="replace")

    async def scrape_one(self, t: Target) -> ScrapeBatch:
        """Scrape, parse and emit one target; never raises (a failure is an ``up=False`` batch)."""
        start_ms = int(time.time() * 1000)
        t0 = time.perf_counter()
        if t.url in self._inflight:
            batch = self._failed(t, start_ms, 0.0, "skipped: previous scrape still running")
            self.emit(batch)
            return batch
        self._inflight.add(t.url)
        try:
            text = await self._fetch(t)
        except TimeoutError:
            batch = self._failed(t, start_ms, time.perf_counter() - t0, f"timeout after {t.timeout_s:g}s")
        except (aiohttp.ClientError, OSError, RuntimeError, UnicodeError) as e:
            batch = self._failed(t, start_ms, time.perf_counter() - t0, f"{type(e).__name__}: {e}"[:500])
        else:
            batch = refused = None
            if self.pool is not None:
                try:
                    encoded, samples, error, duration_s, refused = await asyncio.get_running_loop().run_in_executor(
                        self.pool, _parse_encode, text, self.cluster, t.name, t.job, t.instance, start_ms,
                        time.perf_counter() - t0, t.labels, self.skew_s)
                except Exception as e:  # a broken pool (worker killed): parse here from now on
                    log.error("parse workers failed (%s: %s); parsing in the scraper from now on",
                              type(e).__name__, e)
                    self.pool = None
                else:
                    batch = EncodedScrapeBatch(cluster=self.cluster, target=t.name, job=t.job, instance=t.instance,
                                               scraped_at_ms=start_ms, up=True, duration_s=duration_s, error=error)
                    batch.encoded, batch.samples = encoded, samples
            if batch is None:
                parsed = parse_text(text)
                samples, error = len(parsed), parsed.error_summary()
                batch = to_batch(parsed, cluster=self.cluster, target=t.name, job=t.job, instance=t.instance,
                                 scraped_at_ms=start_ms, duration_s=time.perf_counter() - t0, extra_labels=t.labels)
                refused = split_refused(batch, start_ms, self.skew_s)
                samples = len(batch.sample_value)
            if refused is not None:  # time sanity: these samples land as a dead letter with the reason
                if t.url not in self._refused_logged:  # once per target; the count is in /metrics
                    self._refused_logged.add(t.url)
                    log.warning("%s: sample(s) refused by time sanity: %s", t.name, refused.rejected)
                self.emit(refused)
            if error:
                log.warning("%s: broken line(s) skipped; %s", t.name, error)
            self.samples += samples
        finally:
            self._inflight.discard(t.url)
        if not batch.up:
            self.failures += 1
            log.debug("scrape of %s failed: %s", t.name, batch.error)
        telemetry.scrape_done(batch)
        self.emit(batch)
        return batch

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


def target_source(settings: Any, client: Any = None) -> Callable[[], list[Target]]:
    """A function returning the current targets: the static ones plus what discovery finds now.

    Validates the configuration at once (a bad entry is a ``UserError`` before any scraping).
    ``client`` (a ``collectors.k8s.client.Client``) is made from ``settings.k8s`` when discovery needs one.
    """
    from collectors.metrics.targets import discover, discovery_rules, static_targets
    from gangscope.errors import UserError

    static = static_targets(settings)
    rules = discovery_rules(settings)
    if not static and not rules:
        raise UserError("no metrics targets: set metrics.targets (url, job) and/or metrics.discovery (job, "
                        "label_selector, port) in the config file; see docs/collectors-metrics.md")
    if rules and client is None:
        from collectors.k8s.client import Client

        client = Client.from_config(settings.k8s.kubeconfig, settings.k8s.context)

    def current() -> list[Target]:
        found = discover(rules, client) if rules else []
        seen = {t.url for t in static}
        return static + [t for t in found if t.url not in seen and not seen.add(t.url)]  # type: ignore[func-returns-value]

    return current


AUTO_WORKERS_MIN_TARGETS = 100


def serve(settings: Any, emit: Emit, stop: Any, client: Any = None, refresh_s: float = 60.0) -> None:
    """Scrape until the ``threading.Event`` ``stop`` is set (``collect metrics``, ``run``); blocks.

    Runs its own asyncio loop in the calling thread; ``emit`` is called from that thread. With
    ``metrics.parse_workers`` (by default one per core from 100 targets on), parsing and
    encoding run in worker processes and ``emit`` gets ``EncodedScrapeBatch``es: pass a publisher's
    ``publish``, not something that reads the samples.
    """
    targets = target_source(settings, client)
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
        async with Scraper(settings.cluster, emit, pool=pool, skew_s=settings.clock_skew_s) as scraper:
            await scraper.run(targets, done, refresh_s=refresh_s)
        watcher.cancel()
        log.info("metrics collector stopped after %d rounds, %d samples, %d failed scrapes",
                 scraper.rounds, scraper.samples, scraper.failures)

    try:
        asyncio.run(main())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
