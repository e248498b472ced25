"""Scheduled jobs: spec validation, coalescing, no overlap, failure isolation, report retention, webhook."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from gangscope.app import schedule
from gangscope.config import ConfigError


def test_parse_spec():
    assert isinstance(schedule.parse_spec("interval:60", "x"), IntervalTrigger)
    assert isinstance(schedule.parse_spec("interval:0.5", "x"), IntervalTrigger)
    assert isinstance(schedule.parse_spec("cron:5 0 * * *", "x"), CronTrigger)
    assert schedule.parse_spec("off", "x") is None
    for bad, msg in (("interval:abc", "needs seconds"), ("interval:0", "positive"), ("cron:61 * * * *", "bad cron"),
                     ("cron:* *", "bad cron"), ("every:5", "expected"), ("60", "expected")):
        with pytest.raises(ConfigError, match=f"schedule.report_daily: .*{msg}"):
            schedule.parse_spec(bad, "report_daily")


def test_default_specs_are_valid(offline_settings):
    sched = schedule.make_scheduler(schedule.default_jobs(offline_settings))
    assert {j.id for j in sched.get_jobs()} == {"models_build", "report_hourly", "report_daily", "compaction",
                                                "retention"}
    for job in sched.get_jobs():
        assert job.coalesce is True and job.max_instances == 1


def test_slow_job_never_overlaps_itself():
    running, peak, runs = 0, 0, 0
    lock = threading.Lock()

    def slow():
        nonlocal running, peak, runs
        with lock:
            running += 1
            runs += 1
            peak = max(peak, running)
        time.sleep(0.5)
        with lock:
            running -= 1

    sched = schedule.make_scheduler({"slow": ("interval:0.1", slow)})
    sched.start()
    time.sleep(1.6)
    sched.shutdown(wait=True)
    assert peak == 1
    assert 2 <= runs <= 4  # ~1.6 s / 0.5 s per run, never the 16 the interval alone would give


def _runs_after_pause(sched, runs) -> int:
    sched.start(paused=True)
    time.sleep(1.05)  # ~10 runs of a 0.1 s interval missed while paused
    sched.resume()
    time.sleep(0.05)
    n = len(runs)
    sched.shutdown(wait=True)
    return n


def test_missed_runs_coalesce_into_one():
    from apscheduler.schedulers.background import BackgroundScheduler

    runs: list[float] = []
    ours = _runs_after_pause(schedule.make_scheduler({"tick": ("interval:0.1", lambda: runs.append(1))}), runs)
    # Control: the same job without coalescing replays every missed run at once.
    control_runs: list[float] = []
    control = BackgroundScheduler(job_defaults={"misfire_grace_time": None})
    control.add_job(lambda: control_runs.append(1), IntervalTrigger(seconds=0.1), coalesce=False, max_instances=1)
    control_n = _runs_after_pause(control, control_runs)
    assert 1 <= ours <= 2  # the coalesced run, plus at most the next regular one
    assert control_n >= 5


def test_failing_job_is_isolated_and_runs_again(caplog):
    attempts, ok = [], []

    def boom():
        attempts.append(1)
        raise RuntimeError("catalog unavailable")

    sched = schedule.make_scheduler({"boom": ("interval:0.1", boom), "fine": ("interval:0.1", lambda: ok.append(1))})
    with caplog.at_level("ERROR", logger="gangscope.app.schedule"):
        sched.start()
        time.sleep(0.75)
        sched.shutdown(wait=True)
    assert len(attempts) >= 3 and len(ok) >= 3
    assert sum("scheduled job boom failed (will run again next time): RuntimeError: catalog unavailable" in r.message
               for r in caplog.records) == len(attempts)


def test_reports_written_pruned_and_posted(report_lake, tmp_path):
    got = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server API
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = report_lake
    old = (settings.schedule.reports_dir, settings.schedule.reports_keep, settings.schedule.webhook_url)
    settings.schedule.reports_dir = str(tmp_path / "reports")
    settings.schedule.reports_keep = 2
    settings.schedule.webhook_url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        from datetime import UTC, datetime, timedelta

        base = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
        for i in range(3):
            schedule.write_reports(settings, "hourly", now=base + timedelta(hours=i))
    finally:
        settings.schedule.reports_dir, settings.schedule.reports_keep, settings.schedule.webhook_url = old
        server.shutdown()
    names = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert names == ["gangscope-hourly-20261130T010000Z.html", "gangscope-hourly-20261130T010000Z.md",
                     "gangscope-hourly-20261130T020000Z.html", "gangscope-hourly-20261130T020000Z.md"]
    assert len(got) == 3 and got[-1]["kind"] == "hourly" and "interconnect_degradation" in got[-1]["markdown"]


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t


class _State:
    def __init__(self, state: int) -> None:
        self.state = state


def test_a_build_that_overran_its_interval_is_followed_at_once(monkeypatch):
    """Not at the next tick of the old phase: the wait would add to every time to verdict."""
    from apscheduler.schedulers.base import STATE_PAUSED, STATE_RUNNING

    clock = _Clock()
    monkeypatch.setattr(schedule, "time", clock)
    lengths = [5.0, 4.0, 1.0, 9.0]  # seconds each build takes, on an interval of 3
    runs: list[float] = []

    def build() -> None:
        runs.append(clock.t)
        clock.t += lengths[len(runs) - 1]

    schedule._catch_up(_State(STATE_RUNNING), build, 3.0)()
    assert runs == [0.0, 5.0, 9.0]  # two overran, so the next came at once; the third did not: the trigger's turn
    runs.clear()
    lengths[:] = [5.0, 5.0]
    schedule._catch_up(_State(STATE_PAUSED), build, 3.0)()
    assert len(runs) == 1  # a paused scheduler (shutting down) starts no further build


def test_default_jobs_catch_up_only_on_model_builds(offline_settings):
    sched = schedule.make_scheduler(schedule.default_jobs(offline_settings))
    wrapped = {j.id: j.func.__qualname__.split(".")[0] for j in sched.get_jobs()}
    assert wrapped == {"models_build": "_catch_up", "report_hourly": "guarded", "report_daily": "guarded",
                       "compaction": "guarded", "retention": "guarded"}


def test_model_builds_keep_one_connection_and_reopen_after_a_failure(offline_settings, monkeypatch):
    """The lake is attached once, not at every build; a failed build leaves no half-used connection behind."""
    from pipeline import models

    builds = schedule.ModelBuilds(offline_settings)
    seen, fail = [], [False]
    real = schedule.build_models

    def recording(settings, outlet=None, con=None, rest=True):
        seen.append(con)
        if fail[0]:
            fail[0] = False
            raise RuntimeError("catalog unavailable")
        return real(settings, outlet, con, rest)

    monkeypatch.setattr(schedule, "build_models", recording)
    try:
        builds()  # the first build of an empty lake: every model
        assert not models.is_stale(offline_settings, seen[0])
        builds()
        assert seen[1] is seen[0]
        fail[0] = True
        with pytest.raises(RuntimeError):
            builds()
        assert builds.con is None
        builds()
        assert seen[3] is not None and seen[3] is not seen[0]
        assert seen[3].execute("SELECT count(*) FROM marts.findings").fetchone() == (0,)
    finally:
        builds.close()


def test_scheduled_builds_publish_findings_every_time_and_the_other_marts_every_fifth_interval(
        offline_settings, monkeypatch):
    """With findings to publish, every scheduled build builds and publishes the findings, but the marts no
    finding reads only once ``REST_EVERY`` intervals passed since they were last built; the lake stays stale
    meanwhile, so ``diagnose``'s own build (only_stale) would complete them. Snapshots older than
    ``compaction.KEEP`` (0 here) expire with the rest, not at every build."""
    import dataclasses
    from datetime import timedelta

    from pipeline import compaction, lake, land, models
    from tests.pipeline.helpers import pod_event

    settings = dataclasses.replace(offline_settings, schedule=dataclasses.replace(
        offline_settings.schedule, models_build="interval:10"))
    assert schedule.rest_every_s(settings.schedule.models_build) == 10 * schedule.REST_EVERY
    assert schedule.rest_every_s("cron:*/5 * * * *") == 0.0

    class Outlet:
        ticks = 0

        def tick(self, rows):
            self.ticks += 1
            return []

    now = [1000.0]
    monkeypatch.setattr(schedule.time, "monotonic", lambda: now[0])
    built: list[set[str]] = []
    kept: list[set[str]] = []
    real = schedule.build_models

    def recording(*a, **k):
        stats = real(*a, **k)
        built.append(set(stats.per_model_s) | set(stats.kept))  # kept: looked at, nothing new to read
        kept.append(set(stats.kept))
        return stats

    monkeypatch.setattr(schedule, "build_models", recording)
    monkeypatch.setattr(compaction, "KEEP", timedelta(0))
    con = lake.connect(settings)

    def snapshots() -> int:
        return con.execute("SELECT count(*) FROM ducklake_snapshots(?)", [lake.ALIAS]).fetchone()[0]
    outlet = Outlet()
    builds = schedule.ModelBuilds(settings, outlet)
    rest = {"marts.node_health", "marts.queue_health", "staging.stg_scrape_health"}
    try:
        builds()  # the first build: everything
        assert outlet.ticks == 1 and rest <= built[-1] and "marts.findings" in built[-1]
        assert not models.is_stale(settings, con)
        assert snapshots() == 1  # only the newest survives a keep of 0
        for i in range(1, 5):  # four more intervals, something landed before each
            land.land(con, [("gs.k8s", 0, i, pod_event(i).to_bytes())])
            now[0] += 10
            builds()
            assert outlet.ticks == 1 + i and "marts.findings" in built[-1] and not rest & built[-1]
            assert models.is_stale(settings, con)  # diagnose would build the rest itself
        assert snapshots() == 1 + 2 * 4  # a landing and a build each interval, none expired
        now[0] += 10  # five intervals since the rest was built
        builds()
        assert outlet.ticks == 6 and rest <= built[-1] and "marts.findings" in built[-1]
        assert "staging.stg_scrape_health" in kept[-1] and "marts.node_health" not in kept[-1]  # only pods landed
        assert not models.is_stale(settings, con)
        assert snapshots() == 1
    finally:
        builds.close()
        con.close()
