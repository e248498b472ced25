"""Migration baseline: figures match values computed here from the same rows; compare shows deltas."""

from __future__ import annotations

import json
import statistics
from datetime import timedelta

import pytest

from gangscope.app.cli import main
from gangscope.errors import UserError
from reports import baseline
from tests.reports import lakefix


def _pct(values, p):
    """Independent percentile: statistics' inclusive method is the same linear interpolation."""
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def _expected(jobs):
    """The KPIs straight from lakefix's job tuples (see its column list)."""
    waits = [j[9] for j in jobs if j[3] == "kueue" and j[9] is not None]
    # Created to all members running: the admission wait (when admitted) plus the assembly after it.
    asm = [(j[9] if j[9] is not None and j[5] != "admission_quota" else 0) + j[10]
           for j in jobs if j[10] is not None and not j[11]]
    gang = [j for j in jobs if j[4] and j[10] is not None]
    compliant = [j[14] for j in jobs if j[13] is not None]
    classes = {}
    for j in jobs:
        if j[5] != "healthy":
            classes[j[5]] = classes.get(j[5], 0) + 1
    return {
        "jobs": len(jobs),
        "admission_wait_p50_s": statistics.median(waits) if waits else None,
        "admission_wait_p95_s": _pct(waits, 95) if waits else None,
        "admission_wait_p99_s": _pct(waits, 99) if waits else None,
        "gang_assembly_p50_s": statistics.median(asm) if asm else None,
        "gang_assembly_p95_s": _pct(asm, 95) if asm else None,
        "gang_timeout_rate": sum(1 for j in gang if j[11]) / len(gang),
        "topology_compliance_rate": sum(compliant) / len(compliant),
        "throughput_per_gpu": {j[1]: j[15] for j in sorted(jobs, key=lambda j: j[1]) if j[15] is not None},
        "idle_gpu_hours": sum(j[16] for j in jobs),
        "findings": sum(classes.values()),
        "findings_by_class": dict(sorted(classes.items())),
    }


def _close(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if a is None or b is None:
        return a is b
    return a == pytest.approx(b)


def test_snapshot_matches_independent_figures(report_lake, tmp_path):
    out = tmp_path / "before.json"
    assert main(["baseline", "snapshot", "--out", str(out), "--until", lakefix.T1.isoformat(),
                 "--data", str(report_lake.data)]) == 0
    snap = json.loads(out.read_text())
    assert snap["gangscope_baseline"] == 1 and snap["cluster"] == "default"
    assert snap["systems"] == {"queue": ["kueue"], "gang": ["coscheduling"]}
    assert snap["window"]["until"] == lakefix.T1.isoformat().replace("+00:00", "Z")
    for key, want in _expected(lakefix.JOBS).items():
        assert _close(snap["overall"][key], want), (key, snap["overall"][key], want)
    assert _close(snap["api"]["kueue_coscheduling"], snap["overall"])
    assert snap["api"]["native"]["jobs"] == 0
    for cq in ("cq-a", "cq-b"):
        want = _expected([j for j in lakefix.JOBS if j[2] == cq])
        for key in ("admission_wait_p95_s", "gang_timeout_rate", "idle_gpu_hours", "findings_by_class"):
            assert _close(snap["cluster_queues"][cq][key], want[key]), (cq, key)


def test_native_window_and_compare(report_lake, tmp_path, capsys):
    before = tmp_path / "before.json"
    assert main(["baseline", "snapshot", "--out", str(before), "--until", lakefix.T1.isoformat(),
                 "--data", str(report_lake.data)]) == 0
    capsys.readouterr()
    assert main(["baseline", "compare", str(before), "--format", "json", "--data", str(report_lake.data)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["current"]["systems"] == {"queue": [], "gang": ["native"]}
    rows = {(r["scope"], r["kpi"]): r for r in result["rows"]}
    native = _expected(lakefix.NATIVE_JOBS)
    old = _expected(lakefix.JOBS)
    r = rows[("api kueue_coscheduling -> native", "gang_assembly_p95_s")]
    assert r["baseline"] == pytest.approx(old["gang_assembly_p95_s"])
    assert r["current"] == pytest.approx(native["gang_assembly_p95_s"])
    assert r["delta"] == pytest.approx(native["gang_assembly_p95_s"] - old["gang_assembly_p95_s"])
    assert r["verdict"] == "better"  # gangs that assembled did so faster...
    r = rows[("api kueue_coscheduling -> native", "gang_timeout_rate")]
    assert (r["baseline"], r["current"], r["verdict"]) == (pytest.approx(1 / 4), pytest.approx(1 / 3), "worse")
    r = rows[("overall", "topology_compliance_rate")]
    assert r["verdict"] == "better" and r["current"] == pytest.approx(2 / 3)
    r = rows[("overall", "throughput_per_gpu[llama-a]")]
    assert (r["baseline"], r["current"], r["verdict"]) == (900.0, 950.0, "better")
    r = rows[("overall", "admission_wait_p95_s")]
    assert r["current"] is None and r["verdict"] == "n/a"  # no Kueue after the move
    assert ("overall", "findings[gang_assembly]") in rows
    # The table form carries the same rows.
    assert main(["baseline", "compare", str(before), "--data", str(report_lake.data)]) == 0
    table = capsys.readouterr().out
    assert "gang=native" in table and "gang=coscheduling" in table
    assert any("gang_timeout_rate" in line and "worse" in line for line in table.splitlines())


def test_compare_two_files(report_lake, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    baseline.snapshot(report_lake, a, until=lakefix.T1)
    baseline.snapshot(report_lake, b, since=lakefix.T1, until=lakefix.T1 + timedelta(days=1))
    result = baseline.compare_file(report_lake, a, against=b)
    assert {r["scope"] for r in result["rows"]} == {"overall", "api kueue_coscheduling -> native"}


def test_bad_baseline_file(report_lake, tmp_path):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(UserError, match="not a gangscope baseline"):
        baseline.compare_file(report_lake, tmp_path / "x.json")
    with pytest.raises(UserError, match="does not exist"):
        baseline.load(tmp_path / "missing.json")


def test_percentile_is_linear_interpolation():
    assert baseline.percentile([1, 2, 3, 4], 0.5) == 2.5
    assert baseline.percentile([10], 0.99) == 10
    assert baseline.percentile([], 0.5) is None
