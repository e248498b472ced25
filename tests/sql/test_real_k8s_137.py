"""The models on objects written by a real Kubernetes 1.37 control plane, Kueue v0.19.2 and kwok (the captures in
tests/fixtures/real-k8s-1.37/, made by tests/k8s_real/test_scenarios.py; see the README there), beside the
hand-made reference fixtures: each capture landed as watched, and as first seen in an initial list at its end
(every object ADDED in its last state, its history only in its own timestamps)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.sql.realk8s import FIXTURES, first_contact, judge, observed

# capture -> every job it holds and its expected primary class (nothing else may be reported).
CASES: dict[str, dict[str, str]] = {
    "quota": {"q-fits": "healthy", "q-short": "admission_quota"},
    "topology": {"t-fits": "healthy", "t-split": "admission_topology"},
    "gang": {"tj-stuck": "gang_assembly", "g-stuck": "gang_assembly", "tj-ok": "healthy", "g-ok": "healthy"},
    "preempt": {"p-low": "preemption", "p-high": "healthy"},
    "deleted": {"d-done": "healthy", "d-running": "healthy"},
    "node": {"n-ok": "healthy"},
    "crash": {"c-ok": "healthy"},
}
# The classes of issue 31 (node_failure, workload_crash) on the real controllers' objects.
PENDING = {"node": ("n-lost", "node_failure"), "crash": ("c-crash", "workload_crash")}
# Jobs that no longer exist when the initial list is taken (deleted before the collector started): never seen.
GONE_AT_END = {"deleted": {"d-done"}}


NAMES = sorted(CASES)


def _lines() -> list[str]:
    """The scenarios' captures in one stream, in watch order: they were one capture, split per scenario, and the
    models' "now" is the newest event of the whole cluster (a quiet namespace's waits are measured against it)."""
    lines = [ln for name in NAMES for ln in (FIXTURES / f"{name}.jsonl").read_text().splitlines()]
    return sorted(lines, key=observed)


def _judged(lines: list[str], work: Path) -> dict[tuple[str, str], str]:
    work.mkdir(parents=True, exist_ok=True)
    f = work / "capture.jsonl"
    f.write_text("".join(f"{line}\n" for line in lines))
    return judge([f], work / "data")


@pytest.fixture(scope="module")
def as_watched(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    return _judged(_lines(), tmp_path_factory.mktemp("watched"))


@pytest.fixture(scope="module")
def first_seen(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """A collector started at the end of the capture: everything in its initial list."""
    lines = _lines()
    return _judged(first_contact(lines, observed(lines[-1]) - timedelta(seconds=1)), tmp_path_factory.mktemp("first"))


def _of(name: str, got: dict[tuple[str, str], str]) -> dict[str, str]:
    """The jobs of one scenario, without the one whose class is pending (issue 31)."""
    pending = PENDING.get(name, ("", ""))[0]
    return {job: c for (ns, job), c in got.items() if ns == f"gs-{name}" and job != pending}


def test_no_job_outside_the_scenarios(as_watched: dict[tuple[str, str], str],
                                      first_seen: dict[tuple[str, str], str]) -> None:
    want = {(f"gs-{n}", j) for n in NAMES for j in [*CASES[n], *([PENDING[n][0]] if n in PENDING else [])]}
    assert set(as_watched) == want
    assert set(first_seen) == want - {(f"gs-{n}", j) for n, jobs in GONE_AT_END.items() for j in jobs}


@pytest.mark.parametrize("name", NAMES)
def test_capture_as_watched(name: str, as_watched: dict[tuple[str, str], str]) -> None:
    assert _of(name, as_watched) == CASES[name]


@pytest.mark.parametrize("name", NAMES)
def test_capture_first_seen_in_an_initial_list(name: str, first_seen: dict[tuple[str, str], str]) -> None:
    gone = GONE_AT_END.get(name, set())
    assert _of(name, first_seen) == {j: c for j, c in CASES[name].items() if j not in gone}


@pytest.mark.parametrize("name", sorted(PENDING))
def test_capture_pending_class(name: str, as_watched: dict[tuple[str, str], str]) -> None:
    job, cls = PENDING[name]
    assert as_watched.get((f"gs-{name}", job)) == cls


@pytest.mark.parametrize("name", sorted(PENDING))
def test_capture_pending_class_first_seen(name: str, first_seen: dict[tuple[str, str], str]) -> None:
    job, cls = PENDING[name]
    assert first_seen.get((f"gs-{name}", job)) == cls
