"""Waiting for the Go tools `.ci/run` builds in the background (.ci/build-kubernetes: the Kubernetes control plane,
kwok, Kueue, Helm): a test that needs one of them waits while the build runs, so CI can run the README's test
command as it is, the build beside the other tests. Without a build running there is nothing to wait for."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

PID_FILE = Path.home() / ".cache" / "gangscope-builds.pid"
LOG_FILE = Path.home() / ".cache" / "gangscope-builds.log"


def running() -> bool:
    """A background build (``.ci/run``) is under way."""
    try:
        pid = int(PID_FILE.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


WAIT_S = 3600.0  # the longest a test waits for the build (tests/conftest.py allows it on top of its timeout)


def wait(timeout_s: float = WAIT_S, done: Callable[[], bool] | None = None) -> None:
    """Return once no background build runs, or once ``done()`` says what the caller needs is built (at most
    ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while running() and time.monotonic() < deadline and not (done and done()):
        time.sleep(5)


def log_tail(chars: int = 1500) -> str:
    """The end of the background build's log, for a test that found its binary missing."""
    try:
        return LOG_FILE.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
