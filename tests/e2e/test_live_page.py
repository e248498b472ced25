"""The live page in a real browser against `gangscope run` on the sandbox (the `mixed` scenario at 20x), one run
shared by every test of this file: findings open and resolve on a page loaded once (no reload), a job page shows
its layers and next steps, names from the cluster that carry HTML stay text, 360 px has no sideways scroll, the
page asks for its token, works with JavaScript off, and its links survive a restart. Screenshots of each view land
in each test's tmp_path (printed)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from collectors.simulate.sandbox import Sandbox
from reports.lifecycle import STATE_FILE
from reports.page_html import job_href
from tests.servers import chromium

SPEED = 20.0
TOKEN = "l1ve-PAGE-t0ken"
RENAMED = "team-b-huge"  # admission_quota, never admitted: its finding opens at minute 17 of the scenario
HOSTILE = 'team-b-huge<img src=x onerror="window.__pwned=1">"\'&amp;<script>window.__pwned=2</script>'
HOSTILE_MESSAGE = '<svg onload="window.__pwned=3"> '
# What the observing tab reports every second.
SNAPSHOT = """(() => ({
  marker: window.__gsMarker || null,
  navigations: performance.getEntriesByType('navigation').length,
  open: [...document.querySelectorAll('#open article.finding')].map(a => [a.dataset.findingId, a.dataset.job,
                                                                          a.dataset.cause]),
  resolved: [...document.querySelectorAll('#resolved tr[data-finding-id]')].map(r => r.dataset.findingId),
  pwned: window.__pwned || null,
  scripts: document.querySelectorAll('script').length,
  injected: document.querySelectorAll('img, iframe, form, svg[onload], [onerror]').length,
  text: document.getElementById('live').innerText,
}))()"""


def _rename(v: Any) -> Any:
    """A scenario object with ``RENAMED`` turned into a hostile name, and its Kueue messages made hostile too."""
    if isinstance(v, dict):
        out = {k: _rename(x) for k, x in v.items()}
        condition = out.get("type") == "QuotaReserved" and "reason" in out
        event = out.get("kind") == "Event" and out.get("type") == "Warning"  # Kueue's Pending: the same message
        if isinstance(out.get("message"), str) and (condition or event):
            out["message"] = HOSTILE_MESSAGE + out["message"]
        return out
    if isinstance(v, list):
        return [_rename(x) for x in v]
    if isinstance(v, str) and RENAMED in v:
        return v.replace(RENAMED, HOSTILE)
    return v


class HostileSandbox(Sandbox):
    """The sandbox with one job's names (Job, Workload, labels, events) carrying HTML, as an API server could serve
    them: Kubernetes validates names, but a page must not rely on it (and messages are free text)."""

    def _apply(self, ev: dict[str, Any]) -> None:
        if RENAMED in json.dumps(ev):
            ev = _rename(ev)
        super()._apply(ev)


# The elements reaching past the window's right edge (what makes a page scroll sideways), for a failure message.
WIDEST = ("[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > "
          "document.documentElement.clientWidth + 1).slice(-3).map(e => e.tagName + ': ' + "
          "(e.textContent || '').slice(0, 80))")


def _fits(t: chromium.Tab, width: int) -> None:
    assert t.eval("document.documentElement.scrollWidth") <= width, t.eval(WIDEST)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Live:
    sb: Sandbox
    env: dict[str, str]
    log: Path
    url: str
    browser: chromium.Chromium
    tab: chromium.Tab  # the overview, loaded once; only the observer thread uses it (under ``lock``)
    run: subprocess.Popen[bytes] | None = None
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    navigated: int = 0  # main-frame navigations of the observing tab right after it loaded

    def start_run(self) -> None:
        mark = self.log.read_text().count("live page:") if self.log.exists() else 0
        self.run = subprocess.Popen([sys.executable, "-m", "gangscope.app.cli", "run"], env=self.env,
                                    stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while self.log.read_text().count("live page:") <= mark:
            assert self.run.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "gangscope run did not serve its page within 120 s"
            time.sleep(0.2)

    def get(self, path: str, token: str | None = TOKEN) -> tuple[int, str]:
        req = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait(self, what: str, cond: Any, timeout_s: float = 420.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.run is not None and self.run.poll() is None, self.log.read_text()[-3000:]
            got = cond()
            if got:
                return got
            assert time.monotonic() < deadline, f"{what}: not seen within {timeout_s:.0f} s"
            time.sleep(1)

    def open_ids(self) -> set[str]:
        return {fid for s in self.snapshots for fid, _, _ in s["open"]}

    def state(self) -> dict[str, Any]:
        try:
            return json.loads((Path(self.env["GANGSCOPE_DATA"]) / STATE_FILE).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def tab_for(self, name: str, width: int = 1280, token: str | None = TOKEN) -> chromium.Tab:
        t = self.browser.tab()
        t.width(width)
        if token:
            t.headers({"Authorization": f"Bearer {token}"})
        return t


def _observe(live: Live) -> None:
    while not live.stop.is_set():
        with live.lock:
            try:
                live.snapshots.append({**live.tab.eval(SNAPSHOT), "at": time.monotonic()})
            except Exception as e:  # noqa: BLE001 - a failed evaluation is recorded, not fatal here
                live.snapshots.append({"error": repr(e), "open": [], "resolved": [], "at": time.monotonic()})
        live.stop.wait(1.0)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, broker: Any) -> Iterator[Live]:
    base = tmp_path_factory.mktemp("live-page")
    prefix = f"page{os.getpid()}."
    sb = HostileSandbox(base / "sandbox", "mixed", speed=SPEED, interval=30.0).start()
    port = _free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")},
           "GANGSCOPE_CONFIG": str(sb.config), "GANGSCOPE_DATA": str(base / "data"),
           "GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap, "GANGSCOPE_KAFKA_TOPIC_PREFIX": prefix,
           "GANGSCOPE_PIPELINE_GROUP_ID": f"{prefix}pipeline", "GANGSCOPE_PIPELINE_FLUSH_SECONDS": "1",
           "GANGSCOPE_SCHEDULE_MODELS_BUILD": "interval:3", "GANGSCOPE_SCHEDULE_REPORT_HOURLY": "off",
           "GANGSCOPE_SCHEDULE_REPORT_DAILY": "off", "GANGSCOPE_SCHEDULE_COMPACTION": "off",
           "GANGSCOPE_SCHEDULE_RETENTION": "off", "GANGSCOPE_SERVER_LISTEN": f"127.0.0.1:{port}",
           "GANGSCOPE_SERVER_TOKEN": TOKEN, "GANGSCOPE_SERVER_PAGE_POLL_S": "1"}
    browser = None
    live = None
    try:
        browser = chromium.Chromium(base / "chromium")
        tab = browser.tab()
        tab.width(1280)
        tab.headers({"Authorization": f"Bearer {TOKEN}"})
        live = Live(sb, env, base / "run.log", f"http://127.0.0.1:{port}", browser, tab)
        live.start_run()
        assert tab.navigate(live.url + "/") == 200
        tab.eval("window.__gsMarker = 'loaded once'")
        live.navigated = len(tab.named("Page.frameNavigated"))
        observer = threading.Thread(target=_observe, args=(live,), daemon=True)
        observer.start()
        yield live
        live.stop.set()
        observer.join(10)
    finally:
        if live is not None:
            live.stop.set()
            if live.run is not None and live.run.poll() is None:
                live.run.send_signal(signal.SIGTERM)
                try:
                    live.run.wait(180)
                except subprocess.TimeoutExpired:
                    live.run.kill()
        if browser is not None:
            browser.close()
        sb.stop()


def _shots(tmp_path: Path) -> None:
    print("screenshots:", ", ".join(sorted(str(p) for p in tmp_path.glob("*.png"))))


@pytest.mark.timeout(900)
def test_findings_open_and_resolve_on_the_page_without_a_reload(live: Live, tmp_path: Path) -> None:
    truth = json.loads((live.sb.scenario_dir / "truth.json").read_text())
    healthy = {(j["namespace"], j["job"]) for j in truth["jobs"] if j["root_cause"] == "healthy"} - \
        {(j["namespace"], j["job"]) for j in truth["jobs"] if j["root_cause"] != "healthy"}
    classes = {j["root_cause"] for j in truth["jobs"]}

    def healed() -> set[str]:
        opened = live.open_ids()
        return {fid for s in live.snapshots for fid in s["resolved"] if fid in opened}

    # The preemption heals at minute 46, when the evicted job runs again: one finding seen open, then resolved.
    live.wait("a finding opened and later resolved on the page", healed)
    assert live.sb.now() > live.sb.sim_origin + timedelta(minutes=17)
    snaps = [s for s in live.snapshots if "error" not in s]
    assert len(snaps) >= 0.9 * len(live.snapshots)
    assert not snaps[0]["open"]  # nothing was open when the page loaded: every finding came in by the poll
    assert {s["marker"] for s in snaps} == {"loaded once"} and {s["navigations"] for s in snaps} == {1}
    with live.lock:
        live.tab.pump()
        assert len(live.tab.named("Page.frameNavigated")) == live.navigated  # no reload, no navigation
        polls = [r for r in live.tab.named("Network.requestWillBeSent") if "live=1" in r["request"]["url"]]
        live.tab.screenshot(tmp_path / "overview-1280.png")
    assert len(polls) > 30
    seen = {(job, cause) for s in snaps for _, job, cause in s["open"]}
    assert {cause for _, cause in seen} <= classes and len({c for _, c in seen}) >= 5
    assert not [j for j, _ in seen if tuple(j.split("/", 1)) in healthy]  # no healthy job ever listed
    # What the page lists is what the outlet published: the open findings of its state file.
    def agrees() -> bool:
        want = {fid for fid, e in live.state().items() if e["state"] == "open"}
        last = live.snapshots[-1]
        return bool(want) and {fid for fid, _, _ in last["open"]} == want
    live.wait("the page's open findings equal the outlet's", agrees, 60)
    _shots(tmp_path)


@pytest.mark.timeout(600)
def test_hostile_names_from_the_cluster_are_inert(live: Live, tmp_path: Path) -> None:
    want = f"team-b/{HOSTILE}"

    def listed() -> list[Any]:
        return [f for s in live.snapshots for f in s["open"] if f[1] == want]
    fid, _, cause = live.wait("the hostile job's finding on the page", listed)[0]
    assert cause == "admission_quota"
    snaps = [s for s in live.snapshots if "error" not in s]
    assert {s["pwned"] for s in snaps} == {None} and {s["scripts"] for s in snaps} == {1}
    assert {s["injected"] for s in snaps} == {0}
    last = next(s for s in reversed(snaps) if any(f[1] == want for f in s["open"]))
    assert want in last["text"]  # shown as text, the name and (once the build has read its condition) the message
    assert any(HOSTILE_MESSAGE.strip() in s["text"] for s in snaps if any(f[1] == want for f in s["open"]))
    # Its link leads to its page, the name one path segment.
    with live.lock:
        href = live.tab.eval(f"document.querySelector('article[data-finding-id=\"{fid}\"] h3 a').href")
    assert href == live.url + "/" + job_href("team-b", HOSTILE)
    for width in (1280, 360):
        t = live.tab_for("hostile", width)
        assert t.navigate(href) == 200
        assert t.eval("document.querySelector('h1').textContent") == f"{want} (Job)"
        assert t.eval("window.__pwned || null") is None and t.eval("document.querySelectorAll('script').length") == 1
        assert t.eval("document.querySelectorAll('img, iframe, form, [onerror], [onload]').length") == 0
        _fits(t, width)
        rows = t.eval("[...document.querySelectorAll('tr[data-layer]')].map(r => r.dataset.layer)")
        assert rows == ["queue", "topology", "gang", "startup", "throughput", "gpus"]
        assert t.eval("document.querySelector('tr[data-layer=queue]').dataset.verdict") == "problem"
        t.screenshot(tmp_path / f"hostile-job-{width}.png")
        assert not [c for c in t.console() if "Content Security Policy" in c or "Uncaught" in c]
    _shots(tmp_path)


@pytest.mark.timeout(600)
def test_a_job_page_shows_its_layers_next_steps_and_signals_on_one_axis(live: Live, tmp_path: Path) -> None:
    live.wait("gpt-moe-pretrain's gpu_fault on the page", lambda: [
        f for s in live.snapshots for f in s["open"] if f[1:] == ["ml-research/gpt-moe-pretrain", "gpu_fault"]])
    for width in (1280, 360):
        t = live.tab_for("job", width)
        assert t.navigate(f"{live.url}/jobs/ml-research/gpt-moe-pretrain") == 200
        layers = t.eval("[...document.querySelectorAll('tr[data-layer]')].map(r => [r.dataset.layer, "
                        "r.dataset.verdict])")
        assert [k for k, _ in layers] == ["queue", "topology", "gang", "startup", "throughput", "gpus"]
        assert dict(layers)["gpus"] in ("problem", "recovered") and dict(layers)["queue"] == "ok"
        findings = t.eval("[...document.querySelectorAll('#findings article.finding')].map(a => a.dataset.cause)")
        assert "gpu_fault" in findings
        steps = t.eval("[...document.querySelectorAll('#findings .next pre')].map(p => p.textContent)")
        assert steps and all(s.startswith("$ kubectl ") for s in steps)
        assert any("nvidia-smi" in s or "cordon" in s for s in steps)
        # Throughput, interconnect and GPUs on one time axis (one chart per width, one shown).
        svg = t.eval("[...document.querySelectorAll('#timeline svg')].filter(s => s.getBoundingClientRect().width > 0)"
                     ".map(s => s.textContent)")
        assert len(svg) == 1 and "throughput" in svg[0] and "GPU utilisation" in svg[0] and "XID 79" in svg[0]
        _fits(t, width)
        t.screenshot(tmp_path / f"job-{width}.png")
    # A healthy job has its page too: every layer checked, no finding, the same chart.
    t = live.tab_for("healthy", 360)
    assert t.navigate(f"{live.url}/jobs/ml-research/healthy-train-1") == 200
    verdicts = t.eval("[...document.querySelectorAll('tr[data-layer]')].map(r => r.dataset.verdict)")
    assert len(verdicts) == 6 and "problem" not in verdicts
    assert "no finding" in t.eval("document.getElementById('findings').innerText")
    assert t.eval("document.querySelectorAll('#timeline svg').length") == 2
    t.screenshot(tmp_path / "healthy-job-360.png")
    _shots(tmp_path)


@pytest.mark.timeout(300)
def test_360_px_has_no_sideways_scroll(live: Live, tmp_path: Path) -> None:
    live.wait("an open finding", lambda: live.snapshots and live.snapshots[-1]["open"])
    t = live.tab_for("overview", 360)
    assert t.navigate(live.url + "/") == 200
    _fits(t, 360)
    assert t.eval("document.querySelectorAll('#open article.finding').length") > 0
    t.screenshot(tmp_path / "overview-360.png")
    _shots(tmp_path)


@pytest.mark.timeout(300)
def test_the_token_is_required(live: Live) -> None:
    assert live.get("/", token=None)[0] == 401 and live.get("/", token="wrong")[0] == 401
    assert live.get("/jobs/ml-research/gpt-moe-pretrain", token=None)[0] == 401
    assert live.get("/?live=1", token=None)[0] == 401
    assert live.get("/")[0] == 200
    assert live.get("/healthz", token=None)[0] in (200, 503)  # probes need none
    t = live.tab_for("no token", token=None)
    assert t.navigate(live.url + "/") == 401
    assert "needs the credential" in t.eval("document.body.innerText")
    assert TOKEN not in live.log.read_text()


@pytest.mark.timeout(300)
def test_with_javascript_off_it_is_the_same_page_that_does_not_update(live: Live) -> None:
    live.wait("an open finding", lambda: live.snapshots and live.snapshots[-1]["open"])
    t = live.tab_for("no script")
    t.send("Emulation.setScriptExecutionDisabled", value=True)
    assert t.navigate(live.url + "/") == 200
    n = t.eval("document.querySelectorAll('#open article.finding').length")
    assert n > 0 and t.eval("document.querySelectorAll('#open .next pre').length") >= n
    assert "JavaScript is off" in t.eval("document.querySelector('noscript').textContent")
    time.sleep(3)  # three poll periods
    t.pump()
    assert not [r for r in t.named("Network.requestWillBeSent") if "live=1" in r["request"]["url"]]


@pytest.mark.timeout(600)
def test_deep_links_survive_a_restart(live: Live) -> None:
    path = "/" + job_href("team-b", HOSTILE)
    live.wait("the hostile job's page", lambda: live.get(path)[0] == 200)
    before = live.get(path)[1]
    assert live.run is not None
    live.run.send_signal(signal.SIGTERM)
    assert live.run.wait(180) == 0, live.log.read_text()[-3000:]
    live.start_run()
    status, after = live.get(path)
    assert status == 200
    title = re.compile(r"<title>(.*?)</title>")
    assert title.search(before)[1] == title.search(after)[1]
    assert re.findall(r'data-layer="([a-z]+)"', after) == ["queue", "topology", "gang", "startup", "throughput",
                                                           "gpus"]
