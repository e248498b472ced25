"""The live page of ``gangscope run`` (docs/page.md): ``/`` and ``/jobs/NAMESPACE/JOB`` on the telemetry server.

The page must never slow the pipeline or the builds, however often it is loaded, so requests never read the lake:

* one reader thread, at a lower CPU priority (nice 10), on one read-only lake connection limited to one DuckDB
  thread, does every read: the overview when the findings outlet wrote its state or a build rebuilt the fleet's
  marts, a job's layered check when a page asks for it and the builds changed something since it was read;
* requests (the HTTP server's worker threads) serve what it rendered last, with the freshness block (last landing,
  last build, what is behind: from this process's own telemetry) made at request time, which costs no read.

The builds call :meth:`LivePage.built` when they finish; the outlet's state file is watched by its mtime.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote

from gangscope import clock, telemetry
from gangscope.config import Settings, report_zone
from reports import localtime

log = logging.getLogger(__name__)

JOB_CACHE = 64  # job pages kept rendered
JOB_WAIT_S = 30.0  # a job page never read waits this long for its read before answering 503 (the reader is busy)
MAX_WAITING = 2  # requests waiting for a read at once; more get 503 at once (the server has 4 workers)
FLEET_EVERY_S = 15.0  # the fleet's marts are read at most this often (they change every fifth build)
RERENDER_S = 30.0  # the overview is rendered again this often anyway (durations, resolved findings ageing out)
CLOSE_S = 10.0  # close() waits this long for the reader to leave its interrupted read


class LivePage:
    """Routes of the live page, and the reader thread behind them; ``start`` before serving, ``close`` after."""

    def __init__(self, settings: Settings, build_interval_s: float | None) -> None:
        self.settings = settings
        self.build_interval_s = build_interval_s  # None: builds are off
        self.zone = report_zone(settings.report.timezone)
        self.started = time.time()
        self.generation = 0  # builds finished
        self._fleet_due = True
        self._fleet_at = 0.0
        self._fleet: Any = None  # page_data.FleetView
        self._overview: str | None = None  # the rendered #live body
        self._overview_at = 0.0
        self._state_mtime: int | None = None
        self._as_of: Any = None  # the models' newest time at the last published build (int_as_of)
        self._jobs: collections.OrderedDict[tuple[str, str], tuple[int, int, str, str | None]] = \
            collections.OrderedDict()  # (ns, job) -> (generation, status, body, kind)
        self._asked: dict[tuple[str, str], Future[None]] = {}
        self._waiting = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._con: Any = None
        self._thread: threading.Thread | None = None
        self.reads = 0  # lake reads done (tests, bench)

    # --- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> LivePage:
        self._thread = threading.Thread(target=self._run, name="gangscope-page", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the reader: its read in progress is interrupted, and its connection closed once it has left it.

        A connection closed under a running read fails that read ("No open result set"), and a thread still in
        DuckDB when the interpreter exits aborts the process; so a reader that does not stop in time keeps its
        connection, set aside unclosed (``pipeline.lake.abandon``: gangscope then exits without destructors)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            deadline = time.monotonic() + CLOSE_S
            while self._thread.is_alive() and time.monotonic() < deadline:
                con = self._con  # the read in progress, and any the reader starts before it sees the stop
                if con is not None:
                    with contextlib.suppress(Exception):
                        con.interrupt()
                self._thread.join(0.25)
            if self._thread.is_alive():
                from pipeline import lake

                log.warning("live page: the reader did not stop within %.0f s; its lake connection is left open",
                            CLOSE_S)
                if self._con is not None:
                    lake.abandon(self._con)
                    self._con = None
                return
        self._close_con()

    def built(self, rest: bool) -> None:
        """A model build finished (``rest``: the fleet's marts too): job pages are stale, the fleet maybe."""
        with self._lock:
            self.generation += 1
            self._fleet_due = self._fleet_due or rest
        self._wake.set()

    def mount(self, server: Any) -> LivePage:
        server.add_route("GET", "/", self._route_overview)
        server.add_route("GET", "/jobs/", self._route_job, prefix=True)
        return self

    # --- the reader thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # nice this thread only (Linux: a thread is a task)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while not self._stop.is_set():
            try:
                self._serve_asked()
                self._refresh_overview()
            except Exception as e:  # the page must never take the service down; the next turn tries again
                if self._stop.is_set():  # close() interrupted the read
                    break
                log.warning("live page: %s: %s", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                self._close_con()
            self._wake.wait(1.0)
            self._wake.clear()

    def _connection(self) -> Any:
        if self._con is None:
            if self._stop.is_set():  # close() is waiting for this thread: no new connection it would not see
                raise RuntimeError("the live page is closing")
            from reports.sqlshell import connect_read_only

            self._con = connect_read_only(self.settings, threads=1)
        return self._con

    def _close_con(self) -> None:
        if self._con is not None:
            with contextlib.suppress(Exception):
                from reports.lakeread import forget

                forget(self._con)
                self._con.close()
            self._con = None

    def _refresh_overview(self) -> None:
        from reports import page_data, page_html

        try:
            mtime: int | None = os.stat(self.settings.data / page_data.STATE_FILE).st_mtime_ns
        except OSError:
            mtime = None
        now = time.monotonic()
        with self._lock:
            fleet_due = self._fleet_due and now - self._fleet_at >= FLEET_EVERY_S
        if not (fleet_due or mtime != self._state_mtime or self._overview is None
                or now - self._overview_at >= RERENDER_S):
            return
        if fleet_due or self._fleet is None:
            with self._lock:
                self._fleet_due = False
            self._fleet_at = now
            self._fleet = page_data.read_fleet(self._connection(), self.settings.cluster)
            self.reads += 1
        if mtime != self._state_mtime and mtime is not None:
            # A build published its findings: the time its data reaches, read now (one small table) so that
            # "data up to" is not older than the findings listed under it (the fleet read is every 15 s at most).
            self._as_of = page_data.as_of(self._connection(), self.settings.cluster)
            self.reads += 1
        self._state_mtime = mtime
        clock_now = clock.now()
        found = page_data.published(self.settings, clock_now, self.settings.server.page_resolved_hours)
        with localtime.using(self.zone):
            self._overview = page_html.overview_body(found, self._fleet, clock_now,
                                                     self.settings.server.page_resolved_hours)
        self._overview_at = now

    def _serve_asked(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if not self._asked:
                    return
                key, fut = next(iter(self._asked.items()))
            try:
                self._read_job(*key)
                fut.set_result(None)
            except Exception as e:  # noqa: BLE001 - handed to the waiting request
                fut.set_exception(e)
                self._close_con()  # whatever state the failure left it in, the next read reconnects
            finally:
                with self._lock:
                    self._asked.pop(key, None)

    def _read_job(self, namespace: str, job: str) -> None:
        from reports import explain, page_data, page_html

        generation = self.generation
        try:
            with localtime.using(self.zone):
                jv = page_data.read_job(self._connection(), namespace, job, self.settings.cluster)
                entry = (generation, 200, page_html.job_body(jv), jv.explanation.job_kind)
        except explain.UnknownJob as e:
            entry = (generation, 404, page_html.unknown_job(namespace, job, e.closest), None)
        self.reads += 1
        with self._lock:
            self._jobs[(namespace, job)] = entry
            self._jobs.move_to_end((namespace, job))
            while len(self._jobs) > JOB_CACHE:
                self._jobs.popitem(last=False)

    # --- requests -------------------------------------------------------------------------------------------
    def _denied(self, headers: Any) -> tuple[int, dict[str, str], bytes] | None:
        """None when no credential is configured or the request carries one; else the 401 (the value never
        appears in an answer or a log line)."""
        token, basic = self.settings.server.token, self.settings.server.basic_auth
        if not token and not basic:
            return None
        scheme, _, given = (headers.get("authorization") or "").strip().partition(" ")
        given = given.strip()
        if token and scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode()):
            return None
        if basic and scheme.lower() == "basic":
            with contextlib.suppress(binascii.Error, ValueError):
                if hmac.compare_digest(base64.b64decode(given, validate=True), basic.encode()):
                    return None
        challenge = 'Basic realm="gangscope", charset="UTF-8"' if basic else 'Bearer realm="gangscope"'
        from reports.page_html import HEADERS

        return 401, {**HEADERS, "WWW-Authenticate": challenge}, (
            b"<!DOCTYPE html><title>gangscope: sign in</title><p>This page needs the credential set in "
            b"server.token or server.basic_auth.</p>")

    def freshness(self) -> Any:
        """Last landing and last build from this process's telemetry; plain sentences for what is behind."""
        from reports.page_html import Freshness

        now = time.time()
        reg = telemetry.REGISTRY
        landing = reg.get_sample_value("gangscope_last_landing_timestamp_seconds") or None
        build = reg.get_sample_value("gangscope_last_model_build_timestamp_seconds") or None
        behind = []
        up = now - self.started
        s = self.settings
        grace = max(60.0, 10 * s.pipeline.flush_seconds)
        if s.collectors and (now - landing if landing else up) > grace:
            behind.append(f"the pipeline has landed nothing for {_secs(now - landing)}." if landing else
                          f"the pipeline has landed nothing since gangscope started {_secs(up)} ago.")
        lag = sum(x.value for m in telemetry.CONSUMER_LAG.collect() for x in m.samples)
        if lag > 5 * s.pipeline.batch_records:
            behind.append(f"the pipeline is {lag:,.0f} records behind Kafka.")
        comps = telemetry.health()[1]["components"]
        assert isinstance(comps, dict)
        for name, c in comps.items():
            if not c.get("ok"):
                behind.append(f"{name}: {c.get('reason')}.")
        if self.build_interval_s is None:
            behind.append("model builds are off (schedule.models_build): findings do not change.")
        else:
            late = 3 * self.build_interval_s + 60
            if build and now - build > late:
                behind.append(f"model builds are behind: the last one finished {_secs(now - build)} ago, and they "
                              f"are scheduled every {_secs(self.build_interval_s)}.")
            elif not build and up > late:
                behind.append(f"no model build has finished since gangscope started {_secs(up)} ago.")
        seen = [t for t in (self._as_of, self._fleet.as_of if self._fleet is not None else None) if t is not None]
        return Freshness(now, landing, build, max(seen) if seen else None, behind)

    def _fresh_html(self) -> str:
        from reports import page_html

        with localtime.using(self.zone):
            return page_html.freshness(self.freshness())

    def _answer(self, headers: Any, body: str, full: Callable[[str], str], status: int = 200
                ) -> tuple[int, dict[str, str], bytes]:
        from reports import page_html

        fresh = self._fresh_html()
        query = parse_qs(headers.query)
        if query.get("live"):
            return status, {**page_html.HEADERS, "Content-Type": "application/json"}, \
                page_html.live_json(body, fresh, (query.get("v") or [""])[0])
        return status, page_html.HEADERS, full(fresh).encode()

    def _route_overview(self, body: bytes, headers: Any) -> tuple[int, dict[str, str], bytes]:
        from reports import page_html

        denied = self._denied(headers)
        if denied:
            return denied
        poll = self.settings.server.page_poll_s
        text = self._overview or "<p>Reading the findings…</p>"
        return self._answer(headers, text, lambda fresh: page_html.overview(self.settings.cluster, text, fresh, poll))

    def _route_job(self, body: bytes, headers: Any) -> tuple[int, dict[str, str], bytes]:
        from reports import page_html

        denied = self._denied(headers)
        if denied:
            return denied
        parts = headers.path[len("/jobs/"):].split("/")
        if parts and parts[-1] == "" and len(parts) == 3:
            parts.pop()
        if len(parts) != 2 or not all(parts):
            return 404, page_html.HEADERS, page_html.unknown_job(unquote(headers.path), "", []).encode()
        namespace, job = (unquote(p) for p in parts)
        live = bool(parse_qs(headers.query).get("live"))
        entry = self._job(namespace, job, wait=not live)
        if entry is None and live:  # not read yet: only the fresh block, the body stays as it is
            return 200, {**page_html.HEADERS, "Content-Type": "application/json"}, json.dumps(
                {"v": (parse_qs(headers.query).get("v") or [""])[0], "fresh": self._fresh_html(), "body": None}
            ).encode()
        if entry is None:
            return 503, {**page_html.HEADERS, "Retry-After": "5"}, page_html.shell(
                "gangscope: busy", "Busy", "<p>The page's reader is busy; try again in a few seconds.</p>", "",
                self.settings.server.page_poll_s).encode()
        _, status, text, kind = entry
        if status != 200:
            return status, page_html.HEADERS, text.encode()
        poll = self.settings.server.page_poll_s
        return self._answer(headers, text, lambda fresh: page_html.job_page(namespace, job, kind, text, fresh, poll))

    def _job(self, namespace: str, job: str, wait: bool) -> tuple[int, int, str, str | None] | None:
        """The job's rendered page. After a build it is read again in the background while the request gets what
        was read before; only a page never read makes a request wait (``wait``), and never more than
        ``MAX_WAITING`` at once: the HTTP server's few workers also answer /healthz."""
        key = (namespace, job)
        with self._lock:
            entry = self._jobs.get(key)
            if entry is not None and entry[0] == self.generation:
                return entry
            fut = self._asked.get(key)
            if fut is None:
                fut = self._asked[key] = Future()
            waits = entry is None and wait and self._waiting < MAX_WAITING
            if waits:
                self._waiting += 1
        self._wake.set()
        if not waits:
            return entry
        try:
            fut.result(timeout=JOB_WAIT_S)
        except TimeoutError:
            return None
        except Exception as e:  # noqa: BLE001 - a failed read (the reader reconnects)
            log.warning("live page: job %s/%s not read: %s", namespace, job, str(e).splitlines()[0] if str(e) else
                        type(e).__name__)
            return None
        finally:
            with self._lock:
                self._waiting -= 1
        with self._lock:
            return self._jobs.get(key)


def _secs(s: float) -> str:
    from reports.nextsteps import duration

    return duration(s)


def build_interval(settings: Settings) -> float | None:
    """Seconds between scheduled model builds (a cron schedule: between its next two runs); None when off."""
    from apscheduler.triggers.interval import IntervalTrigger

    from gangscope.app.schedule import parse_spec

    trigger = parse_spec(settings.schedule.models_build, "models_build")
    if trigger is None:
        return None
    if isinstance(trigger, IntervalTrigger):
        return trigger.interval.total_seconds()
    now = datetime.now(trigger.timezone)
    first = trigger.get_next_fire_time(None, now)
    second = trigger.get_next_fire_time(first, first + timedelta(seconds=1)) if first else None
    return (second - first).total_seconds() if first and second else None
