"""Findings lifecycle: stable ids across builds, opened / updated / resolved exactly when they happen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reports.lifecycle import diff, finding_id

NOW = datetime(2026, 11, 1, 1, 0, tzinfo=UTC)


def f(job: str, cause: str, started: str = "2026-11-01T00:20:00Z", ended: str | None = None,
      severity: str = "warning", summary: str = "s") -> dict[str, Any]:
    return {"cluster": "c", "namespace": "ns", "job": job, "job_kind": "Job", "workload": None, "pod_group": None,
            "root_cause": cause, "severity": severity, "started_at": started, "ended_at": ended,
            "confidence": 0.9, "nodes": ["n1"], "evidence": {}, "summary": summary}


def test_open_update_resolve_keeps_one_id() -> None:
    state: dict[str, Any] = {}
    opened = diff(state, [f("a", "gang_assembly"), f("h", "healthy", severity="info")], NOW)
    assert [(c["job"], c["state"]) for c in opened] == [("a", "opened")]  # healthy rows are no findings
    fid = opened[0]["finding_id"]
    assert fid == finding_id(f("a", "gang_assembly"))
    # Same finding, only the summary moved (it does at every build): nothing to say.
    assert diff(state, [f("a", "gang_assembly", summary="later")], NOW) == []
    up = diff(state, [f("a", "gang_assembly", severity="critical")], NOW)
    assert [(c["finding_id"], c["state"], c["severity"]) for c in up] == [(fid, "updated", "critical")]
    done = diff(state, [f("a", "gang_assembly", ended="2026-11-01T00:40:00Z")], NOW)
    assert [(c["finding_id"], c["state"], c["ended_at"]) for c in done] == [(fid, "resolved", "2026-11-01T00:40:00Z")]
    # The resolved incident, still reported by later builds, is not reopened or repeated.
    assert diff(state, [f("a", "gang_assembly", ended="2026-11-01T00:40:00Z")], NOW) == []


def test_a_later_incident_of_the_same_job_and_class_is_a_new_finding() -> None:
    state: dict[str, Any] = {}
    first = diff(state, [f("a", "preemption", ended="2026-11-01T00:30:00Z")], NOW)
    assert [c["state"] for c in first] == ["resolved"]  # first seen already over
    again = diff(state, [f("a", "preemption", ended="2026-11-01T00:30:00Z"),
                         f("a", "preemption", started="2026-11-01T00:50:00Z")], NOW)
    assert [c["state"] for c in again] == ["opened"]
    assert again[0]["finding_id"] != first[0]["finding_id"]
    assert len(state) == 2


def test_a_start_that_moves_while_open_is_the_same_finding() -> None:
    state: dict[str, Any] = {}
    fid = diff(state, [f("a", "unexplained_slowdown", started="2026-11-01T00:30:00Z")], NOW)[0]["finding_id"]
    moved = diff(state, [f("a", "unexplained_slowdown", started="2026-11-01T00:29:30Z")], NOW)
    assert [(c["finding_id"], c["state"]) for c in moved] == [(fid, "updated")]
    assert len(state) == 1


def test_a_finding_the_build_no_longer_reports_is_resolved_once() -> None:
    state: dict[str, Any] = {}
    fid = diff(state, [f("a", "gpu_fault"), f("b", "admission_quota")], NOW)[0]["finding_id"]
    gone = diff(state, [f("b", "admission_quota")], NOW + timedelta(minutes=1))
    assert [(c["finding_id"], c["job"], c["state"], c["ended_at"]) for c in gone] == [
        (fid, "a", "resolved", "2026-11-01T01:01:00Z")]
    assert diff(state, [f("b", "admission_quota")], NOW + timedelta(minutes=2)) == []


def test_resolved_findings_are_forgotten_after_a_week() -> None:
    state: dict[str, Any] = {}
    diff(state, [f("a", "gpu_fault", ended="2026-11-01T00:30:00Z"), f("b", "gpu_fault")], NOW)
    diff(state, [f("b", "gpu_fault")], NOW + timedelta(days=8))
    assert [e["finding"]["job"] for e in state.values()] == ["b"]
    # Resolved only now, though it ended long ago: kept for this build (its resolution is still to be sent to
    # Alertmanager), forgotten at the next.
    (done,) = diff(state, [f("b", "gpu_fault", ended="2026-11-01T00:30:00Z")], NOW + timedelta(days=8))
    assert done["state"] == "resolved" and [e["finding"]["job"] for e in state.values()] == ["b"]
    assert diff(state, [], NOW + timedelta(days=8)) == [] and state == {}


def test_alertmanager_keeps_one_alert_per_finding_when_its_severity_changes(alertmanager_server, tmp_path) -> None:
    """Alertmanager knows an alert by its labels; severity is one: the alert under the old severity is resolved
    when the finding escalates, and nothing of the finding stays firing once it is resolved (a real
    Alertmanager; a crash finding that escalated, then healed, stayed firing under its first severity)."""
    from gangscope import config
    from reports.lifecycle import FindingsOutlet

    settings = config.load(overrides={"data": str(tmp_path), "findings": {
        "alertmanager_url": alertmanager_server.url, "alert_ttl_s": 7200}}, environ={})
    outlet = FindingsOutlet(settings)
    job = f"sev-{tmp_path.name}"[:60]

    def firing() -> list[tuple[str, str]]:
        return sorted((a["labels"]["finding_id"], a["labels"]["severity"]) for a in alertmanager_server.alerts()
                      if a["labels"].get("job") == job)

    (opened,) = outlet.tick([f(job, "workload_crash", severity="warning")])
    fid = opened["finding_id"]
    assert firing() == [(fid, "warning")]
    outlet.tick([f(job, "workload_crash", severity="critical")])
    assert firing() == [(fid, "critical")]
    outlet.tick([f(job, "workload_crash", severity="warning", ended="2026-11-01T00:40:00Z")])
    assert firing() == []
