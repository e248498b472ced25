"""Keeps the screenshots a test took (the ``*.png`` files at the top of its ``tmp_path``) after it ends, passed or
failed, so a reviewer can look at every view of the page and the report.

Why: pyproject keeps only a failed test's ``tmp_path`` (``tmp_path_retention_policy = "failed"``; a run's
temporary directories hold ~9 GB), so the Chromium tests' screenshots of a passing run were deleted with it.

Where: ``$GANGSCOPE_SCREENSHOTS`` if set, else ``.pytest_cache/d/screenshots`` (the pytest cache), one directory
per test, its path the test's id (``e2e/test_live_page/test_360_px_has_no_sideways_scroll/overview-360.png``),
replaced on each run of that test. The session's summary line says how many were kept and where.

``GANGSCOPE_SCREENSHOTS`` is taken out of the environment at start: gangscope's settings read every
``GANGSCOPE_*`` variable and refuse an unknown one, so a CLI a test starts with ``os.environ`` would fail. The
resolved directory reaches pytest-xdist's workers as ``GS_TEST_SCREENSHOTS`` instead.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ENV = "GANGSCOPE_SCREENSHOTS"
_RESOLVED = "GS_TEST_SCREENSHOTS"  # not GANGSCOPE_*: the settings would refuse it
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_started = time.time()


def directory(config: pytest.Config) -> Path:
    """Where screenshots are kept: ``$GANGSCOPE_SCREENSHOTS``, else the pytest cache's ``d/screenshots``."""
    chosen = os.environ.get(_RESOLVED) or os.environ.get(ENV)
    if chosen:
        return Path(chosen).expanduser().resolve()
    cache = getattr(config, "cache", None)  # None with -p no:cacheprovider
    return cache.mkdir("screenshots") if cache else config.rootpath / ".pytest_cache" / "d" / "screenshots"


def dir_of(root: Path, nodeid: str) -> Path:
    """The test's own directory: its file path without ``tests/`` and ``.py``, then its name (parameters kept)."""
    file, _, name = nodeid.partition("::")
    parts = [*re.sub(r"\.py$", "", re.sub(r"^tests/", "", file)).split("/"), *name.split("::")]
    return root.joinpath(*(re.sub(r"[^A-Za-z0-9_.\-\[\]]+", "_", p).strip(".") or "_" for p in parts if p))


def keep(shots: list[Path], root: Path, nodeid: str) -> list[Path]:
    """Copy ``shots`` into the test's directory under ``root``, replacing what an earlier run of it left there."""
    dest = dir_of(root, nodeid)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True, exist_ok=True)
    kept = []
    for shot in shots:
        kept.append(dest / shot.name)
        shutil.copyfile(shot, kept[-1])  # a fresh mtime: the summary counts this session's by it
    return kept


def pytest_configure(config: pytest.Config) -> None:
    where = os.environ.pop(ENV, None)
    if where and not os.environ.get(_RESOLVED):
        os.environ[_RESOLVED] = str(Path(where).expanduser().resolve())


@pytest.fixture(autouse=True)
def keep_screenshots(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that has a ``tmp_path``, its top-level ``*.png`` files are copied out of it (before the
    ``tmp_path`` teardown removes a passing test's directory: this fixture asks for it, so ends first)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp: Path = request.getfixturevalue("tmp_path")
    yield
    shots = sorted(p for p in tmp.glob("*.png") if p.is_file())
    if shots:
        keep(shots, directory(request.config), request.node.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    root = directory(config)
    if not root.is_dir():
        return
    new = [p for p in root.rglob("*.png") if p.stat().st_mtime >= _started - 1]
    if new:
        terminalreporter.write_line(f"screenshots: {len(new)} kept in {root}")
