"""The upstream parsers' own test cases (upstream_cases.json: prometheus/common expfmt, Prometheus textparse, the
prometheus_client parsers), through the live scrape path and the replay-file parse: every valid case yields the
samples upstream gets, every invalid one an error naming its line, the lines around it still parsed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from collectors.metrics.parse import parse_text
from collectors.metrics.replayfile import parse_slice
from collectors.metrics.scrape import _parse_scrape, decode_body

DOC = json.loads((Path(__file__).parent / "upstream_cases.json").read_text(encoding="utf-8"))
CASES = DOC["cases"]
# One exposition may not repeat # HELP/# TYPE/# UNIT or give them after the family's samples (expfmt,
# prometheus_client); a replay file holds many scrapes, and CONTRACT section 2 lets them repeat there.
REPEATS_OK_IN_REPLAY = {c["id"] for c in CASES if c.get("replay", "").startswith("replay: accepted")}


def _v(v: float | str) -> str:
    v = float(v)
    return "NaN" if math.isnan(v) else repr(v)


def _expected(case: dict) -> list[tuple]:
    return [(n, sorted(lb.items()), _v(v), ts) for n, lb, v, ts in case["samples"]]


def _got(metric, labels, values, ts) -> list[tuple]:
    return [(n, sorted(lb.items()), _v(v), t) for n, lb, v, t in zip(metric, labels, values, ts, strict=True)]


def test_the_table_covers_every_suite() -> None:
    by = {}
    for c in CASES:
        by.setdefault(c["source"], set()).add(c["expect"])
    assert set(by) == set(DOC["sources"]) and all(v == {"samples", "error"} for v in by.values()), by
    assert all(c["expect"] == "samples" or c.get("error_line") for c in CASES)
    assert len(REPEATS_OK_IN_REPLAY) == 12
    assert len(CASES) > 450


def _eof_only(case: dict) -> bool:
    """A cut case (OpenMetrics without # EOF) whose only fault upstream is the missing # EOF."""
    up = case["upstream"]
    return "does not end with # EOF" in up.get("textparse", "") or (
        "textparse" not in up and "Missing # EOF" in up.get("client_python", ""))


CUT = [c for c in CASES if c.get("cut")]
# A broken line between two good ones: the error moves down one line, both good lines land (inputs holding # EOF
# before their end are about what follows it: left out).
SANDWICHED = [c for c in CASES if c["expect"] == "error" and not c.get("cut")
              and "# EOF" not in c["input"].removesuffix("\n").removesuffix("# EOF")]


def _live(text: str, fmt: str):  # type: ignore[no-untyped-def]
    body = text.encode("utf-8", "surrogateescape")  # what the exporter sent, bytes and all
    return _parse_scrape(decode_body(body), fmt, cluster="c", target="t", job="j", instance="i", scraped_at_ms=1,
                         fetch_s=0.0, labels={})


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_live_scrape(case: dict) -> None:
    b, warnings = _live(case["input"], case["format"])
    got = _got(b.series_metric, b.series_labels, b.sample_value, b.sample_ts_ms)
    assert len(warnings) == case.get("warnings", 0), warnings  # skipped on purpose: said, once per reason
    if case["expect"] == "samples":
        assert b.up and b.error is None, b.error
        assert got == _expected(case)
        return
    assert b.error is not None and f"line {case['error_line']}:" in b.error, (b.error, case.get("note"))
    if case.get("cut"):  # OpenMetrics without # EOF: the body may be cut, none of it lands
        assert not b.up and not got
    elif "samples" in case:  # the good lines around the broken one land; not one good line fails the scrape
        assert b.up == bool(case["samples"]) and got == _expected(case)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_replay_parse(case: dict) -> None:
    """The parse a replay file's lines get (timestamps not required here: few upstream cases carry them)."""
    p = parse_slice(case["input"], case["format"], 1, require_timestamps=False)
    got = _got(p.metric, p.labels, p.value, p.ts_ms)
    assert len(p.warnings) == case.get("warnings", 0), p.warnings
    if case["expect"] == "samples" or (case.get("cut") and _eof_only(case)):  # a file's # EOF: checked at its end
        assert p.errors == []
    elif case.get("cut"):  # the line is broken too, # EOF or not
        assert p.errors and p.errors[0][0] == case["error_line"], (p.errors, case["upstream"])
    else:
        lines = [line for line, _ in p.errors]
        if case["id"] in REPEATS_OK_IN_REPLAY:
            assert case["error_line"] not in lines
            return
        assert lines and lines[0] == case["error_line"], (p.errors, case.get("note"))
    if "samples" in case and not case.get("cut"):
        assert got == _expected(case)


def test_native_histograms_warn_once_per_family_and_keep_the_classic_samples() -> None:
    text = ('# TYPE h histogram\nh{a="1"} {count:2,sum:3,schema:0,zero_threshold:0.001,zero_count:0}\n'
            'h{a="2"} {count:4,sum:5,schema:0,zero_threshold:0.001,zero_count:1}\nh_bucket{le="1"} 2\n'
            'h_count 2\nh_sum 3\n# EOF\n')
    p = parse_text(text, fmt="openmetrics")
    assert not p.errors and p.metric == ["h_bucket", "h_count", "h_sum"]
    assert p.labels[0] == {"le": "1.0"}  # as Prometheus 3 stores it
    assert len(p.warnings) == 1 and p.warnings[0][0] == 2 and "'h'" in p.warnings[0][1]
    broken = parse_text("# TYPE nh histogram\nnh {count:24\n# EOF\n", fmt="openmetrics")
    assert [line for line, _ in broken.errors] == [2] and not broken.warnings


def test_a_broken_line_costs_only_itself_and_its_reason_stays_short() -> None:
    text = "good 1\n" + "x" * (1 << 20) + "\nbad\x00name 2\nalso_good{a=\"b\"} 3\n"
    p = parse_text(text)
    assert p.metric == ["good", "also_good"] and [line for line, _ in p.errors] == [2, 3]
    assert all(len(reason) < 200 for _, reason in p.errors)


@pytest.mark.parametrize("case", CUT, ids=[c["id"] for c in CUT])
def test_cut_cases_with_their_eof(case: dict) -> None:
    """The cases upstream refuses for a missing # EOF, given one: whole where that was their only fault, else
    still an error on the line upstream names (a missing # EOF hid nothing)."""
    text = case["input"] + ("" if case["input"].endswith("\n") or not case["input"] else "\n") + "# EOF\n"
    b, _ = _live(text, "openmetrics")
    if _eof_only(case):
        assert b.up and b.error is None, b.error
    else:
        assert b.error is not None and f"line {case['error_line']}:" in b.error, (b.error, case["upstream"])


@pytest.mark.parametrize("case", SANDWICHED, ids=[c["id"] for c in SANDWICHED])
def test_a_broken_line_between_good_ones(case: dict) -> None:
    om = case["format"] == "openmetrics"
    body = case["input"].removesuffix("# EOF\n").removesuffix("# EOF") if om else case["input"]
    text = "gs_before 1\n" + body + ("" if body.endswith("\n") else "\n") + "gs_after 2\n" + ("# EOF\n" if om else "")
    b, _ = _live(text, case["format"])
    assert b.up and b.error is not None and f"line {case['error_line'] + 1}:" in b.error, (b.error, case.get("note"))
    assert {"gs_before", "gs_after"} <= set(b.series_metric)
    p = parse_slice(text, case["format"], 1, require_timestamps=False)
    lines = [line for line, _ in p.errors]
    assert {"gs_before", "gs_after"} <= set(p.metric)
    if case["id"] not in REPEATS_OK_IN_REPLAY:
        assert lines and lines[0] == case["error_line"] + 1, p.errors
