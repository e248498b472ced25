"""The report: content, escaping of hostile names, next steps, the fleet view, and a real headless
Chromium rendering it at phone and desktop widths."""

from __future__ import annotations

import html
import html.parser
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline import lake
from reports import fleet
from reports.report import write_report
from tests.png import read_png
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
    # llama-a's chart has its throughput and its worst node's bandwidth (gpu-node-1's fell), and the onset.
    llama = next(a for a in text.split('<article class="job"')[1:] if "team-a/llama-a: " in a)
    assert "onset of interconnect_degradation" in llama and "NVLink on gpu-node-1" in llama
    assert "NVLink on gpu-node-0" not in llama
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
    # The closest-node sentence of the gang finding: node name and taint from the cluster, escaped.
    assert (f"{html.escape(lakefix.EVIL_NODE)}: 4 of 8 GPUs free (8 needed), taint "
            f"{html.escape(lakefix.EVIL_TAINT)} not tolerated") in text
    for doc in (text, md):
        assert "<svg onload" not in doc and "<b>7" not in doc
    assert "gpu-node-&lt;b&gt;7&lt;/b&gt;" in md


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


def test_markdown_reads_as_what_why_next(report_lake, sim_lakes, tmp_path):
    for settings in (report_lake, sim_lakes("mixed")[0]):
        text = write_report(settings, "md", tmp_path / "r.md").read_text()
        jobs_table = text.index("## Jobs that need action")
        per_job = text.index("## Layered check per flagged job")
        assert text.index("## Fleet") < jobs_table < per_job
        blocks = text[per_job:].split("\n### ")[1:]
        assert blocks
        for block in blocks:
            lines = [line for line in block.splitlines()[1:] if line.strip()][:3]
            assert [line.split(":**")[0] for line in lines] == ["**What", "**Why", "**Next step"], block
            assert "kubectl " in lines[2]


def test_fleet_trend_against_the_previous_report_under_one_file_name(sim_lakes, tmp_path):
    """Reports overwritten under a fixed name (report.html, as the demo writes) still get their trend."""
    settings, truth = sim_lakes("mixed")
    out = tmp_path / "report.html"
    first = write_report(settings, "html", out).read_text()
    assert "No previous report to compare with" in first
    log = tmp_path / fleet.SUMMARIES
    entry = json.loads(log.read_text().splitlines()[-1])
    assert (entry["cluster"], entry["kind"], entry["format"], entry["file"]) == (settings.cluster, "report", "html",
                                                                                 "report.html")
    figures = entry["gpu_hours_lost"]
    # Every injected class lost GPU-hours; waiting in the queue is counted for the admission classes.
    assert set(figures) == {j["root_cause"] for j in truth["jobs"]} - {"healthy"}
    assert len(figures) == 13
    assert all(v > 0 for v in figures.values())
    # The previous run's figures, doctored so the deltas are known: the next run into the same file compares with
    # them (not with itself, nor with a report of another cluster or kind in the same directory).
    doctored = dict(entry, gpu_hours_lost={"gpu_fault": 1.0}, generated_at="2026-11-01T00:59:00+00:00")
    others = [dict(entry, cluster="other", gpu_hours_lost={"gpu_fault": 5000.0}),
              dict(entry, kind="hourly", gpu_hours_lost={"gpu_fault": 5000.0})]
    log.write_text("".join(json.dumps(e) + "\n" for e in [doctored, *others]))
    second = write_report(settings, "html", out).read_text()
    total = sum(figures.values())
    assert (f"+{total - 1.0:,.1f} GPU-hours</span> against the previous report (2026-11-01 00:59:00Z: 1.0)"
            in second)
    rows = dict(re.findall(r'<td data-label="root cause \(how\)">([a-z_]+) \(.*?</td>.*?'
                           r'<td data-label="change">([^<]+)</td>', second))
    assert rows["gpu_fault"] == f"{figures['gpu_fault'] - 1.0:+,.1f}"
    assert rows["gang_assembly"] == f"{figures['gang_assembly']:+,.1f}"
    # A third run compares with the second, i.e. with the real figures: no change.
    assert "+0.0 GPU-hours</span> against the previous report" in write_report(settings, "html", out).read_text()
    # Markdown keeps its own series in the same file.
    md_out = tmp_path / "report.md"
    assert "against the previous report" not in write_report(settings, "md", md_out).read_text()
    assert "+0.0 against the previous report" in write_report(settings, "md", md_out).read_text()


