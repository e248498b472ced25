"""Scheduled jobs of ``gangscope run`` (APScheduler 3.x): model builds, reports, compaction, retention.

Every job is added with ``coalesce=True`` (runs missed while the process was busy or asleep
collapse into one) and ``max_instances=1`` (a slow job never overlaps itself). A job that
fails is logged and counted, and simply runs again at its next time; the others never notice.
Spec strings (``settings.schedule``): ``interval:SECONDS``, ``cron:MIN HOUR DOM MON DOW`` (UTC),
or ``off``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_RUNNING
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from gangscope.config import ConfigError, Settings
from gangscope.secrets import redact, redact_url, split_userinfo

log = logging.getLogger(__name__)


def parse_spec(spec: str | None, name: str) -> BaseTrigger | None:
    """``interval:60`` / ``cron:0 * * * *`` / ``off`` -> a trigger (None when off); errors name the setting."""
    text = (spec or "").strip()
    if text.lower() in ("", "off", "none", "disabled"):
        return None
    kind, _, arg = text.partition(":")
    kind, arg = kind.strip().lower(), arg.strip()
    if kind == "interval":
        try:
            seconds = float(arg)
        except ValueError:
            raise ConfigError(f"schedule.{name}: interval needs seconds, e.g. 'interval:60', got {spec!r}") from None
        if seconds <= 0:
            raise ConfigError(f"schedule.{name}: interval must be positive, got {spec!r}")
        return IntervalTrigger(seconds=seconds, timezone=UTC)
    if kind == "cron":
        try:
            return CronTrigger.from_crontab(arg, timezone=UTC)
        except ValueError as e:
            raise ConfigError(f"schedule.{name}: bad cron expression {arg!r} ({e}); "
                              "use 5 fields: minute hour day-of-month month day-of-week") from None
    raise ConfigError(f"schedule.{name}: expected 'interval:SECONDS', 'cron:MIN HOUR DOM MON DOW' or 'off', "
                      f"got {spec!r}")


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _count(job: str, ok: bool, seconds: float) -> None:
    """gangscope's own metrics for the jobs that have one (docs/deploy.md names them)."""
    telemetry = _optional("gangscope.telemetry")
    if telemetry is None:
        return
    try:
        if job == "models_build":
            if ok:
                telemetry.MODEL_BUILD_SECONDS.observe(seconds)
                telemetry.LAST_BUILD.set(time.time())
            else:
                telemetry.MODEL_BUILD_FAILURES.inc()
        elif job.startswith("report_") and ok:
            telemetry.LAST_REPORT.set(time.time())
    except AttributeError:  # an older telemetry module: metrics are optional
        pass


def _problem(job: str, reason: str | None, outage: bool = False) -> None:
    """A failing model build makes /healthz fail with the reason until a build succeeds; one that failed because
    the lake's object store or catalog is away makes it degraded instead (a restart would not help)."""
    telemetry = _optional("gangscope.telemetry")
    if telemetry is not None and job == "models_build":
        if outage:
            telemetry.degraded(job, reason)
        else:
            telemetry.problem(job, reason)
            telemetry.degraded(job, None)


def _outage(e: BaseException) -> bool:
    """The lake's object store or catalog is unreachable (pipeline.lake.is_unavailable)."""
    lake = _optional("pipeline.lake")
    return bool(lake is not None and lake.is_unavailable(e))


def guarded(name: str, fn: Callable[[], Any]) -> Callable[[], None]:
    """Run ``fn``; log a failure as one line (traceback at debug) instead of raising."""

    def run() -> None:
        t = time.monotonic()
        try:
            fn()
        except Exception as e:
            outage = _outage(e)
            text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if outage:
                log.warning("scheduled job %s could not reach the lake's storage or catalog (will run again next "
                            "time): %s", name, text)
            else:
                log.error("scheduled job %s failed (will run again next time): %s: %s", name, type(e).__name__, e)
            log.debug("scheduled job %s traceback", name, exc_info=True)
            _count(name, False, time.monotonic() - t)
            _problem(name, f"last run failed: {text}", outage=outage)
            return
        _problem(name, None)
        log.debug("scheduled job %s done in %.2fs", name, time.monotonic() - t)
        _count(name, True, time.monotonic() - t)

    run.__name__ = name
    return run


# --- the jobs ---------------------------------------------------------------------------------


