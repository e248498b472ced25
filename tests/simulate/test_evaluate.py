"""`gangscope evaluate` (issue 19): the scoring arithmetic on known outcomes, scenario selection, and one real run
of the command (simulate -> land -> models -> diagnose) on a Kubernetes 1.35 variant."""

from __future__ import annotations

import pytest

from gangscope.app.cli import main
from gangscope.app.evaluate import Outcome, extras, family, render, scores, select
from gangscope.errors import UserError


def test_scores_per_class_macro_f1_and_healthy_flagged() -> None:
    out = [Outcome("a@k8s-1.37/seed=1", "ns/j1", "gang_assembly", "gang_assembly"),
           Outcome("a@k8s-1.37/seed=1", "ns/j2", "gang_assembly", "admission_quota"),
           Outcome("a/seed=1", "ns/j3", "healthy", "gang_assembly"),  # a healthy job flagged
           Outcome("a/seed=1", "ns/j4", "healthy", "healthy"),
           Outcome("a/seed=1", "ns/j5", "healthy", "missing"),  # not reported at all: not "flagged"
           Outcome("b/seed=1", "ns/j6", "startup_failure", "healthy"),  # a fault called healthy
           Outcome("b/seed=1", "ns/j7", "training_stalled", "missing")]  # missing is not "called healthy"
    s = scores(out, phantom_jobs=1)
    assert s.per_class["gang_assembly"] == (0.5, 0.5, 0.5, 2)
    assert s.per_class["admission_quota"] == (0.0, 0.0, 0.0, 0)
    p, r, f, n = s.per_class["healthy"]
    assert (p, round(r, 3), round(f, 3), n) == (0.5, 0.333, 0.4, 3)
    assert s.per_class["startup_failure"] == (0.0, 0.0, 0.0, 1)
    assert s.per_class["training_stalled"] == (0.0, 0.0, 0.0, 1)
    assert "gpu_fault" not in s.per_class  # neither support nor predictions: out of the macro F1
    assert s.macro_f1 == pytest.approx((0.5 + 0.0 + 0.4 + 0.0 + 0.0) / 5)
    assert (s.healthy_flagged, s.phantom_jobs, s.wrong, s.stuck_called_healthy) == (1, 1, 5, 1)
    text = render(out, s, runs=2)
    assert text.splitlines()[-1] == ("evaluate: macro_f1=0.180 healthy_flagged=1 phantom_jobs=1 stuck_called_healthy=1 "
                                     "extra_findings=0")
    assert "k8s-1.37" in text and "1.36" in text  # a macro F1 per API shape when several ran
    assert (family("gang_assembly@k8s-1.35/seed=1/nodes=16"), family("healthy@onset/seed=1")) == ("k8s-1.35", "1.36")


def test_extra_findings_are_those_beyond_the_primary_that_the_truth_does_not_name() -> None:
    """One incident reported twice (gpu_fault + node_failure for one GPU) changes no primary class: it is counted as an
    extra finding. A second class the truth names (another run of the job, or the true class behind a wrong primary)
    is not; healthy rows and jobs the truth does not have (phantoms) are not."""
    truth = {"jobs": [{"namespace": "ns", "job": "gemma", "root_cause": "gpu_fault"},
                      {"namespace": "ns", "job": "rerun", "root_cause": "healthy"},
                      {"namespace": "ns", "job": "rerun", "root_cause": "topology_misplacement"},
                      {"namespace": "ns", "job": "lost", "root_cause": "node_failure"},
                      {"namespace": "ns", "job": "ok", "root_cause": "healthy"}]}

    def row(job: str, cause: str) -> dict[str, str]:
        return {"namespace": "ns", "job": job, "root_cause": cause, "severity": "critical"}

    rows = [row("gemma", "node_failure"), row("gemma", "gpu_fault"), row("gemma", "training_stalled"),
            row("rerun", "topology_misplacement"), row("rerun", "unexplained_slowdown"),
            row("lost", "gpu_fault"), row("lost", "node_failure"),
            row("ok", "healthy"), row("ghost", "gpu_fault"), row("ghost", "node_failure")]
    more = extras(truth, rows)
    assert more == {"ns/gemma": ["node_failure", "training_stalled"], "ns/rerun": ["unexplained_slowdown"]}
    out = [Outcome("gpu_fault/seed=1", "ns/gemma", "gpu_fault", "gpu_fault", True, tuple(more["ns/gemma"])),
           Outcome("gpu_fault/seed=1", "ns/ok", "healthy", "healthy")]
    s = scores(out)
    assert (s.extra_findings, s.wrong, s.macro_f1) == (2, 0, 1.0)
    text = render(out, s, runs=1)
    assert text.splitlines()[-1].endswith(" stuck_called_healthy=0 extra_findings=2")
    assert "  gpu_fault/seed=1: ns/gemma: truth=gpu_fault predicted=gpu_fault extra=node_failure,training_stalled" \
        in text.splitlines()


def test_select_names_and_globs() -> None:
    assert select("gang_assembly@k8s-1.3*") == ["gang_assembly@k8s-1.37", "gang_assembly@k8s-1.37-gate-on",
                                                "gang_assembly@k8s-1.37-delegated", "gang_assembly@k8s-1.35"]
    assert select("healthy,healthy") == ["healthy"]
    with pytest.raises(UserError, match="no scenario or variant matches 'nope'"):
        select("nope")


def test_evaluate_command_scores_a_135_variant(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """gang_assembly on 1.35 v1alpha1 replicas: the two unschedulable gangs (once coscheduling / Volcano) are found
    as gang_assembly, no healthy job is flagged, no phantom job appears."""
    rc = main(["evaluate", "--scenarios", "gang_assembly@k8s-1.35", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert lines[-1] == ("evaluate: macro_f1=1.000 healthy_flagged=0 phantom_jobs=0 stuck_called_healthy=0 "
                         "extra_findings=0")
    assert "runs: 1" in lines
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines if ln.strip().startswith(("gang_assembly ", "healthy "))}
    assert rows["gang_assembly"][:3] == ["1.000", "1.000", "1.000"] and int(rows["gang_assembly"][3]) >= 3
    assert "misclassified" not in out
