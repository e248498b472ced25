"""A private PostgreSQL cluster for the tests: initdb in a temp dir, password auth, a free loopback port.

The machine's package (Debian ``postgresql``, installed by ``.ci/run``) provides the binaries; no
system cluster, service manager or pre-configured role is needed. PostgreSQL refuses to run as
root, so as root the cluster runs as the ``postgres`` system user the package creates.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.servers.process import free_port, halt, stop_and_remove

PASSWORD = "pg-test-secret-7c1f"  # a throwaway cluster's password; also a canary for redaction tests


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    directory: Path
    process: subprocess.Popen[bytes]
    command: list[str]  # how it was launched: ``restart`` launches it again on the same port and data

    def url(self, dbname: str) -> str:
        return f"postgres://{self.user}:{self.password}@{self.host}:{self.port}/{dbname}"

    def psql(self, sql: str, dbname: str = "postgres") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.directory / "bin" / "psql"), "-h", self.host, "-p", str(self.port), "-U", self.user,
             "-d", dbname, "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
            capture_output=True, text=True, timeout=30, env={**os.environ, "PGPASSWORD": self.password},
        )

    def stop(self) -> None:
        stop_and_remove(self.process, self.directory)

    def halt(self, timeout_s: float = 30.0) -> None:
        """Stop the server as ``pg_ctl stop -m fast`` does (SIGINT to the postmaster: clients are disconnected,
        not waited for), keeping its data; ``restart`` brings it back."""
        pidfile = self.directory / "data" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGINT)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            halt(self.process)

    def restart(self, timeout_s: float = 60.0) -> None:
        """Start it again (after ``halt``) on the same port and data directory."""
        self.halt()
        log = open(self.directory / "server.log", "ab")  # noqa: SIM115 - lives as long as the server
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)
        self._wait(timeout_s)

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.directory / 'server.log').read_text()[-500:]}")
            if self.psql("SELECT 1").returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"postgres did not accept connections within {timeout_s:.0f} s")


def start() -> PostgresServer:
    """Start a new cluster; raises RuntimeError with the reason when it cannot."""
    bindir = _bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (install Debian's postgresql)")
    root = Path(tempfile.mkdtemp(prefix="gangscope-pg-"))
    (root / "bin").symlink_to(bindir)
    data, pwfile = root / "data", root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    as_user: list[str] = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chmod(root, 0o755)
        os.chown(root, pw.pw_uid, pw.pw_gid)
        os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    init = subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A",
                           "scram-sha-256", "--pwfile", str(pwfile), "-E", "UTF8", "--no-sync"],
                          capture_output=True, text=True, timeout=120)
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed: {init.stderr.strip()[-500:]}")
    port = free_port()
    log = open(root / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    command = [*as_user, str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-c", "listen_addresses=127.0.0.1",
               "-c", f"unix_socket_directories={root}", "-c", "fsync=off", "-c", "max_connections=200"]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = PostgresServer("127.0.0.1", port, "postgres", PASSWORD, root, proc, command)
    try:
        server._wait(60)
    except RuntimeError:
        server.stop()
        raise
    return server
