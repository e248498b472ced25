"""The real chain on a simulator scenario: simulate -> replay through the embedded Kafka broker and the
pipeline -> models -> `gangscope diagnose --all --format json`; every job gets its true class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangscope.app import cli
from gangscope.rootcauses import ROOT_CAUSES


def test_simulated_scenario_end_to_end(settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    simulate = pytest.importorskip("collectors.simulate")
    from gangscope.app.replay import replay

    g = simulate.generate("admission_quota", tmp_path / "sim", seed=3, nodes=4)
    stats = replay(settings, [str(g.directory / "k8s.jsonl")], [str(g.directory / "metrics.prom")], progress=None)
    assert stats.landed
    capsys.readouterr()
    assert cli.main(["diagnose", "--all", "--format", "json", "--data", str(settings.data)]) == 0
    rows = json.loads(capsys.readouterr().out)
    order = list(ROOT_CAUSES)
    primary: dict[tuple[str, str], str] = {}
    for r in rows:
        key = (r["namespace"], r["job"])
        if key not in primary or order.index(r["root_cause"]) < order.index(primary[key]):
            primary[key] = r["root_cause"]
    jobs = json.loads((g.directory / "truth.json").read_text())["jobs"]
    truth = {(j["namespace"], j["job"]): j["root_cause"] for j in jobs}
    assert primary == truth
    assert "admission_quota" in truth.values()
    # Nothing new landed: a second diagnose builds nothing and answers the same.
    assert cli.main(["diagnose", "--all", "--format", "json", "--data", str(settings.data)]) == 0
    assert json.loads(capsys.readouterr().out) == rows


def test_models_build_command(offline_settings, capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline import lake

    assert cli.main(["models", "build", "--data", str(offline_settings.data)]) == 2  # no lake: a clear error
    assert "no lake at" in capsys.readouterr().err
    lake.connect(offline_settings).close()  # an empty lake: builds, and finds nothing
    assert cli.main(["models", "build", "--data", str(offline_settings.data)]) == 0
    assert "built" in capsys.readouterr().out
    assert cli.main(["diagnose", "--data", str(offline_settings.data)]) == 0
    assert capsys.readouterr().out.strip() == "no findings"


def test_diagnose_rejects_bad_time(offline_settings, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["diagnose", "--since", "yesterday", "--data", str(offline_settings.data)])
    assert "not a time" in capsys.readouterr().err
