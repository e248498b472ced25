"""The report: content, escaping of hostile names, and a real headless Chromium rendering it."""

from __future__ import annotations

import html.parser
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from pipeline import lake
from reports.report import write_report
from tests.reports import lakefix


def test_report_names_every_flagged_job_and_class(report_lake, tmp_path):
    out = write_report(report_lake, "html", tmp_path / "r.html")
    text = out.read_text()
    md = write_report(report_lake, "md", tmp_path / "r.md").read_text()
    flagged = [j for j in lakefix.JOBS + lakefix.NATIVE_JOBS if j[5] != "healthy"]
    for ns, job, *_rest in flagged:
        cause = _rest[3]
        assert f"{ns}/{job.replace('<', '&lt;').replace('>', '&gt;')}" in text
        assert cause in text and cause in md
    for section in ("Jobs that need action", "Findings by class", "Layered check per flagged job",
                    "Queues: Kueue depth and admission wait", "Idle GPU-hours", "Nodes ranked by interconnect trouble",
                    "Nodes missing topology labels", "Gangs: assembly and start-up times"):
        assert section in text and section in md
    gangs = md[md.index("Gangs: assembly and start-up times"):]
    assert "start_up_s" in gangs and "assembled_before_capture" in gangs and "95" in gangs
    # The worst node comes first in the interconnect ranking.
    ranking = text[text.index("Nodes ranked by interconnect trouble"):]
    assert ranking.index("gpu-node-1") < ranking.index("gpu-node-0")
    # llama-a's chart has its throughput and both nodes' bandwidth, and the onset marker.
    assert "onset: interconnect_degradation" in text and "gpu-node-1 nvlink_bw" in text
    assert "<svg" in text and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in text.lower() and "<link" not in text.lower()


def test_report_escapes_cluster_strings(report_lake, tmp_path):
    text = write_report(report_lake, "html", tmp_path / "r.html").read_text()
    md = write_report(report_lake, "md", tmp_path / "r.md").read_text()
    for doc in (text, md):
        assert lakefix.EVIL_JOB not in doc
        assert "<script" not in doc.lower() and "<img" not in doc.lower()
        assert "&lt;script&gt;alert" in doc
    assert html.escape(lakefix.EVIL_LABEL, quote=True) in text


def test_report_without_models_says_so(offline_settings, tmp_path):
    lake.connect(offline_settings).close()  # raw tables only
    text = write_report(offline_settings, "md", tmp_path / "r.md").read_text()
    assert "No job needs action." in text and "model not built yet" in text


def test_report_cli_writes_default_path(report_lake, capsys):
    from gangscope.app.cli import main

    rc = main(["report", "--format", "md", "--no-build", "--data", str(report_lake.data)])
    path = Path(capsys.readouterr().out.strip())
    assert rc == 0 and path.parent == report_lake.data / "reports" and path.suffix == ".md"
    assert "interconnect_degradation" in path.read_text()
    path.unlink()


# --- a real browser --------------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                  "--enable-logging=stderr", "--v=0"]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:  # .ci/run installs it: in CI a missing browser is a failure, not a skip
        assert not os.environ.get("CI"), "chromium is not installed (apt-get install -y chromium)"
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return exe


class _Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_title = tag == "title"

    def handle_data(self, data):
        if self._in_title:
            self.title += data

    def handle_endtag(self, tag):
        self._in_title = False


def _png_colours(path: Path) -> int:
    """Distinct pixel colours of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours: set[bytes] = set()
    for r in range(height):
        f, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if r % 2 == 0:
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 2))
        prev = line
    return len(colours)


@pytest.mark.timeout(120)
def test_report_in_headless_chromium(report_lake, tmp_path):
    exe = _chromium()
    page = write_report(report_lake, "html", tmp_path / "r.html")
    profile = tmp_path / "chromium-profile"
    base = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # Console messages (errors, CSP violations from an injected script) are logged as CONSOLE lines.
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    parsed = _Elements()
    parsed.feed(dom.stdout)
    assert "script" not in parsed.tags and "img" not in parsed.tags  # no injected element in the DOM
    assert parsed.title.startswith("gangscope report")
    assert parsed.tags.count("svg") >= 2 and "polyline" in parsed.tags
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout  # the name is shown, as text
    shot = tmp_path / "shot.png"
    r = subprocess.run([*base, "--window-size=1000,1500", f"--screenshot={shot}", page.as_uri()],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    # A blank or unstyled page has a handful of colours; charts, badges and bars give many more.
    assert _png_colours(shot) > 40
