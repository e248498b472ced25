"""What every test server shares: a free loopback port, waiting for readiness, a clean stop."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from gangscope.transport.broker import free_port

__all__ = ["free_port", "halt", "stop_and_remove", "wait_http"]


def halt(process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """Terminate (servers flush on SIGTERM), kill after ``timeout_s``."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_and_remove(process: subprocess.Popen[bytes], directory: Path, timeout_s: float = 20.0) -> None:
    """Halt the server and delete its directory."""
    halt(process, timeout_s)
    shutil.rmtree(directory, ignore_errors=True)


def wait_http(url: str, process: subprocess.Popen[bytes], log: Path, what: str, timeout_s: float = 60.0) -> None:
    """Return once ``url`` answers 200; raise with the log's tail if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text(errors='replace')[-800:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer {url} within {timeout_s:.0f} s")
