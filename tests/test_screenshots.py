"""tests/screenshots.py keeps a passing test's Chromium screenshots (its tmp_path is removed): an inner pytest run
with the plugin, whose one test screenshots a page in real headless Chromium, then the kept files are read back as
the PNG of that page. Once on pytest-xdist (as .ci/run) with ``GANGSCOPE_SCREENSHOTS`` set, once in-process with
the default, the pytest cache's ``d/screenshots``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.png import read_png
from tests.screenshots import PNG_SIGNATURE

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 360
GREEN = (0, 192, 0)
PAGE = (
    "<!DOCTYPE html><html><head><meta name='viewport' content='width=device-width'></head>"
    "<body style='margin:0;font:16px sans-serif'><div style='height:200px;background:rgb(0,192,0)'></div>"
    + "".join(f"<p>line {i}: what is wrong right now, one click from each job</p>" for i in range(30))
    + "</body></html>"
)
INNER = f"""
import json, os
from pathlib import Path

from gangscope import config
from tests.servers import chromium


def test_page_screenshot(tmp_path):
    page = tmp_path / "page.html"
    page.write_text({PAGE!r})
    browser = chromium.Chromium(tmp_path / "chromium")
    try:
        tab = browser.tab()
        tab.width({WIDTH})
        tab.navigate(page.as_uri())
        tab.screenshot(tmp_path / "page-{WIDTH}.png")
    finally:
        browser.close()
    config.load(environ=os.environ)  # GANGSCOPE_SCREENSHOTS, an unknown setting to gangscope, is not left there
    env = sorted(k for k in os.environ if "SCREENSHOT" in k)
    Path(os.environ["INNER_REPORT"]).write_text(json.dumps({{"tmp_path": str(tmp_path), "env": env}}))


def test_no_tmp_path():
    pass
"""


def _pixel(rows: list[bytes], x: int, y: int, bpp: int) -> tuple[int, ...]:
    return tuple(rows[y][x * bpp : x * bpp + 3])


def _inner(tmp_path: Path, env_dir: Path | None, *args: str) -> tuple[dict, subprocess.CompletedProcess[str]]:
    project = tmp_path / "inner"
    project.mkdir()
    (project / "test_inner.py").write_text(INNER)
    # As the project's pyproject: a passing test's tmp_path is removed.
    (project / "pytest.ini").write_text("[pytest]\ntmp_path_retention_policy = failed\n")
    report = tmp_path / "report.json"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GANGSCOPE_", "GS_TEST_", "PYTEST_"))
    }  # not the outer run's own directory
    env |= {"PYTHONPATH": str(ROOT), "INNER_REPORT": str(report)}
    if env_dir is not None:
        env["GANGSCOPE_SCREENSHOTS"] = str(env_dir)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.screenshots",
            f"--basetemp={tmp_path / 'inner-tmp'}",
            *args,
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(report.read_text()), run


def _check_kept(shot: Path, inner: dict) -> None:
    assert shot.is_file(), sorted(str(p) for p in shot.parent.parent.rglob("*"))
    assert not Path(inner["tmp_path"]).exists()  # the test passed: its tmp_path is gone, the copy is what is left
    assert shot.stat().st_size > 2_000
    width, height, bpp, rows = read_png(shot, max_rows=400)
    assert width == WIDTH and height > 900  # the whole page, beyond the window's 900 px
    assert _pixel(rows, 50, 50, bpp) == GREEN  # the page's own green band at the top
    assert (
        _pixel(rows, 50, 250, bpp) != GREEN
        and len({_pixel(rows, x, y, bpp) for y in range(200, 400) for x in range(0, width, 3)}) > 3
    )  # and its text below


@pytest.mark.timeout(300)
def test_screenshots_are_kept_after_a_passing_run_in_gangscope_screenshots(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    stale = kept / "test_inner" / "test_page_screenshot" / "from-an-earlier-run.png"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(PNG_SIGNATURE)
    inner, run = _inner(tmp_path, kept, "-n", "1")  # on a pytest-xdist worker, as .ci/run runs the tests
    _check_kept(kept / "test_inner" / "test_page_screenshot" / f"page-{WIDTH}.png", inner)
    assert not stale.exists()  # the test's directory holds this run's screenshots only
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file()) == [
        f"test_inner/test_page_screenshot/page-{WIDTH}.png"
    ]  # nothing for the test without a tmp_path
    assert not (tmp_path / "inner" / ".pytest_cache" / "d" / "screenshots").exists()
    assert inner["env"] == ["GS_TEST_SCREENSHOTS"]  # GANGSCOPE_SCREENSHOTS taken out: gangscope's settings load
    assert f"screenshots: 1 kept in {kept}" in run.stdout


@pytest.mark.timeout(300)
def test_screenshots_are_kept_in_the_pytest_cache_by_default(tmp_path: Path) -> None:
    inner, run = _inner(tmp_path, None)
    cache = tmp_path / "inner" / ".pytest_cache" / "d" / "screenshots"
    _check_kept(cache / "test_inner" / "test_page_screenshot" / f"page-{WIDTH}.png", inner)
    assert inner["env"] == []
    assert f"screenshots: 1 kept in {cache}" in run.stdout
