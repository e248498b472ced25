"""A private Alertmanager for the tests: Debian's ``prometheus-alertmanager`` on a free loopback port.

Clustering is off (``--cluster.listen-address=``), storage goes to a temp dir, and the one receiver
is a null one: the tests read the alerts back through the v2 API, as an operator's tooling would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.servers.process import free_port, stop_and_remove, wait_http

CONFIG = """\
route:
  receiver: gangscope-null
  group_by: [alertname, cluster, namespace, job]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: gangscope-null
"""


@dataclass
class AlertmanagerServer:
    url: str
    directory: Path
    process: subprocess.Popen[bytes]

    def alerts(self, active: bool = True, resolved: bool = False) -> list[dict[str, Any]]:
        """GET /api/v2/alerts (Alertmanager lists resolved alerts only while it still keeps them)."""
        q = f"active={str(active).lower()}&silenced=true&inhibited=true&unprocessed=true"
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{q}", timeout=10) as r:  # noqa: S310 - loopback
            return json.loads(r.read())

    def stop(self) -> None:
        stop_and_remove(self.process, self.directory)


def start() -> AlertmanagerServer:
    """Start one; raises RuntimeError with the reason when it cannot."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        raise RuntimeError("alertmanager not found (install Debian's prometheus-alertmanager)")
    root = Path(tempfile.mkdtemp(prefix="gangscope-am-"))
    (root / "alertmanager.yml").write_text(CONFIG)
    port = free_port()
    log = open(root / "alertmanager.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [binary, f"--config.file={root / 'alertmanager.yml'}", f"--storage.path={root / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    server = AlertmanagerServer(f"http://127.0.0.1:{port}", root, proc)
    try:
        wait_http(f"{server.url}/-/ready", proc, root / "alertmanager.log", "alertmanager", timeout_s=30)
    except RuntimeError:
        server.stop()
        raise
    return server
