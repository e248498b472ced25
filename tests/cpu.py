"""CPU seconds per test file, printed at the end of a run: on two cores the suite is CPU-bound (issue 32), so what
shortens it is less CPU per file, and this says where the CPU goes.

A test's CPU is its worker's own plus that of the subprocesses it started and reaped (``gangscope run``, writers,
a control plane a module started), from its setup to its teardown; servers a session fixture keeps for the whole run
(Kafka, Tansu, PostgreSQL) are counted in the machine's total, which the summary prints beside (from /proc/stat,
every process on the machine), and in the last file of each worker: they are reaped at its teardown (CI, 7 Dec:
tests/deploy/test_log_secrets.py, under a second alone, counted 147 CPU-s). Kept per file in ``CPU_FILE``.
"""

from __future__ import annotations

import contextlib
import json
import resource
import time
from collections.abc import Generator
from pathlib import Path

import pytest

CPU_FILE = Path.home() / ".cache" / "gangscope-test-cpu.json"
TOP = 15
_cpu: dict[str, float] = {}  # the controller's: file -> CPU seconds
_start: dict[str, float] = {}


def _own_and_reaped_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _machine_busy_s() -> float | None:
    """CPU seconds every core spent not idle since boot (Linux), or None."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / 100.0  # USER_HZ


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _start[item.nodeid] = _own_and_reaped_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    if call.when == "teardown" and item.nodeid in _start:
        outcome.get_result().user_properties.append(("cpu_s", _own_and_reaped_s() - _start.pop(item.nodeid)))


_BUSY = pytest.StashKey[tuple[float | None, float]]()  # the machine's busy CPU-s and the time at the start


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BUSY] = (_machine_busy_s(), time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == "cpu_s":
            path = report.nodeid.split("::")[0]
            _cpu[path] = _cpu.get(path, 0.0) + float(value)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _cpu:
        return
    busy0, t0 = config.stash.get(_BUSY, (None, time.monotonic()))
    busy1 = _machine_busy_s()
    wall = time.monotonic() - t0
    counted = sum(_cpu.values())
    machine = f"; the machine's cores were busy {busy1 - busy0:,.0f} CPU-s in {wall:,.0f} s of wall time" if (
        busy0 is not None and busy1 is not None) else ""
    terminalreporter.write_sep("-", f"CPU per test file: {counted:,.0f} CPU-s counted{machine}")
    for path, s in sorted(_cpu.items(), key=lambda kv: -kv[1])[:TOP]:
        terminalreporter.write_line(f"{s:8.0f} CPU-s  {path}")
    with contextlib.suppress(OSError):
        CPU_FILE.parent.mkdir(parents=True, exist_ok=True)
        CPU_FILE.write_text(json.dumps({k: round(v, 1) for k, v in sorted(_cpu.items())}, indent=0))