def test_previous_summary_no_file_corrupt_or_hostile(tmp_path, caplog):
    """No summary file: no trend. Corrupt or hostile lines are skipped with a log line; an older valid one is used."""
    assert fleet.previous(tmp_path, "default", "report", "html") == (None, None)
    good = {"v": 1, "cluster": "default", "kind": "report", "format": "html", "file": "r.html",
            "generated_at": "2026-11-01T00:00:00+00:00", "gpu_hours_lost": {"gpu_fault": 2.5}}
    hostile = [
        "not json at all",
        json.dumps(["a", "list"]),
        json.dumps(dict(good, v=2)),
        json.dumps(dict(good, gpu_hours_lost={"gpu_fault": "12"})),
        json.dumps(dict(good, gpu_hours_lost={"gpu_fault": float("nan")})),
        json.dumps(dict(good, gpu_hours_lost={"gpu_fault": -5})),
        json.dumps(dict(good, gpu_hours_lost={"x" * 100: 1.0})),
        json.dumps(dict(good, gpu_hours_lost={f"c{i}": 1.0 for i in range(100)})),
        json.dumps(dict(good, gpu_hours_lost=[1, 2])),
        json.dumps(dict(good, generated_at="<script>\nFAKE LOG LINE")),
        "[" * 5000,
        json.dumps(dict(good, generated_at="2026-11-01T00:00:00")),
        json.dumps(dict(good, file="<script>alert(1)</script>", gpu_hours_lost={"gpu_fault": 1e400})),
        json.dumps(dict(good, gpu_hours_lost={"gpu_fault": 1.0}, pad="x" * 20000)),
        "\x00\xff\xfe garbage",
    ]
    log = tmp_path / fleet.SUMMARIES
    log.write_text("\n".join(hostile) + "\n", encoding="utf-8", errors="surrogateescape")
    with caplog.at_level("WARNING", logger="reports.fleet"):
        assert fleet.previous(tmp_path, "default", "report", "html") == (None, None)
    ignored = [r for r in caplog.records if "previous report summary ignored" in r.getMessage()]
    assert len(ignored) == len(hostile) and all(str(log) in r.getMessage() for r in ignored)
    assert not any("<script>" in r.getMessage() for r in caplog.records)
    log.write_text(json.dumps(good) + "\n" + "\n".join(hostile) + "\n")
    figures, at = fleet.previous(tmp_path, "default", "report", "html")
    assert figures == {"gpu_fault": 2.5} and at is not None and at.isoformat() == "2026-11-01T00:00:00+00:00"
    # A summary of another cluster, kind or format is no previous report of this one.
    assert fleet.previous(tmp_path, "other", "report", "html") == (None, None)
    assert fleet.previous(tmp_path, "default", "hourly", "html") == (None, None)
    assert fleet.previous(tmp_path, "default", "report", "md") == (None, None)


def test_summary_file_is_cut_back_when_large(tmp_path):
    from datetime import UTC, datetime

    old = json.dumps({"v": 1, "cluster": "default", "kind": "hourly", "format": "html", "file": "x.html",
                      "generated_at": "2026-11-01T00:00:00+00:00", "gpu_hours_lost": {"gpu_fault": 1.0},
                      "pad": "p" * 400})
    (tmp_path / fleet.SUMMARIES).write_text((old + "\n") * 3000)  # > 1 MiB
    at = datetime(2026, 11, 2, tzinfo=UTC)
    fleet.record(tmp_path, "default", "hourly", "html", tmp_path / "report.html", at, {"gpu_fault": 7.5})
    lines = (tmp_path / fleet.SUMMARIES).read_text().splitlines()
    assert len(lines) == 1000 and json.loads(lines[-1])["gpu_hours_lost"] == {"gpu_fault": 7.5}
    assert fleet.previous(tmp_path, "default", "hourly", "html") == ({"gpu_fault": 7.5}, at)


# --- a real browser --------------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                  "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:  # .ci/run installs it: in CI a missing browser is a failure, not a skip
        assert not os.environ.get("CI"), "chromium is not installed (apt-get install -y chromium)"
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return exe


class _Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: _Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[_Node] = []
        self.text = ""

    def all(self, tag: str | None = None, cls: str | None = None) -> list[_Node]:
        out = []
        for c in self.children:
            if (tag is None or c.tag == tag) and (cls is None or cls in c.attrs.get("class", "").split()):
                out.append(c)
            out += c.all(tag, cls)
        return out

    def content(self) -> str:
        return (self.text + "".join(c.content() for c in self.children)).strip()


