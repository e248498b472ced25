"""Real Prometheus and node_exporter for the tests, on free loopback ports.

Debian's ``prometheus`` and ``prometheus-node-exporter`` packages (installed by ``.ci/run``) provide
the binaries; each server runs from a temp dir with its own storage and is stopped by the test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.servers.process import free_port, halt, stop_and_remove, wait_http


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(f"{names[0]} not found (install Debian's {names[-1]})")


@dataclass
class Process:
    """A started server: ``url`` (http://127.0.0.1:PORT), its directory, its process."""

    url: str
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return self.url.removeprefix("http://")

    def halt(self) -> None:
        """Stop the process (cleanly: Prometheus flushes its WAL), keeping its directory."""
        halt(self.process)

    def stop(self) -> None:
        stop_and_remove(self.process, self.directory)


def _launch(cls: type, args: list[str], root: Path, port: int, ready_path: str, what: str) -> Any:
    """Start ``args`` logging to ``root/log``; return ``cls(url, root, process)`` once ``ready_path`` answers."""
    log = root / "log"
    proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    server = cls(f"http://127.0.0.1:{port}", root, proc)
    try:
        wait_http(server.url + ready_path, proc, log, what)
    except RuntimeError:
        server.stop()
        raise
    return server


def start_node_exporter() -> Process:
    """node_exporter with its default collectors (about 500 samples per scrape on a small machine)."""
    binary = _binary("prometheus-node-exporter", "node_exporter", "prometheus-node-exporter")
    root = Path(tempfile.mkdtemp(prefix="gangscope-nodeexp-"))
    port = free_port()
    return _launch(Process, [binary, f"--web.listen-address=127.0.0.1:{port}"], root, port, "/metrics",
                   "node_exporter")


@dataclass
class Prometheus(Process):
    def query(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; returns ``data`` of a successful answer."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as r:
            doc = json.load(r)
        if doc.get("status") != "success":
            raise RuntimeError(f"prometheus {path}: {doc}")
        return doc["data"]

    def wait_for(self, expr: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll an instant query until it returns something; returns its result."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query("query", query=expr)["result"]
            if result:
                return result
            time.sleep(0.5)
        raise RuntimeError(f"prometheus: {expr} stayed empty for {timeout_s:.0f} s")


def start_prometheus(config: dict[str, Any]) -> Prometheus:
    """Prometheus with ``config`` (the prometheus.yml document as a dict) and its own temp storage."""
    binary = _binary("prometheus")
    root = Path(tempfile.mkdtemp(prefix="gangscope-prom-"))
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    args = [binary, f"--config.file={root / 'prometheus.yml'}", f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={root / 'data'}", "--log.level=warn",
            # On shutdown Prometheus waits this long for remote-write queues to drain (default 1 m): a test's
            # receiver is gone by then, so stopping took the whole 20 s of halt() before the kill.
            "--storage.remote.flush-deadline=2s"]
    return _launch(Prometheus, args, root, port, "/-/ready", "prometheus")


def promtool(*args: str, timeout_s: float = 120.0) -> str:
    """Run promtool; returns its stdout, raises with its stderr when it fails."""
    done = subprocess.run([_binary("promtool", "prometheus"), *args], capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"promtool {' '.join(args)}: {done.stderr.strip()[-800:]}")
    return done.stdout
