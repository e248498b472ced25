"""Kueue v0.19 admission reasons (../shared/reference/kueue/kueue-0.19-reasons.md): every reason of the table gets
a cause, a class or a documented "not a problem" state, with the UnadmittedWorkloadsObservability gate on
(granular reasons, namespace `gate-on`) and off (the v0.19 default: `Pending` / `Inadmissible` + message,
namespace `gate-off`); queue objects that do not admit (missing LocalQueue, inactive ClusterQueue, stopped
LocalQueue) are a configuration cause even when the Workload carries no condition."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pipeline import lake, models
from reports import diagnose
from tests.sql.lakefix import Raw, cond, node, workload

END = 40.0
ASSIGN = "couldn't assign flavors to pod set main: "
QUOTA = ASSIGN + "insufficient unused quota for nvidia.com/gpu in flavor gpu, 8 more needed"
NEVER = (ASSIGN + "insufficient quota for nvidia.com/gpu in flavor gpu, previously considered podsets requests (0) + "
         "current podset request (64) > maximum capacity (32)")
FLAVOR = ASSIGN + "flavor gpu doesn't match node affinity"
TOPO = (ASSIGN + 'topology "default" allows to fit only 2 out of 4 pod(s). Total nodes: 4; excluded: '
        'resource "nvidia.com/gpu": 2')
PREEMPT = QUOTA + ". Pending the preemption of 2 workload(s)"
LIMITS = "resources didn't satisfy LimitRange constraints: container trainer exceeds max cpu"
READY = "waiting for all admitted workloads to be in PodsReady condition"
EVAL = "Workload is pending evaluation in the scheduling queue"
EVICTED = ("Preempted to accommodate a workload (UID: 0f1e2d3c, JobUID: 9a8b7c6d) due to prioritization in the "
           "ClusterQueue; preemptor path: /cq; preemptee path: /cq")
CHECKS_FAILED = "The workload has failed admission checks"
BYPASS = "Bypassed scheduling evaluation because an equivalent workload recently failed"
GATED = "Workload requires preemption, but it's gated"


def _qr(reason: str, message: str) -> list[dict]:
    return [cond("QuotaReserved", "False", reason, message, 0.2)]


def _checks(reason: str, message: str) -> list[dict]:
    return [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", 0.2),
            cond("Admitted", "False", reason, message, 0.2)]


# job: (conditions with the gate on, conditions with the gate off, local queue, cause, class or None)
CASES: dict[str, tuple[list[dict], list[dict], str, str, str | None]] = {
    "quota": (_qr("WaitingForQuota", QUOTA), _qr("Pending", QUOTA), "team", "quota", "admission_quota"),
    "never-fits": (_qr("ExceedsMaxQuota", NEVER), _qr("Pending", NEVER), "team", "quota_never", "admission_quota"),
    "flavor": (_qr("NoMatchingFlavor", FLAVOR), _qr("Pending", FLAVOR), "team", "no_matching_flavor",
               "admission_quota"),
    "topo": (_qr("TopologyPlacementFailed", TOPO), _qr("Pending", TOPO), "team", "topology", "admission_topology"),
    "preempting": (_qr("WaitingForPreemptedWorkloads", PREEMPT), _qr("Pending", PREEMPT), "team",
                   "waiting_preemption", "admission_quota"),
    "limits": (_qr("Misconfigured", LIMITS), _qr("Inadmissible", LIMITS), "team", "misconfigured", "admission_quota"),
    "suspended": (_qr("Suspended", "ClusterQueue cq is inactive"), _qr("Inadmissible", "ClusterQueue cq is inactive"),
                  "team", "queue_inactive", "admission_quota"),
    "checks": (_checks("UnsatisfiedAdmissionChecks", "The workload has not all checks ready"),
               _checks("UnsatisfiedChecks", "The workload has not all checks ready"), "team", "admission_check",
               "admission_quota"),
    "delayed": (_checks("PendingDelayedTopologyRequests", "There are pending delayed topology requests"),
                _checks("PendingDelayedTopologyRequests", "There are pending delayed topology requests"), "team",
                "delayed_topology", "admission_topology"),
    "ready-wait": (_qr("WaitingForPodsReady", READY), _qr("Waiting", READY), "team", "waiting_pods_ready",
                   "admission_quota"),
    "gated": (_qr("AdmissionGated", "Admission is gated by: example.com/budget"),
              _qr("AdmissionGated", "Admission is gated by: example.com/budget"), "team", "admission_gated",
              "admission_quota"),
    "evaluating": (_qr("PendingEvaluation", EVAL), _qr("Pending", EVAL), "team", "pending_evaluation", None),
    "never-evaluated": ([], [], "team", "not_evaluated", None),
    # Requeued after an eviction: PendingEvaluation (gate on) / Pending (off) with the eviction's own message.
    "requeued": (_qr("PendingEvaluation", EVICTED), _qr("Pending", EVICTED), "team", "pending_evaluation", None),
    "checks-failed": (_qr("PendingEvaluation", CHECKS_FAILED), _qr("Pending", CHECKS_FAILED), "team",
                      "pending_evaluation", None),
    "requeued-stopped": (_qr("PendingEvaluation", "The ClusterQueue is stopped"),
                         _qr("Pending", "The ClusterQueue is stopped"), "team", "queue_stopped", "admission_quota"),
    # A cached NoFit reason (SchedulingEquivalenceHashing, gate on only) keeps its reason, not its message.
    "bypassed": (_qr("WaitingForQuota", BYPASS), _qr("Pending", QUOTA), "team", "quota", "admission_quota"),
    # Admitted=False NoReservation defers to the QuotaReserved condition.
    "no-reservation": ([cond("Admitted", "False", "NoReservation", "The workload has no reservation", 0.2),
                        *_qr("WaitingForQuota", QUOTA)],
                       [cond("Admitted", "False", "NoReservation", "The workload has no reservation", 0.2),
                        *_qr("Pending", QUOTA)], "team", "quota", "admission_quota"),
    # Gated preemption: the scheduler's QuotaReserved reason and BlockedOnPreemptionGates, written together.
    "preempt-gated": ([*_qr("AdmissionGated", GATED), cond("BlockedOnPreemptionGates", "True", "PreemptionGated",
                                                           GATED, 0.2)],
                      [*_qr("Pending", GATED), cond("BlockedOnPreemptionGates", "True", "PreemptionGated", GATED, 0.2)],
                      "team", "admission_gated", "admission_quota"),
    "on-hold": (_qr("OnHold", "Job is on hold"), _qr("OnHold", "Job is on hold"), "team", "stopped", None),
    "deactivated": (_qr("Deactivated", "The workload is deactivated"),
                    [cond("Evicted", "True", "DeactivatedDueToRequeuingLimitExceeded",
                          "The workload is deactivated due to exceeding the maximum number of re-queuing retries", 0.2),
                     cond("DeactivationTarget", "True", "RequeuingLimitExceeded",
                          "exceeding the maximum number of re-queuing retries", 0.2)],
                    "team", "stopped", None),
    # Queue objects decide; with the gate on a workload in such a queue may carry nothing at all.
    "no-queue": ([], _qr("Inadmissible", "LocalQueue nope doesn't exist"), "nope", "missing_local_queue",
                 "admission_quota"),
    "inactive-cq": ([], _qr("Inadmissible", "ClusterQueue cq-bad is inactive"), "paused", "queue_inactive",
                    "admission_quota"),
    "held": ([], _qr("Pending", "LocalQueue held is stopped"), "held", "queue_stopped", "admission_quota"),
}
CONFIGURATION = {"flavor", "limits", "suspended", "gated", "no-queue", "inactive-cq", "held", "requeued-stopped",
                 "preempt-gated"}


def _queue(kind: str, name: str, ns: str | None, spec: dict, active: tuple[str, str, str]) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if ns:
        md["namespace"] = ns
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": md, "spec": spec,
            "status": {"conditions": [cond("Active", active[0], active[1], active[2], 0)]}}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from gangscope import config

    settings = config.load(overrides={"data": str(tmp_path_factory.mktemp("k019") / "data")}, environ={})
    con = lake.connect(settings)
    raw = Raw()
    ready = ("True", "Ready", "Can admit new workloads")
    raw.event(0, _queue("ClusterQueue", "cq", None, {"cohortName": "all"}, ready))
    raw.event(0, _queue("ClusterQueue", "cq-bad", None, {}, (
        "False", "FlavorNotFound", "Can't admit new workloads: references missing ResourceFlavor(s): gpu-x")))
    for ns in ("gate-on", "gate-off"):
        raw.event(0, _queue("LocalQueue", "team", ns, {"clusterQueue": "cq"}, ("True", "Ready", "Can submit")))
        raw.event(0, _queue("LocalQueue", "paused", ns, {"clusterQueue": "cq-bad"},
                            ("False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue")))
        raw.event(0, _queue("LocalQueue", "held", ns, {"clusterQueue": "cq", "stopPolicy": "Hold"},
                            ("False", "Stopped", "LocalQueue is stopped")))
        for job, (on, off, lq, _, _) in CASES.items():
            w = workload(ns, f"job-{job}-a1b2c", "Job", job, 4, on if ns == "gate-on" else off)
            w["spec"]["queueName"] = lq
            raw.event(0.2, w)
    raw.event(END, node("n1", "rack-a"))
    raw.write(con)
    models.build(settings, con)
    yield con
    con.close()


@pytest.mark.parametrize("ns", ["gate-on", "gate-off"])
@pytest.mark.parametrize("job", list(CASES))
def test_every_reason_has_a_cause_and_class(built, ns: str, job: str) -> None:
    con = built
    _, _, _, cause, klass = CASES[job]
    row = con.execute("SELECT cause, cause_kind, cause_class FROM intermediate.int_admission "
                      "WHERE namespace = ? AND job = ?", [ns, job]).fetchone()
    kind = "configuration" if job in CONFIGURATION else {None: None, "admission_topology": "topology",
                                                        "admission_quota": "quota"}[klass]
    if klass is None:
        kind = "terminal" if cause == "stopped" else "none"
    assert row == (cause, kind, klass)
    (primary,) = con.execute("SELECT root_cause FROM marts.jobs WHERE namespace = ? AND job = ?", [ns, job]).fetchone()
    assert primary == (klass or "healthy")  # waited 40 min: past the 10 min threshold


def test_gate_setting_is_read_from_the_reasons(built) -> None:
    gates = dict(built.execute("SELECT namespace || '/' || job, gate FROM intermediate.int_admission").fetchall())
    assert gates["gate-on/quota"] == "on" and gates["gate-off/quota"] == "off"
    assert gates["gate-on/limits"] == "on" and gates["gate-off/limits"] == "off"
    assert gates["gate-on/never-evaluated"] is None and gates["gate-off/gated"] is None  # AdmissionGated: both modes


def test_blockers_mart_says_why_and_which_class(built) -> None:
    rows = {(r[0], r[1]): r[2:] for r in built.execute(
        "SELECT namespace, job, cause, cause_kind, root_cause, proposed_class, reason, message, over_threshold "
        "FROM marts.admission_blockers").fetchall()}
    # Terminal states are not blockers; everything else not admitted is listed, in both gate settings.
    assert {j for _, j in rows} == set(CASES) - {"on-hold", "deactivated"}
    assert rows[("gate-on", "inactive-cq")] == (
        "queue_inactive", "configuration", "admission_quota", "admission_config", "FlavorNotFound",
        "ClusterQueue cq-bad: Can't admit new workloads: references missing ResourceFlavor(s): gpu-x", True)
    assert rows[("gate-on", "no-queue")][:4] == ("missing_local_queue", "configuration", "admission_quota",
                                                 "admission_config")
    assert rows[("gate-on", "no-queue")][5] == "LocalQueue nope does not exist"
    assert rows[("gate-off", "held")][:4] == ("queue_stopped", "configuration", "admission_quota", "admission_config")
    assert rows[("gate-off", "flavor")][3:6] == ("admission_config", "Pending", FLAVOR)
    assert rows[("gate-on", "evaluating")][:4] == ("pending_evaluation", "none", None, None)
    assert rows[("gate-on", "never-evaluated")][:4] == ("not_evaluated", "none", None, None)


def test_finding_evidence_names_cause(built) -> None:
    f = {(r["namespace"], r["job"]): r for r in diagnose.findings(built) if r["root_cause"].startswith("admission")}
    assert ("gate-on", "evaluating") not in f and ("gate-off", "never-evaluated") not in f
    ev = f[("gate-off", "flavor")]["evidence"]
    assert (ev["cause"], ev["cause_kind"], ev["proposed_class"], ev["unadmitted_observability_gate"]) == (
        "no_matching_flavor", "configuration", "admission_config", "off")
    assert f[("gate-on", "quota")]["evidence"]["proposed_class"] == "admission_quota"
    assert "configuration" in f[("gate-on", "no-queue")]["summary"]
    assert f[("gate-on", "topo")]["evidence"]["reason"] == "TopologyPlacementFailed"


def test_configuration_causes_get_their_own_next_step(built) -> None:
    """A configuration cause names the queue or flavor object and how to see it, never the quota wording."""
    f = {(r["namespace"], r["job"]): r for r in diagnose.findings(built) if r["root_cause"].startswith("admission")}
    expected = {  # job: (object the step must name, its kubectl check)
        "no-queue": ("LocalQueue nope", "kubectl get localqueues -n gate-on"),
        "inactive-cq": ("ClusterQueue cq-bad", "kubectl get clusterqueue cq-bad"),
        "suspended": ("ClusterQueue cq", "kubectl get clusterqueue cq "),
        "held": ("LocalQueue held", "kubectl get localqueue -n gate-on held"),
        "flavor": ("flavor gpu", "kubectl get resourceflavor gpu"),
        "limits": ("LimitRange", "kubectl get workload -n gate-on"),
    }
    for job, (obj, check) in expected.items():
        row = f[("gate-on", job)]
        step = row["next_steps"][0]
        assert obj in step["action"] and step["check"].startswith(check), (job, step)
        assert "nominalQuota" not in step["action"] and "cohort" not in " ".join(row["evidence_text"]), (job, row)
        assert "configuration" in row["evidence_text"][0]
    # A real shortage keeps the quota wording.
    quota = f[("gate-on", "quota")]
    assert "nominalQuota" in quota["next_steps"][0]["action"] and "configuration" not in quota["evidence_text"][0]
