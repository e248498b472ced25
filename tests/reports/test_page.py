"""The live page over a small hostile lake (tests/reports/lakefix.py) on a real telemetry server: what it lists,
how it escapes, the job pages as `gangscope explain` sees the job, the poll, credentials, no write action, what it
says is behind, and that requests never read the lake. The page against `gangscope run` on the sandbox, in
Chromium, is tests/e2e/test_live_page.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gangscope import clock, config, telemetry
from gangscope.app.page import LivePage, build_interval
from pipeline import lake
from reports import diagnose, explain, lifecycle, page_html
from reports.lakeread import forget
from tests.reports import lakefix
from tests.servers import chromium

TOKEN = "pAge-t0ken-S3cret"


def _state(settings: config.Settings) -> dict[str, Any]:
    """The outlet's state after one build over the lake, plus two resolved findings: 1 h and 10 h ago."""
    con = lake.connect(settings, read_only=True)
    try:
        rows = diagnose.findings(con)
    finally:
        con.close()
    now = clock.now()
    state: dict[str, Any] = {}
    lifecycle.diff(state, rows, now)
    llama = next(r for r in rows if r["job"] == "llama-a")
    for fid, hours in (("recent0000000001", 1), ("old0000000000001", 10)):
        ended = lifecycle._rfc3339(now - timedelta(hours=hours))
        state[fid] = {"state": "resolved", "finding": {**llama, "started_at": ended, "ended_at": ended,
                                                       "root_cause": "preemption"}}
    return state


@pytest.fixture(scope="module")
def page_settings(tmp_path_factory: pytest.TempPathFactory) -> config.Settings:
    """The report tests' lake (lakefix: hostile names), with the outlet's state beside it."""
    data = tmp_path_factory.mktemp("page") / "data"
    settings = config.load(overrides={"data": str(data), "collectors": []}, environ={})
    con = lake.connect(settings)
    lakefix.build(con)
    con.close()
    (data / lifecycle.STATE_FILE).write_text(json.dumps(_state(settings)))
    return settings