def build_models(settings: Settings, outlet: Any = None, con: Any = None, rest: bool = True) -> Any:
    """Build what is stale and publish the findings' changes through ``outlet`` (reports.lifecycle) as soon
    as the findings are built, before the marts nobody is waiting for (time to verdict, docs/sandbox.md);
    ``rest=False`` leaves those marts for a later build. The build's stats."""
    from pipeline import models

    if outlet is None:
        return models.build(settings, con, only_stale=True)
    from reports.lifecycle import publish_after_build

    return models.build(settings, con, only_stale=True, first=("marts.findings", "marts.jobs"),
                        then=lambda c: publish_after_build(settings, outlet, c), rest=rest)


REST_EVERY = 5  # the marts no finding reads are rebuilt every this many build intervals (findings every one)


def rest_every_s(spec: str | None) -> float:
    """How often the scheduled build also rebuilds the marts no finding reads: ``REST_EVERY`` intervals of an
    ``interval:`` schedule; every build for a cron schedule (its runs are far apart anyway)."""
    trigger = parse_spec(spec, "models_build")
    return REST_EVERY * trigger.interval.total_seconds() if isinstance(trigger, IntervalTrigger) else 0.0


class ModelBuilds:
    """The scheduled model build, on one lake connection kept from build to build (reopened after a failure).

    Attaching the lake took ~1 s per build on a busy 2-core machine: at the sandbox's 10x, 10 simulated
    seconds of every time to verdict. Builds never overlap (``max_instances=1``), so one connection serves.
    With findings to publish, the marts no finding reads (node_health, queue_health, ...: a fifth of a build)
    are rebuilt only every ``REST_EVERY`` intervals: every build holds landings back while it commits, and the
    next findings wait for it (docs/sandbox.md, time to verdict).
    """

    def __init__(self, settings: Settings, outlet: Any = None, after: Callable[[bool], None] | None = None) -> None:
        self.settings, self.outlet, self.after = settings, outlet, after  # after(rest built) of each build
        self.con: Any = None
        self.rest_every_s = rest_every_s(settings.schedule.models_build)
        self.rest_at: float | None = None  # when the last build that included the rest began

    def __call__(self) -> None:
        from pipeline import lake

        if self.con is None:
            self.con = lake.connect(self.settings)
        started = time.monotonic()
        rest = self.rest_at is None or started - self.rest_at >= self.rest_every_s
        try:
            stats = build_models(self.settings, self.outlet, self.con, rest=rest)
            if rest and stats is not None and stats.models:
                self.rest_at = started
                self.expire()
        except BaseException:
            self.close()  # whatever state the failure left the connection in, the next build starts afresh
            raise
        if self.after is not None:
            self.after(rest)

    def expire(self) -> None:
        """Expire old snapshots with the rest of the marts: the history every build adds slows the next ones
        (pipeline.compaction.KEEP); compaction's own schedule is too seldom for that."""
        from pipeline import compaction

        try:
            compaction.expire(self.con)
        except Exception as e:  # the build itself succeeded; the next one tries again
            log.warning("expiring old snapshots failed: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)

    def close(self) -> None:
        if self.con is not None:
            with contextlib.suppress(Exception):
                self.con.close()
            self.con = None


def reports_dir(settings: Settings) -> Path:
    return Path(settings.schedule.reports_dir) if settings.schedule.reports_dir else settings.data / "reports"


def prune(directory: Path, pattern: str, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` files matching ``pattern``; returns what was deleted."""
    files = sorted(directory.glob(pattern), key=lambda p: p.name, reverse=True)  # names carry UTC times
    gone = files[keep:] if keep > 0 else []
    for p in gone:
        p.unlink(missing_ok=True)
    return gone


def post_webhook(url: str, payload: dict[str, Any], timeout_s: float = 10.0) -> None:
    """POST ``payload``; ``user:password@`` in the URL is sent as basic auth (never as part of the host name),
    and errors name the URL without its credentials."""
    target, auth = split_userinfo(url)
    headers = {"Content-Type": "application/json", "User-Agent": "gangscope"}
    if auth:
        headers["Authorization"] = auth
    req = urllib.request.Request(target, data=json.dumps(payload).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - URL from the operator's config
            if resp.status >= 300:
                raise RuntimeError(f"webhook {redact_url(url)} answered HTTP {resp.status}")
    except (OSError, ValueError) as e:  # urllib's errors may quote the URL
        raise RuntimeError(f"webhook {redact_url(url)} failed: {redact(str(e))}") from None


def write_reports(settings: Settings, kind: str, now: datetime | None = None) -> list[Path]:
    """The ``kind`` (hourly|daily) report as HTML and Markdown, pruned to ``reports_keep``, optionally posted."""
    from reports.report import write_report

    now = now or datetime.now(UTC)
    directory = reports_dir(settings)
    stamp = f"{now:%Y%m%dT%H%M%SZ}"
    paths = [write_report(settings, fmt, directory / f"gangscope-{kind}-{stamp}.{fmt}", kind=kind)
             for fmt in ("html", "md")]
    for ext in ("html", "md"):
        prune(directory, f"gangscope-{kind}-*.{ext}", settings.schedule.reports_keep)
    if settings.schedule.webhook_url:
        post_webhook(settings.schedule.webhook_url, {
            "source": "gangscope", "kind": kind, "cluster": settings.cluster, "generated_at": stamp,
            "html_path": str(paths[0]), "markdown": paths[1].read_text(encoding="utf-8")})
    return paths


def compact(settings: Settings) -> None:
    compaction = _optional("pipeline.compaction")
    if compaction is None:
        log.debug("compaction skipped: pipeline.compaction is not available")
        return
    from pipeline import lake

    con = lake.connect(settings)
    try:
        compaction.compact(con)
    finally:
        con.close()


def apply_retention(settings: Settings) -> None:
    retention = _optional("pipeline.retention")
    if retention is None:
        log.debug("retention skipped: pipeline.retention is not available")
        return
    retention.apply(settings)


def default_jobs(settings: Settings, outlet: Any = None, builds: ModelBuilds | None = None
                 ) -> dict[str, tuple[str, Callable[[], Any]]]:
    """name -> (spec, function) for every job of ``settings.schedule``; model builds publish through ``outlet``
    (or run as ``builds``, whose connection the caller closes)."""
    s = settings.schedule
    return {
        "models_build": (s.models_build, builds or ModelBuilds(settings, outlet)),
        "report_hourly": (s.report_hourly, lambda: write_reports(settings, "hourly")),
        "report_daily": (s.report_daily, lambda: write_reports(settings, "daily")),
        "compaction": (s.compaction, lambda: compact(settings)),
        "retention": (s.retention, lambda: apply_retention(settings)),
    }


# Interval jobs whose run, when it took longer than the interval, is followed at once by the next one. Left
# to the trigger, the next run waited for the next tick of the old phase: half an interval on average, added
# to every time to verdict while builds take longer than their interval.
CATCH_UP = ("models_build",)


def _catch_up(scheduler: BackgroundScheduler, fn: Callable[[], None], interval_s: float) -> Callable[[], None]:
    """``fn`` again and again while each run overran ``interval_s`` and the scheduler runs (not paused)."""

    def run() -> None:
        while True:
            t = time.monotonic()
            fn()
            if time.monotonic() - t < interval_s or scheduler.state != STATE_RUNNING:
                return

    run.__name__ = getattr(fn, "__name__", "job")
    return run


def make_scheduler(jobs: dict[str, tuple[str, Callable[[], Any]]]) -> BackgroundScheduler:
    """A scheduler (not started) with every job that is not ``off``; specs are validated first."""
    triggers = {name: parse_spec(spec, name) for name, (spec, _) in jobs.items()}
    scheduler = BackgroundScheduler(
        timezone=UTC, job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None})
    for name, (_, fn) in jobs.items():
        trigger = triggers[name]
        if trigger is None:
            log.debug("scheduled job %s is off", name)
            continue
        job = guarded(name, fn)
        if name in CATCH_UP and isinstance(trigger, IntervalTrigger):
            job = _catch_up(scheduler, job, trigger.interval.total_seconds())
        scheduler.add_job(job, trigger, id=name, name=name, coalesce=True, max_instances=1,
                          misfire_grace_time=None)
    # "maximum number of running instances reached" is the no-overlap rule working, not news; at --log-level debug
    # every line is kept (the jobs added, the scheduler started).
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
        logging.getLogger("apscheduler.executors.default").setLevel(logging.WARNING)
    return scheduler
