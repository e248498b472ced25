"""bench/page.py's figures, without running the sandbox: each run's outcome is given (``run_once`` replaced), so
what is printed from it is checked. A run that landed no records (or built nothing, or answered no page) gives
ratios that mean nothing: the bench refuses, naming the run, and exits non-zero. Its p50 and p95 are nearest-rank.
No time is measured here."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from bench import page as bench

# Two runs, as the first round orders them: without the page, then with.
GOOD = {
    "batches": 100.0,
    "batch_s": 0.5,
    "records": 20_000.0,
    "builds": 20.0,
    "build_s": 3.0,
    "log": "last lines of the run's log",
}


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], without: dict, with_: dict, rounds: int = 1
) -> tuple[str, str]:
    """bench/page.py's main with each run's outcome given: (stdout, stderr); SystemExit propagates."""

    def run_once(page: bool, args: Any, work: Any) -> dict[str, Any]:
        return {"page": page, "took": [], **GOOD, **(with_ if page else without)}

    monkeypatch.setattr(bench, "run_once", run_once)
    monkeypatch.setattr(sys, "argv", ["bench/page.py", "--rounds", str(rounds)])
    bench.main()
    out = capsys.readouterr()
    return out.out, out.err


@pytest.mark.parametrize("empty", ["without", "with"])
def test_a_run_that_landed_no_records_is_refused(
    empty: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nothing = {"records": 0.0, "batches": 0.0, "batch_s": 0.0, "log": "kafka: broker unreachable"}
    took = {"took": [0.004] * 10}
    without, with_ = (nothing, took) if empty == "without" else ({}, {**nothing, **took})
    with pytest.raises(SystemExit) as e:
        _run(monkeypatch, capsys, without, with_)
    assert e.value.code not in (0, None)
    out, err = capsys.readouterr()
    message = f"{e.value.code}\n{err}"
    assert f"the run {empty} the page landed no records" in message
    assert "kafka: broker unreachable" in message  # why, from the run's log
    assert "page: runs=" not in out and "ratio" not in out + err  # no figure at all


def test_a_run_that_built_nothing_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        _run(monkeypatch, capsys, {"builds": 0.0, "build_s": 0.0}, {"took": [0.004]})
    assert e.value.code not in (0, None)
    assert "the run without the page finished no model build" in f"{e.value.code}{capsys.readouterr().err}"


def test_a_page_run_that_answered_no_request_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        _run(monkeypatch, capsys, {}, {"took": []})
    assert e.value.code not in (0, None)
    assert "the run with the page answered no page request" in f"{e.value.code}{capsys.readouterr().err}"


@pytest.mark.parametrize(
    ("ms", "p50", "p95"),
    [
        (list(range(1, 11)), 5, 10),  # nearest rank: the ceil(0.95 * 10) = 10th value
        ([30, 10, 20], 20, 30),  # the 3rd of 3, not the 2nd
        ([7], 7, 7),
        (list(range(1, 21)), 10, 19),
        (list(range(100, 0, -1)), 50, 95),
    ],
)
def test_p50_and_p95_are_nearest_rank(
    ms: list[int], p50: int, p95: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = _run(monkeypatch, capsys, {}, {"took": [m / 1000 for m in ms]})
    last = out.strip().splitlines()[-1]
    assert last.startswith("page: runs=2 ")
    assert f" requests={len(ms)} page_p50_ms={p50} page_p95_ms={p95}" in last
    assert " batch_ratio=1.00 " in last and " build_ratio=1.00 " in last


def test_nearest_rank() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert [bench.nearest_rank(values, q) for q in (0.01, 0.25, 0.26, 0.5, 0.75, 0.95, 1.0)] == [1, 1, 2, 2, 3, 4, 4]
    with pytest.raises(ValueError):
        bench.nearest_rank([], 0.95)


def test_landed_records_are_summed_over_topics() -> None:
    text = (
        "# TYPE gangscope_records_landed_total counter\n"
        'gangscope_records_landed_total{topic="k8s.events"} 120.0\n'
        'gangscope_records_landed_total{topic="metrics.samples"} 3000.0\n'
        "# TYPE gangscope_batch_seconds histogram\n"
        'gangscope_batch_seconds_bucket{le="+Inf"} 4.0\n'
        "gangscope_batch_seconds_count 4.0\ngangscope_batch_seconds_sum 2.0\n"
        "# TYPE gangscope_model_build_seconds histogram\n"
        "gangscope_model_build_seconds_count 2.0\ngangscope_model_build_seconds_sum 5.0\n"
    )
    got = bench.figures(text)
    assert got == {"records": 3120.0, "batches": 4.0, "batch_s": 0.5, "builds": 2.0, "build_s": 2.5}
    # A run that landed nothing: the counter has no topic yet, the histograms count zero.
    empty = bench.figures(
        "# TYPE gangscope_records_landed_total counter\n"
        "# TYPE gangscope_batch_seconds histogram\ngangscope_batch_seconds_count 0.0\ngangscope_batch_seconds_sum 0.0\n"
        "# TYPE gangscope_model_build_seconds histogram\n"
        "gangscope_model_build_seconds_count 0.0\ngangscope_model_build_seconds_sum 0.0\n"
    )
    assert empty["records"] == 0 and empty["batches"] == 0 and empty["builds"] == 0


def test_figures_read_gangscopes_own_exposition() -> None:
    """The names figures() reads are the ones gangscope exposes (a renamed metric would read as nothing landed)."""
    from prometheus_client import generate_latest

    from gangscope import telemetry

    before = bench.figures(generate_latest(telemetry.REGISTRY).decode())
    telemetry.RECORDS_LANDED.labels(topic="bench-page-test").inc(7)
    telemetry.BATCH_SECONDS.observe(0.25)
    telemetry.MODEL_BUILD_SECONDS.observe(2.0)
    after = bench.figures(generate_latest(telemetry.REGISTRY).decode())
    assert after["records"] - before["records"] == 7
    assert after["batches"] - before["batches"] == 1 and after["builds"] - before["builds"] == 1
