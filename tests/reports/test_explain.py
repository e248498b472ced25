"""`gangscope explain NAMESPACE/JOB` on the simulator's jobs, watched from the start and first seen in an
initial list: a healthy job passes every layer, a stuck one fails at the layer it is stuck in and nowhere
before it, a slow one at throughput and the layer that explains it; each with its finding and next steps.
The jobs are chosen by the scenario's ground truth, never by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import lake
from reports import explain

ROOT = Path(__file__).resolve().parents[2]
ORDER = [k for k, _ in explain.LAYERS]
STUCK = ("gang_assembly", "admission_quota", "admission_topology")
SLOW = ("interconnect_degradation", "unexplained_slowdown", "topology_misplacement")


def _truth_job(truth: dict, classes: tuple[str, ...]) -> tuple[str, str]:
    """A job whose every run in the truth has one of ``classes`` (a rerun of another class would be ambiguous)."""
    runs: dict[tuple[str, str], set[str]] = {}
    for j in truth["jobs"]:
        runs.setdefault((j["namespace"], j["job"]), set()).add(j["root_cause"])
    return next(k for k, causes in sorted(runs.items()) if causes <= set(classes) and causes)


def _explain(settings, job: tuple[str, str]) -> explain.Explanation:
    con = lake.connect(settings, read_only=True)
    try:
        return explain.explain(con, f"{job[0]}/{job[1]}")
    finally:
        con.close()


def _verdicts(e: explain.Explanation) -> dict[str, str]:
    return {layer.key: layer.verdict for layer in e.layers}


@pytest.mark.parametrize("scenario", ["mixed", "gang_assembly@after"])
def test_a_healthy_job_passes_every_layer(sim_lakes, scenario: str) -> None:
    settings, truth = sim_lakes(scenario)
    job = _truth_job(truth, ("healthy",))
    e = _explain(settings, job)
    assert [layer.key for layer in e.layers] == ORDER
    assert e.primary == "healthy" and not [f for f in e.findings if f["root_cause"] != "healthy"]
    v = _verdicts(e)
    assert "problem" not in v.values(), v
    assert v["gang"] == "ok" and v["startup"] == "ok" and v["gpus"] == "ok", v
    assert v["throughput"] == "ok" and e.layers[ORDER.index("throughput")].evidence["baseline"]
    text = explain.to_text(e)
    assert text.startswith(f"{job[0]}/{job[1]}") and "no finding" in text and "PROBLEM" not in text


@pytest.mark.parametrize("scenario", ["mixed", "gang_assembly@after"])
def test_a_stuck_job_fails_at_its_layer_and_nowhere_before_it(sim_lakes, scenario: str) -> None:
    settings, truth = sim_lakes(scenario)
    job = _truth_job(truth, STUCK)
    e = _explain(settings, job)
    cause = e.primary
    assert cause in STUCK
    layer = explain.CLASS_LAYER[cause]
    v = _verdicts(e)
    assert v[layer] in ("problem", "recovered"), v
    assert all(v[k] != "problem" for k in ORDER[:ORDER.index(layer)]), v  # what comes before it is fine
    stuck = e.layers[ORDER.index(layer)]
    assert stuck.findings == [cause] and stuck.summary.startswith(cause)
    (finding,) = [f for f in e.findings if f["root_cause"] == cause]
    assert finding["next_steps"] and finding["evidence_text"]
    text = explain.to_text(e)
    assert f"finding: {cause}" in text and "next: " in text and "$ kubectl " in text


@pytest.mark.parametrize("scenario", ["mixed", "interconnect_degradation@after"])
def test_a_slow_job_fails_at_throughput_and_the_layer_that_explains_it(sim_lakes, scenario: str) -> None:
    settings, truth = sim_lakes(scenario)
    job = _truth_job(truth, SLOW)
    e = _explain(settings, job)
    assert e.primary in SLOW
    v = _verdicts(e)
    assert v["queue"] in ("ok", "not applicable") and v["gang"] == "ok" and v["startup"] == "ok", v
    held = ("problem", "recovered")  # the fault may have ended within the hour
    assert v["throughput"] in held and v[explain.CLASS_LAYER[e.primary]] in held, v
    tp = e.layers[ORDER.index("throughput")].evidence
    assert tp["lowest_ratio"] < 0.8 and tp["dips"]


def test_json_and_the_closest_names_of_an_unknown_job(sim_lakes) -> None:
    settings, truth = sim_lakes("mixed")
    ns, job = _truth_job(truth, SLOW)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")}, "PYTHONPATH": str(ROOT)}
    run = lambda *a: subprocess.run([sys.executable, "-m", "gangscope.app.cli", "explain", *a, "--data",  # noqa: E731
                                     str(settings.data), "--no-build"], capture_output=True, text=True, env=env,
                                    timeout=300, cwd=ROOT)
    out = run(f"{ns}/{job}", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["namespace"], doc["job"]) == (ns, job) and [x["key"] for x in doc["layers"]] == ORDER
    assert doc["findings"] and all(f["started_at"].endswith("Z") for f in doc["findings"])
    assert all(set(x) >= {"verdict", "summary", "evidence", "findings"} for x in doc["layers"])
    missing = run(f"{ns}/{job[:-2]}")
    assert missing.returncode == 2 and f"no job {ns}/{job[:-2]}" in missing.stderr
    assert f"{ns}/{job}" in missing.stderr.split("closest:")[1]
    bare = run(job)  # the job's name alone: its NAMESPACE/JOB offered
    assert bare.returncode == 2 and f"expected NAMESPACE/JOB, got '{job}'" in bare.stderr
    assert f"{ns}/{job}" in bare.stderr.split("closest:")[1]


def test_a_running_service_that_keeps_the_build_from_committing_leaves_the_models_as_built(
        sim_lakes, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`explain` (and `diagnose`) beside a running `gangscope run` on a loaded machine: their own model build lost
    every commit to the service's builds and landings and the command failed ("Failed to commit DuckLake
    transaction"). They now read the models as the service last built them, and say so; a model that fails for
    its own reasons still fails the command."""
    import argparse

    import duckdb

    from pipeline import models
    from reports import cli

    settings, truth = sim_lakes("mixed")
    ns, job = _truth_job(truth, SLOW)

    def busy(*args: object, **kwargs: object) -> None:
        raise duckdb.TransactionException("TransactionContext Error: Failed to commit DuckLake transaction")

    monkeypatch.setattr(models, "build", busy)
    args = argparse.Namespace(job=f"{ns}/{job}", no_build=False, format="json")
    assert cli._explain(settings, args) == 0
    out, err = capsys.readouterr()
    assert "note: models not rebuilt: another process is writing the lake" in err and "as last built at" in err
    assert (json.loads(out)["namespace"], json.loads(out)["job"]) == (ns, job)
    assert cli._diagnose(settings, argparse.Namespace(since=None, until=None, all=False, no_build=False,
                                                      format="json")) == 0
    assert any(f["job"] == job for f in json.loads(capsys.readouterr().out))

    def broken(*args: object, **kwargs: object) -> None:
        raise duckdb.BinderException("Binder Error: column x not found")

    monkeypatch.setattr(models, "build", broken)
    with pytest.raises(duckdb.BinderException):
        cli._explain(settings, args)
