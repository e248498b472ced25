"""Simulator variants (issues 20, 23): first contact in the middle of a cluster's life, PodGroups named apart
from their jobs, cold image pulls; and the classifier keeps healthy jobs healthy on them (real land + models)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from collectors.simulate import generate
from collectors.simulate.variants import VARIANTS
from gangscope.records import parse_rfc3339


def _events(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "k8s.jsonl").read_text().splitlines()]


def _cond(obj: dict, ctype: str) -> dict | None:
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == ctype), None)


def test_capture_starts_with_the_initial_list(tmp_path: Path) -> None:
    g = generate("gpu_fault@after", tmp_path, seed=3, nodes=16, interval=60.0)
    truth = json.loads((g.directory / "truth.json").read_text())
    capture = parse_rfc3339(truth["capture_at"])
    assert truth["variant"] == "gpu_fault@after" and capture > parse_rfc3339(truth["start"])
    evs = _events(g.directory)
    first = [e for e in evs if parse_rfc3339(e["observedAt"]) < capture + timedelta(seconds=1)]
    assert parse_rfc3339(evs[0]["observedAt"]) >= capture  # nothing is watched before the capture
    assert first and all(e["type"] == "ADDED" for e in first)
    keys = [(e["object"]["apiVersion"], e["object"]["kind"], e["object"]["metadata"].get("namespace"),
             e["object"]["metadata"]["name"]) for e in first]
    assert len(keys) == len(set(keys))  # each object once, in its state at the capture
    running = [e["object"] for e in first
               if e["object"]["kind"] == "Pod" and e["object"]["status"]["phase"] == "Running"]
    assert running
    for p in running:  # their history is only in their own timestamps, all before the capture
        bound = parse_rfc3339(_cond(p, "PodScheduled")["lastTransitionTime"])
        started = parse_rfc3339(p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
        assert parse_rfc3339(p["metadata"]["creationTimestamp"]) <= bound < started < capture
    # Kueue-managed gangs have PodGroups named <job>-pg; their pods carry that name, and the truth says so.
    pgs = {e["object"]["metadata"]["name"] for e in evs if e["object"]["kind"] == "PodGroup"
           and e["object"]["apiVersion"].startswith("scheduling.x-k8s.io")}
    kueue_gangs = [j for j in truth["jobs"] if j["kueue"] and j["gang"] == "coscheduling"]
    assert kueue_gangs and all(j["pod_group"] == j["job"] + "-pg" and j["pod_group"] in pgs for j in kueue_gangs)
    labels = {e["object"]["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") for e in evs
              if e["object"]["kind"] == "Pod"}
    assert {j["pod_group"] for j in kueue_gangs} <= labels
    # Metrics keep their history in the @after variants.
    first_sample = next(line for line in (g.directory / "metrics.prom").open() if not line.startswith("#"))
    assert int(first_sample.rsplit(" ", 1)[1]) < capture.timestamp() * 1000


def test_running_variant_has_no_history_and_drops_what_it_cannot_meet(tmp_path: Path) -> None:
    g = generate("healthy@running", tmp_path, seed=1, nodes=16, interval=60.0)
    truth = json.loads((g.directory / "truth.json").read_text())
    capture_ms = parse_rfc3339(truth["capture_at"]).timestamp() * 1000
    stamps = [int(line.rsplit(" ", 1)[1]) for line in (g.directory / "metrics.prom").open() if not line.startswith("#")]
    assert stamps and min(stamps) >= capture_ms
    # A finished run deleted before the capture is not in the truth (gangscope cannot meet it).
    m = generate("topology_misplacement@after", tmp_path, seed=1, nodes=16, interval=60.0)
    jobs = json.loads((m.directory / "truth.json").read_text())["jobs"]
    assert [j["root_cause"] for j in jobs if j["job"] == "gpt-13b-pretrain"] == ["topology_misplacement"]


def test_slow_pull_binds_fast_and_starts_late(tmp_path: Path) -> None:
    g = generate("healthy@slow_pull", tmp_path, seed=1, nodes=16, interval=60.0)
    gaps = []
    for e in _events(g.directory):
        p = e["object"]
        if p["kind"] != "Pod" or p["status"]["phase"] != "Running":
            continue
        bound = parse_rfc3339(_cond(p, "PodScheduled")["lastTransitionTime"])
        ready = parse_rfc3339(_cond(p, "Ready")["lastTransitionTime"])
        gaps.append((ready - bound).total_seconds())
    assert gaps and min(gaps) >= 64 and max(gaps) <= 103
    timeouts = {e["object"]["spec"]["scheduleTimeoutSeconds"] for e in _events(g.directory)
                if e["object"]["kind"] == "PodGroup" and e["object"]["apiVersion"].startswith("scheduling.x-k8s.io")}
    assert timeouts == {60}


def test_every_variant_names_a_scenario() -> None:
    from collectors.simulate.scenarios import SCENARIOS

    assert all(v.scenario in SCENARIOS for v in VARIANTS.values())
    points = {n.split("@")[1] for n in VARIANTS}
    assert {"before", "onset", "after", "running", "slow_pull"} <= points


@pytest.mark.parametrize("name", ["healthy@slow_pull", "healthy@running"])
def test_healthy_variants_stay_healthy(tmp_path: Path, name: str) -> None:
    from gangscope.app.evaluate import run_scenario

    results, phantoms, _ = run_scenario(name, 1, 16, tmp_path)
    assert phantoms == []
    assert results and [(job, p) for job, t, p, _ in results if p != t] == []
    assert {t for _, t, _, _ in results} == {"healthy"}
