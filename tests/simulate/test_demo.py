"""`gangscope demo` reports a stage that is not built and stops cleanly; its scoring is honest."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from gangscope.app.demo import _score, run
from gangscope.config import Settings


def test_demo_stops_after_simulating_when_replay_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str],
                                                          offline_settings: Settings) -> None:
    monkeypatch.setitem(sys.modules, "gangscope.app.replay", None)  # its import fails, as if not built
    args = argparse.Namespace(out=str(tmp_path / "demo"), seed=1, data=None)
    assert run(offline_settings, args) == 0
    out = capsys.readouterr().out
    assert "replay not built yet (issue #3): stopping after simulating" in out
    assert (tmp_path / "demo" / "scenario" / "truth.json").is_file()
    assert not (tmp_path / "demo" / "report.html").exists()


def test_score_counts_primary_class_and_false_alarms() -> None:
    truth = {"jobs": [
        {"namespace": "a", "job": "x", "root_cause": "healthy"},
        {"namespace": "a", "job": "x", "root_cause": "topology_misplacement"},  # the latest run counts
        {"namespace": "a", "job": "y", "root_cause": "gpu_fault"},
        {"namespace": "a", "job": "z", "root_cause": "healthy"},
    ]}
    rows = [{"namespace": "a", "job": "x", "root_cause": "unexplained_slowdown"},
            {"namespace": "a", "job": "x", "root_cause": "topology_misplacement"},
            {"namespace": "a", "job": "y", "root_cause": "interconnect_degradation"},
            {"namespace": "a", "job": "z", "root_cause": "preemption"}]
    text = _score(rows, truth)
    assert text.startswith("demo: 1 of 2 injected incidents diagnosed with the injected class; 1 healthy jobs")
    assert "a/y: injected gpu_fault, diagnosed interconnect_degradation" in text
    assert "a/z: healthy, diagnosed preemption" in text
