"""Headless Chromium (Debian's ``chromium``) driven over the Chrome DevTools Protocol, for the live page tests.

One browser per fixture, on a fresh profile; each :class:`Tab` is one page target reached over its own websocket
(``websocket-client``, which the ``kubernetes`` client already depends on). Only what the tests need: navigate,
evaluate, set the window width, extra request headers, screenshots, console and network events. .ci/run installs
chromium; a missing browser fails in CI and skips elsewhere (``tests/conftest.py``'s rule for real servers).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import websocket

# The flags known to work on these machines (/work/.library/env/machines/polyglot.md): no sandbox as root, no
# GPU, and no background networking (the closed network refuses Chromium's own connections).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--hide-scrollbars", "--remote-allow-origins=*", "--remote-debugging-port=0"]


def executable() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        assert not os.environ.get("CI"), "chromium is not installed (apt-get install -y chromium)"
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return exe


class Chromium:
    """A headless browser on a fresh profile under ``directory``; ``tab()`` opens a page, ``close()`` ends it."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        profile = directory / "profile"
        self.log = (directory / "chromium.log").open("wb")
        self.proc = subprocess.Popen([executable(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            assert self.proc.poll() is None, f"chromium exited: {(directory / 'chromium.log').read_text()[-2000:]}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port within 60 s"
            time.sleep(0.1)
        self.port = int(active.read_text().splitlines()[0])
        self.tabs: list[Tab] = []

    def tab(self) -> Tab:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(req, timeout=30) as r:
            target = json.loads(r.read())
        t = Tab(target["webSocketDebuggerUrl"])
        self.tabs.append(t)
        return t

    def close(self) -> None:
        for t in self.tabs:
            t.close()
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


class Tab:
    """One page: ``send`` a DevTools command and get its result; every event received is kept in ``events``."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def send(self, method: str, timeout_s: float = 60.0, **params: Any) -> dict[str, Any]:
        mid = next(self.ids)
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def pump(self) -> None:
        """Read the events that arrived meanwhile (a cheap command round trip)."""
        self.send("Runtime.evaluate", expression="0")

    def named(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.events if e["method"] == method]

    def navigate(self, url: str, timeout_s: float = 60.0) -> int:
        """Load ``url`` and wait for its load event; the HTTP status of the document."""
        seen = len(self.events)
        frame = self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while not any(e["method"] == "Page.loadEventFired" for e in self.events[seen:]):
            assert time.monotonic() < deadline, f"{url} did not load within {timeout_s} s"
            self.pump()
            time.sleep(0.05)
        statuses = [e["params"]["response"]["status"] for e in self.events[seen:]
                    if e["method"] == "Network.responseReceived" and e["params"].get("type") == "Document"
                    and e["params"].get("frameId") == frame.get("frameId")]
        return statuses[-1] if statuses else 0

    def eval(self, expression: str) -> Any:
        got = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression[:80]}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def width(self, width: int, height: int = 900) -> None:
        """Lay the page out as a window ``width`` CSS px wide (a phone's below 600, with its viewport meta)."""
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=width < 600)

    def headers(self, headers: dict[str, str]) -> None:
        self.send("Network.setExtraHTTPHeaders", headers=headers)

    def screenshot(self, path: Path) -> Path:
        """The whole page (beyond the window) as a PNG."""
        got = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(got["data"]))
        return path

    def console(self) -> list[str]:
        """Console calls and browser log entries (errors, CSP violations) seen so far."""
        self.pump()
        out = [" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
               for p in self.named("Runtime.consoleAPICalled")]
        out += [f"{p['entry'].get('level')}: {p['entry'].get('text')}" for p in self.named("Log.entryAdded")]
        out += [str(p.get("exceptionDetails", {}).get("text")) for p in self.named("Runtime.exceptionThrown")]
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.ws.close()