class Served:
    def __init__(self, settings: config.Settings, interval: float | None = 60.0) -> None:
        self.server = telemetry.start_http_server("127.0.0.1:0")
        self.page = LivePage(settings, interval).start().mount(self.server)
        self.url = self.server.url
        deadline = time.monotonic() + 60
        while self.page._overview is None or self.page._fleet is None:
            assert time.monotonic() < deadline, "the page's first read took over 60 s"
            time.sleep(0.1)

    def get(self, path: str, headers: dict[str, str] | None = None, method: str = "GET"
            ) -> tuple[int, Any, str]:
        req = urllib.request.Request(self.url + path, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    def close(self) -> None:
        self.page.close()
        self.server()


@pytest.fixture(scope="module")
def served(page_settings: config.Settings) -> Iterator[Served]:
    s = Served(page_settings)
    yield s
    s.close()


def _open_findings(settings: config.Settings) -> dict[str, dict[str, Any]]:
    state = json.loads((settings.data / lifecycle.STATE_FILE).read_text())
    return {fid: e["finding"] for fid, e in state.items() if e["state"] == "open"}


def test_overview_lists_open_findings_with_next_steps_then_recent_resolved_escaped(served, page_settings) -> None:
    status, headers, text = served.get("/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "connect-src 'self'" in csp
    assert headers["Cache-Control"] == "no-store" and headers["X-Content-Type-Options"] == "nosniff"
    opened = _open_findings(page_settings)
    assert opened and len(opened) == text.count('<article class="finding"')
    for fid, f in opened.items():
        article = text[text.index(f'data-finding-id="{fid}"'):]
        article = article[:article.index("</article>")]
        assert page_html.esc(f["summary"]) in article and page_html.esc(f["root_cause"]) in article
        step = f["next_steps"][0]
        assert f"$ {page_html.esc(step['check'])}</pre>" in article and page_html.esc(step["action"]) in article
        assert f'href="{page_html.esc(page_html.job_href(f["namespace"], f["job"]))}"' in article
    # Worst first: every critical before every warning.
    sev = re.findall(r'<span class="badge (critical|warning|info)">', text)
    assert sev == sorted(sev, key=["critical", "warning", "info"].index)
    # Resolved: the one that ended an hour ago, not the one of 10 h ago, after the open ones.
    assert text.index('id="open"') < text.index('id="resolved"') < text.index('id="fleet"')
    resolved = text[text.index('id="resolved"'):text.index('id="fleet"')]
    assert 'data-finding-id="recent0000000001"' in resolved and "old0000000000001" not in text
    # Hostile names are text: escaped, and one path segment each in links.
    assert lakefix.EVIL_JOB not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert 'href="jobs/team-b/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"' in text
    assert "<svg onload" not in text and "gpu-node-&lt;b&gt;7&lt;/b&gt;" in text
    # One script: the page's own, allowed by its hash; nothing that writes.
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    assert scripts == [page_html.SCRIPT]
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp and csp.count("script-src") == 1 and "unsafe-inline' ; script" not in csp
    for tag in ("<form", "<button", "<input", "<textarea", "<link", "<img", "<iframe", 'http-equiv="refresh"'):
        assert tag not in text.lower()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_the_poll_answers_only_what_changed(served, page_settings) -> None:
    _, _, text = served.get("/")
    v = re.search(r'data-v="([0-9a-f]+)"', text)[1]
    status, headers, same = served.get(f"/?live=1&v={v}")
    assert status == 200 and headers["Content-Type"] == "application/json"
    got = json.loads(same)
    assert got["body"] is None and got["v"] == v and "Last landing" in got["fresh"]
    assert json.loads(served.get("/?live=1&v=old")[2])["body"].startswith('<section id="open">')
    # A finding the outlet opens shows in the next poll's body (the reader watches the state file).
    path = page_settings.data / lifecycle.STATE_FILE
    before = path.read_text()
    state = json.loads(before)
    new = dict(next(e["finding"] for e in state.values() if e["state"] == "open"), job="brand-new-job")
    state["new0000000000001"] = {"state": "open", "finding": new}
    try:
        path.write_text(json.dumps(state))
        deadline = time.monotonic() + 30
        while True:
            body = json.loads(served.get(f"/?live=1&v={v}")[2])["body"]
            if body and 'data-finding-id="new0000000000001"' in body:
                break
            assert time.monotonic() < deadline, "the opened finding never reached the poll"
            time.sleep(0.2)
        assert "brand-new-job" in body
    finally:
        path.write_text(before)


def test_a_job_page_is_explains_layered_check(served, page_settings) -> None:
    con = lake.connect(page_settings, read_only=True)
    try:
        expected = {k: explain.explain(con, k) for k in ("team-a/llama-a", "team-b/bert-d",
                                                         f"team-b/{lakefix.EVIL_JOB}")}
    finally:
        forget(con)
        con.close()
    for key, e in expected.items():
        ns, job = key.split("/", 1)
        status, _, text = served.get(f"/{page_html.job_href(ns, job)}")
        assert status == 200, text
        rows = re.findall(r'<tr class="v-row-[a-z-]+" data-layer="([a-z]+)" data-verdict="([a-z ]+)">', text)
        assert rows == [(layer.key, layer.verdict) for layer in e.layers]
        for layer in e.layers:
            assert page_html.esc(layer.summary) in text
        assert page_html.esc(explain.facts_line(e)) in text and page_html.esc(explain.verdict_line(e)) in text
        flagged = [x for x in e.findings if x["root_cause"] != "healthy"]
        assert text.count('<article class="finding"') == len(flagged)
        for x in flagged:
            assert page_html.esc(explain.finding_line(x)) in text
            for s in x["next_steps"]:
                assert f"$ {page_html.esc(s['check'])}</pre>" in text
        assert '<section id="timeline">' in text
        assert lakefix.EVIL_JOB not in text
    # llama-a: throughput, its worst node's bandwidth and its GPUs on one time axis; a healthy job has a chart too.
    llama = served.get("/jobs/team-a/llama-a")[2]
    assert "NVLink on gpu-node-1" in llama and llama.count("<svg") == 2
    healthy = served.get("/jobs/team-b/bert-d")[2]
    assert "no finding" in healthy and "<svg" in healthy
    evil = served.get(f"/{page_html.job_href('team-b', lakefix.EVIL_JOB)}")[2]
    assert "<title>gangscope: team-b/&lt;script&gt;alert(1)&lt;/script&gt;" in evil
    assert re.findall(r"<script>(.*?)</script>", evil, re.S) == [page_html.SCRIPT]
    # A name the lake does not hold: 404, with the closest names as links.
    status, _, text = served.get("/jobs/team-a/llama-aa")
    assert status == 404 and 'href="../../jobs/team-a/llama-a"' in text
    assert served.get("/jobs/team-a")[0] == 404 and served.get("/jobs/a/b/c")[0] == 404


def test_requests_never_read_the_lake_only_builds_do(served) -> None:
    served.get("/jobs/team-b/bert-c")
    reads = served.page.reads
    for _ in range(10):
        assert served.get("/jobs/team-b/bert-c")[0] == 200
        assert served.get("/jobs/team-b/bert-c?live=1&v=x")[0] == 200
        assert served.get("/")[0] == 200
    assert served.page.reads == reads
    served.page.built(rest=False)  # a build finished: the open page is read once more, in the background
    assert served.get("/jobs/team-b/bert-c")[0] == 200  # what was read before, at once
    deadline = time.monotonic() + 60
    while served.page.reads == reads:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1.5)
    assert served.page.reads == reads + 1


def test_data_up_to_is_read_again_when_a_build_publishes(page_settings) -> None:
    """"data up to" must not be older than the findings listed under it: the models' newest time is read again when
    a build publishes (the state file changes), not only with the fleet (every 15 s at most, after fleet builds)."""
    import os

    # This lake's marts are written directly (lakefix): the models' clock is made for the test, then removed.
    newest = clock.now().replace(microsecond=0) - timedelta(minutes=3)
    con = lake.connect(page_settings)
    con.execute("CREATE SCHEMA IF NOT EXISTS intermediate")
    con.execute("CREATE TABLE intermediate.int_as_of AS SELECT ? AS cluster, ?::TIMESTAMPTZ AS as_of",
                [page_settings.cluster, newest])
    own = Served(page_settings)
    try:
        assert own.page.freshness().data_as_of == newest
        own.page._as_of = None  # forgotten: only a publish brings it back
        reads = own.page.reads
        state = page_settings.data / lifecycle.STATE_FILE
        os.utime(state, ns=(time.time_ns(), time.time_ns() + 10**9))
        deadline = time.monotonic() + 30
        while own.page._as_of is None:
            assert time.monotonic() < deadline, "the publish was not noticed"
            time.sleep(0.1)
        assert own.page._as_of == newest and own.page.freshness().data_as_of == newest
        assert own.page.reads == reads + 1  # one small read, no fleet read
    finally:
        own.close()
        con.execute("DROP TABLE intermediate.int_as_of")
        con.close()


def test_deep_links_survive_a_restart(page_settings, served) -> None:
    path = f"/{page_html.job_href('team-b', lakefix.EVIL_JOB)}"
    before = served.get(path)
    again = Served(page_settings)
    try:
        after = again.get(path)
    finally:
        again.close()
    assert before[0] == after[0] == 200
    assert re.findall(r'data-layer="[a-z]+" data-verdict="[a-z ]+"', before[2]) == \
        re.findall(r'data-layer="[a-z]+" data-verdict="[a-z ]+"', after[2])


def test_nothing_on_it_writes(served) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/", "/jobs/team-a/llama-a"):
            status, headers, _ = served.get(path, method=method)
            assert status == 405 and headers["Allow"] == "GET", (method, path)


def test_a_token_or_basic_auth_is_required_when_set(page_settings, caplog) -> None:
    settings = replace(page_settings, server=replace(page_settings.server, token=TOKEN, basic_auth=f"ops:{TOKEN}x"))
    caplog.set_level("DEBUG")
    s = Served(settings)
    try:
        basic = "Basic " + base64.b64encode(f"ops:{TOKEN}x".encode()).decode()
        answers = []
        for path in ("/", "/jobs/team-a/llama-a", "/?live=1"):
            for auth, want in ((None, 401), ("Bearer wrong", 401), (f"Bearer {TOKEN}", 200), (basic, 200),
                               ("Basic " + base64.b64encode(b"ops:wrong").decode(), 401), (f"Basic {TOKEN}", 401),
                               (f"bearer  {TOKEN} ", 200), ("Basic !!!", 401)):
                status, headers, text = s.get(path, {"Authorization": auth} if auth else {})
                assert status == want, (path, auth, status)
                answers.append(text + str(dict(headers)))
                if want == 401:
                    assert headers["WWW-Authenticate"].startswith("Basic realm=")
        # Probes and Prometheus need no credential.
        assert s.get("/healthz")[0] in (200, 503) and s.get("/metrics")[0] == 200
    finally:
        s.close()
    text = " ".join(answers) + caplog.text
    assert TOKEN not in text and base64.b64encode(f"ops:{TOKEN}x".encode()).decode() not in text
    only_token = replace(page_settings, server=replace(page_settings.server, token=TOKEN))
    s = Served(only_token)
    try:
        status, headers, _ = s.get("/")
        assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="gangscope"'
    finally:
        s.close()


def test_the_settings_refuse_a_bad_basic_auth_without_echoing_it() -> None:
    with pytest.raises(config.ConfigError) as e:
        config.load(environ={"GANGSCOPE_SERVER_BASIC_AUTH": "no-colon-S3cret"})
    assert "server.basic_auth" in str(e.value) and "S3cret" not in str(e.value)
    s = config.load(environ={"GANGSCOPE_SERVER_TOKEN": TOKEN, "GANGSCOPE_SERVER_PAGE": "false"})
    assert s.server.token == TOKEN and s.server.page is False


def test_freshness_says_plainly_what_is_behind(page_settings, monkeypatch: pytest.MonkeyPatch) -> None:
    # This process's own components only: a collector another test in this worker ran left its heartbeat behind.
    for registry in ("_beats", "_problems", "_degraded"):
        monkeypatch.setattr(telemetry, registry, {})
    page = LivePage(replace(page_settings, collectors=["k8s"]), 60.0)
    now = time.time()
    saved = {g: g._value.get() for g in (telemetry.LAST_BUILD, telemetry.LAST_LANDING)}
    try:
        telemetry.LAST_BUILD.set(now - 5)
        telemetry.LAST_LANDING.set(now - 1)
        assert page.freshness().behind == []
        text = page_html.freshness(page.freshness())
        assert "keeping up" in text and "Last landing 1 s ago" in text
        telemetry.LAST_BUILD.set(now - 1000)
        telemetry.LAST_LANDING.set(now - 400)
        behind = page.freshness().behind
        assert any(s.startswith("model builds are behind: the last one finished 17 min ago") for s in behind)
        assert "the pipeline has landed nothing for 7 min." in behind
        telemetry.problem("models_build", "last run failed: IOError: disk full")
        assert "models_build: last run failed: IOError: disk full." in page.freshness().behind
        assert '<p class="behind"><b>Behind:</b> models_build: last run failed' in \
            page_html.freshness(page.freshness())
        off = LivePage(page_settings, None)
        assert "model builds are off (schedule.models_build): findings do not change." in off.freshness().behind
    finally:
        telemetry.problem("models_build", None)
        for g, v in saved.items():
            g.set(v)


def _reading(page: LivePage, read: Any) -> Any:
    """``page`` with its reader started on ``read`` (in place of a job's read) for a job a request asked for."""
    from concurrent.futures import Future

    started = __import__("threading").Event()

    def job(namespace: str, name: str) -> None:
        started.set()
        read()

    page._read_job = job  # type: ignore[method-assign]
    page._asked[("team-a", "stuck")] = Future()
    page.start()
    assert started.wait(60), "the reader never started the read"
    return page


def test_close_interrupts_a_read_in_progress_and_closes_after_it(page_settings, caplog) -> None:
    """Stopping `gangscope run` under a long page read: the read is interrupted and the connection closed only once
    the reader left it (CI, 7 Dec: closed under the read, "No open result set", then the process aborted at exit)."""
    page = LivePage(page_settings, 60.0)
    seen: list[Any] = []

    def read() -> None:
        con = page._connection()
        seen.append(con)
        con.execute("SELECT count(*) FROM range(100000000000) a").fetchall()  # minutes on one thread

    _reading(page, read)
    time.sleep(0.5)  # inside DuckDB now
    page.close()
    assert page._thread is not None and not page._thread.is_alive()
    assert page._con is None and seen and not lake.abandoned()
    with pytest.raises(Exception, match="closed"):
        seen[0].execute("SELECT 1")
    assert not [r for r in caplog.records if r.levelname == "WARNING"], "a stop is not a failure of the page"


def test_a_reader_that_does_not_stop_keeps_its_connection_open(page_settings, monkeypatch) -> None:
    """A reader still busy past the wait (outside DuckDB, where no interrupt reaches): its connection is set aside,
    not closed under it, so `gangscope` exits without destructors (pipeline.lake.abandon)."""
    import threading

    from gangscope.app import page as page_mod

    monkeypatch.setattr(page_mod, "CLOSE_S", 0.5)
    monkeypatch.setattr(lake, "_ABANDONED", [])
    release, connected = threading.Event(), threading.Event()
    page = LivePage(page_settings, 60.0)

    def read() -> None:
        page._connection().execute("SELECT 1").fetchall()
        connected.set()
        release.wait(60)

    _reading(page, read)
    assert connected.wait(60)
    page.close()
    try:
        assert page._thread is not None and page._thread.is_alive()
        assert lake.abandoned() and page._con is None
        assert lake._ABANDONED[0].execute("SELECT 42").fetchone() == (42,)  # open still
    finally:
        release.set()
        page._thread.join(60)
        lake._ABANDONED[0].close()


def test_build_interval_of_each_schedule_kind(page_settings) -> None:
    def interval(spec: str) -> float | None:
        return build_interval(replace(page_settings, schedule=replace(page_settings.schedule, models_build=spec)))

    assert interval("interval:60") == 60 and interval("off") is None and interval("cron:*/5 * * * *") == 300


@pytest.mark.timeout(300)
def test_in_chromium_the_script_runs_the_page_fits_360_px_and_hostile_names_stay_text(served, tmp_path) -> None:
    fast = Served(replace(served.page.settings, server=replace(served.page.settings.server, page_poll_s=1)))
    browser = chromium.Chromium(tmp_path / "chromium")
    try:
        tab = browser.tab()
        for width in (1280, 360):
            tab.width(width)
            for name, path in (("overview", "/"), ("evil-job", f"/{page_html.job_href('team-b', lakefix.EVIL_JOB)}"),
                               ("job", "/jobs/team-a/llama-a")):
                assert tab.navigate(fast.url + path) == 200
                assert tab.eval("document.documentElement.scrollWidth") <= width, (name, width)
                assert tab.eval("document.querySelectorAll('script').length") == 1
                assert tab.eval("document.querySelectorAll('img, form, button, input, iframe').length") == 0
                if name != "job":
                    assert "<script>alert(1)</script>" in tab.eval("document.body.innerText")
                shot = tab.screenshot(tmp_path / f"{name}-{width}.png")
                assert shot.stat().st_size > 10_000
        # The poll ran (its script allowed by the CSP hash) and kept the content.
        polls = [r for r in tab.named("Network.requestWillBeSent") if "live=1" in r["request"]["url"]]
        deadline = time.monotonic() + 30
        while not polls:
            assert time.monotonic() < deadline, "the page never polled"
            tab.pump()
            time.sleep(0.2)
            polls = [r for r in tab.named("Network.requestWillBeSent") if "live=1" in r["request"]["url"]]
        assert tab.eval("document.body.hasAttribute('data-offline')") is False
        assert not [c for c in tab.console() if "Content Security Policy" in c or "error" in c.lower()]
    finally:
        browser.close()
        fast.close()
    print(f"screenshots: {sorted(str(p) for p in Path(tmp_path).glob('*.png'))}")