class _Dom(html.parser.HTMLParser):
    """The DOM Chromium serialised, as a tree (void elements do not nest)."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "rect", "line", "polyline", "path", "circle"}

    def __init__(self, text: str) -> None:
        super().__init__()
        self.root = self.cur = _Node("#root", {}, None)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        node = _Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(_Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        node = self.cur
        while node.parent is not None and node.tag != tag:
            node = node.parent
        if node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data):
        self.cur.text += data


def _png_colours(path: Path) -> int:
    width, _, bpp, rows = read_png(path)
    return len({bytes(line[i:i + 3]) for r, line in enumerate(rows) if r % 2 == 0
                for i in range(0, width * bpp, bpp * 2)})


# In a test copy only (the report itself carries no script and forbids one): after the window takes its
# size, paint a square at the top left, green when the page is no wider than the window, magenta when it
# scrolls sideways.
_PROBE = ("<script>function probe(){var d=document.getElementById('probe-x');if(!d){d=document.createElement('div');"
          "d.id='probe-x';d.style.cssText='position:fixed;top:0;left:0;width:40px;height:40px;z-index:99';"
          "document.body.appendChild(d);}var e=document.documentElement;"
          "d.style.background=e.scrollWidth<=window.innerWidth?'#00ff00':'#ff00ff';}"
          "probe();window.addEventListener('resize',probe);</script>")


def _fits(base: list[str], page: Path, width: int, tmp_path: Path) -> bool:
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    probe = tmp_path / f"probe-{width}.html"
    probe.write_text(text.replace("</body>", _PROBE + "</body>"))
    shot = tmp_path / f"probe-{width}.png"
    r = subprocess.run([*base, f"--window-size={width},300", f"--screenshot={shot}", probe.as_uri()],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    w, _, bpp, rows = read_png(shot)
    assert w == width
    pixel = tuple(rows[10][10 * bpp:10 * bpp + 3])
    assert pixel in ((0, 255, 0), (255, 0, 255)), pixel  # the probe ran
    return pixel == (0, 255, 0)


def _check_structure(dom: _Dom, flagged: int) -> None:
    """Headings in order, tables with headers, charts with a text alternative, titles and labelled axes,
    and every finding with its next step."""
    levels = [int(n.tag[1]) for n in dom.root.all() if re.fullmatch(r"h[1-6]", n.tag)]
    assert levels[0] == 1 and levels.count(1) == 1
    assert all(b <= a + 1 for a, b in zip(levels, levels[1:], strict=False)), levels
    for t in dom.root.all("table"):
        heads = t.all("th")
        assert heads and all(h.content() for h in heads) and t.all("thead")
    ids = {n.attrs["id"]: n for n in dom.root.all() if "id" in n.attrs}
    svgs = dom.root.all("svg")
    assert svgs
    for svg in svgs:
        assert svg.attrs.get("role") == "img"
        label_ids = svg.attrs["aria-labelledby"].split()
        assert [ids[i].tag for i in label_ids] == ["title", "desc"] and all(ids[i].content() for i in label_ids)
        texts = {c: [n.content() for n in svg.all("text", c)] for c in ("x-label", "y-label")}
        assert all(texts["x-label"]) and texts["x-label"], svg.attrs
        assert all(texts["y-label"]) and texts["y-label"], svg.attrs
    jobs = dom.root.all("article", "job")
    assert len(jobs) == flagged
    for job in jobs:
        step = job.all("div", "next")
        assert step and "Next step" in step[0].content() and step[0].all("pre"), job.attrs
        assert any(p.content().startswith("$ kubectl ") for p in step[0].all("pre"))
        assert job.all("details")  # the raw evidence, folded


@pytest.mark.timeout(300)
@pytest.mark.parametrize("which", ["lakefix", "mixed"])
def test_report_in_headless_chromium(which, report_lake, sim_lakes, tmp_path):
    exe = _chromium()
    settings = report_lake if which == "lakefix" else sim_lakes("mixed")[0]
    page = write_report(settings, "html", tmp_path / "r.html")
    profile = tmp_path / "chromium-profile"
    base = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # Console messages (errors, CSP violations from an injected script) are logged as CONSOLE lines.
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    parsed = _Dom(dom.stdout)
    tags = {n.tag for n in parsed.root.all()}
    assert "script" not in tags and "img" not in tags  # no injected element in the DOM
    assert parsed.root.all("title")[0].content().startswith("gangscope report")
    assert "polyline" in tags
    flagged = page.read_text().count('<article class="job"')
    assert flagged > 0
    _check_structure(parsed, flagged)
    if which == "lakefix":
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout  # the name is shown, as text
    for width in (360, 1280):
        assert _fits(base, page, width, tmp_path), f"the page scrolls sideways at {width} px"
        shot = tmp_path / f"shot-{width}.png"
        r = subprocess.run([*base, f"--window-size={width},2000", f"--screenshot={shot}", page.as_uri()],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
        assert read_png(shot)[0] == width
        # A blank or unstyled page has a handful of colours; charts, badges and bars give many more.
        assert _png_colours(shot) > 40


def test_overflow_probe_sees_a_page_too_wide(tmp_path):
    """The probe is not blind: a page wider than the window is caught."""
    exe = _chromium()
    page = tmp_path / "wide.html"
    page.write_text('<!DOCTYPE html><html><head><meta name="viewport" content="width=device-width">'
                    '</head><body><div style="width:900px">wide</div></body></html>')
    base = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    assert not _fits(base, page, 360, tmp_path)
