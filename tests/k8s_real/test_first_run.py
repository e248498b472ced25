"""A first run on a real cluster, as a new user makes it (issue 34), against the real 1.37 control plane
(tests/servers/kubernetes.py) with the deploy's ServiceAccount: `gangscope check`, then `gangscope run` on its
defaults (nothing configured but the kubeconfig), then `gangscope explain` of a job that runs and of one stuck.

The stuck Job asks more GPUs than its ClusterQueue ever has and exists before `run` starts (first seen in the
initial list); the running one is created while `run` watches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from collectors.simulate.cluster import BLOCK_LABEL, HOST_LABEL, RACK_LABEL
from gangscope import config
from pipeline import lake
from tests.k8s_real import scenarios as sc
from tests.servers.kubernetes import KubeCluster, wait_nodes_ready

pytestmark = pytest.mark.kubernetes

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
NS = "gs-first"
SA = "system:serviceaccount:gangscope:gangscope"


@dataclass
class FirstRun:
    kubeconfig: Path  # the deploy's ServiceAccount's
    work: Path  # the working directory: the lake goes to ./gangscope-data, as by default
    setup_s: float  # the fixture's own seconds (the control plane was up before)
    stuck_at: float  # time.monotonic() when the stuck Job was applied


def _cli(run: FirstRun, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gangscope.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=run.work,
        env=_env(run, **(env or {})),
    )


def _env(run: FirstRun, **extra: str) -> dict[str, str]:
    """Nothing of gangscope's configured: only the kubeconfig, as kubectl finds it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")}
    env.update(PYTHONPATH=str(ROOT), KUBECONFIG=str(run.kubeconfig), **extra)
    return env


@pytest.fixture(scope="module")
def first_run(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """The deploy's RBAC, two kwok GPU nodes, a ClusterQueue of 8 GPUs, a Kueue Topology (the level
    ``explain`` judges a spread by), and the stuck Job (16 GPUs) waiting in the queue."""
    cluster = kube_cluster
    t0 = time.monotonic()
    rbac = [d for f in ("namespace.yaml", "rbac.yaml") for d in yaml.safe_load_all((DEPLOY / f).read_text()) if d]
    cluster.apply(rbac, server_side=False)
    cluster.apply(sc.namespace(NS))
    pool = sc.Scenario(NS, nodes=2, expect={})
    cluster.apply(pool.pool)
    topology = {
        "apiVersion": sc.KUEUE,
        "kind": "Topology",
        "metadata": {"name": NS},
        "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": RACK_LABEL}, {"nodeLabel": HOST_LABEL}]},
    }
    cluster.apply(*sc.kueue_queues(NS, 8), topology)
    wait_nodes_ready(cluster, pool.node_names())
    cluster.wait_for(
        f"{NS}/default ServiceAccount",
        lambda: cluster.kubectl("get", "sa", "default", "-n", NS, check=False).returncode == 0,
    )
    cluster.apply(sc.job(NS, "first-stuck", 2, queue="queue"))
    stuck_at = time.monotonic()
    cluster.wait_for("first-stuck's Workload evaluated by Kueue", lambda: _quota_refused(cluster, "first-stuck"))
    token = cluster.service_account_token("gangscope", "gangscope")
    path = cluster.kubeconfig_for("first-run-gangscope", token)
    return FirstRun(path, tmp_path_factory.mktemp("first-run"), time.monotonic() - t0, stuck_at)


def _quota_refused(cluster: KubeCluster, job: str) -> bool:
    for w in cluster.get("workloads.kueue.x-k8s.io", namespace=NS)["items"]:
        if w["metadata"]["name"].startswith(f"job-{job}-"):
            return any(
                c["type"] == "QuotaReserved" and c["status"] == "False"
                for c in (w.get("status") or {}).get("conditions") or []
            )
    return False


def _landed_running(data: Path, job: str) -> bool:
    """Whether the lake holds ``job``'s pod Running (what `run` landed, read beside it)."""
    if not (data / "catalog.sqlite").exists():
        return False
    con = lake.connect(config.load(overrides={"data": str(data)}, environ={}), read_only=True)
    try:
        return bool(
            con.execute(
                "SELECT count(*) FROM raw.k8s_objects WHERE kind = 'Pod' AND namespace = ? AND name LIKE ? "
                "AND json_extract_string(object, '$.status.phase') = 'Running'",
                [NS, f"{job}-%"],
            ).fetchone()[0]
        )
    except Exception:  # noqa: BLE001 - the tables come with the first landing
        return False
    finally:
        con.close()


def test_check_run_and_explain_on_the_real_control_plane(kube_cluster: KubeCluster, first_run: FirstRun) -> None:
    cluster = kube_cluster
    marks = [time.monotonic()]
    # 1. check, as the deploy's ServiceAccount: every line passes or warns; only the check's own lines.
    done = _cli(first_run, "check", "--format", "json")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["status"] == "pass", done.stdout
    assert done.stderr == "", done.stderr
    said = {(c["status"], c["check"], c["message"]) for c in report["checks"]}
    passed = "\n".join(f"{check}: {m}" for s, check, m in said if s == "pass")
    assert f"api: {cluster.api_url} answers (v1.37.2)" in passed
    assert f"identity: as {SA} (groups system:serviceaccounts, system:serviceaccounts:gangscope)" in passed
    assert "kinds: Kueue kueue.x-k8s.io v1beta2, v1beta1 served; watching kueue.x-k8s.io/v1beta2" in passed
    assert "kinds: gangs: native scheduling.k8s.io v1beta1, v1alpha3" in passed
    assert "rbac: list and watch allowed on all 12 kinds watched" in passed
    assert f"topology: Topology {NS}: all " in passed and "clock: API server clock" in passed
    # Kueue runs outside the cluster here; the stuck Workload says Pending: the gate is off, and that is a warning.
    assert any(
        s == "warn"
        and check == "kueue"
        and m.startswith("granular admission reasons off: waiting Workloads say ")
        and "Pending" in m  # (other tests' Workloads may say more)
        for s, check, m in said
    ), said
    assert not [m for s, _, m in said if s == "fail"]

    marks.append(time.monotonic())
    # 2. run on its defaults: it finds the cluster, says what it watches, and lands what happens.
    err_path = first_run.work / "run.err"
    with err_path.open("w") as err:
        # Its telemetry port is the one thing set: 9108 may be taken by another run on this machine.
        proc = subprocess.Popen(
            [sys.executable, "-m", "gangscope.app.cli", "run"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=first_run.work,
            env=_env(first_run, GANGSCOPE_SERVER_LISTEN="127.0.0.1:0"),
        )
    try:
        cluster.wait_for(
            "run's scheduler started",
            lambda: "scheduler started" in err_path.read_text() or proc.poll() is not None,
            timeout_s=120,
        )
        assert proc.poll() is None, err_path.read_text()
        # The lake's clock is its newest record (no exporters here): first-ok's, which must come past the stuck
        # Job's 10 s admission threshold used below (CI once: 9.4 s after it, and the stuck Job read healthy).
        time.sleep(max(0.0, first_run.stuck_at + 15.0 - time.monotonic()))
        cluster.apply(sc.job(NS, "first-ok", 1, queue="queue"))
        cluster.wait_for(
            "first-ok's pod Running in the lake",
            lambda: _landed_running(first_run.work / "gangscope-data", "first-ok") or proc.poll() is not None,
            timeout_s=120,
        )
        assert proc.poll() is None, err_path.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    marks.append(time.monotonic())
    log = err_path.read_text()
    assert code == 0, log[-3000:]
    summary = log[log.index("gangscope run: starting") :]
    assert (
        f'kubeconfig {first_run.kubeconfig} context "gangscope-test" (cluster gangscope-test, user '
        f"first-run-gangscope), server {cluster.api_url} (v1.37.2)"
    ) in summary
    assert "collectors: k8s, metrics (default: a cluster was found" in summary
    for kind in (
        "Pod v1",
        "Job batch/v1",
        "Workload kueue.x-k8s.io/v1beta2",
        "ClusterQueue kueue.x-k8s.io/v1beta2",
        "Workload scheduling.k8s.io/v1beta1",
        "PodGroup scheduling.k8s.io/v1beta1",
    ):
        assert kind in summary, kind
    assert "exporters through the API server's pod proxy: dcgm 0, node 0" in summary
    assert "lake: gangscope-data/lake" in summary and "(embedded, in memory" in summary
    for noise in ("apscheduler", "Adding job tentatively", "max.message.bytes", "KafkaConnectionError", "Traceback"):
        assert noise not in log, noise
    # The one warning: no dcgm-exporter here, said once with the fix.
    warnings = [ln for ln in log.splitlines() if " WARNING " in ln or " ERROR " in ln]
    assert len(warnings) == 1 and "no dcgm-exporter pods found" in warnings[0] and "Fix:" in warnings[0], warnings

    # 3. explain: the stuck Job at its queue (its finding after a 10 s admission threshold: the test cannot wait
    # the default 10 min), the running one healthy at every layer that applies.
    short = {"GANGSCOPE_THRESHOLDS_ADMISSION_WAIT_S": "10"}
    stuck = _explain(first_run, f"{NS}/first-stuck", short)
    assert stuck["state"] == "queued" and stuck["primary"] == "admission_quota", stuck
    verdicts = {x["key"]: x["verdict"] for x in stuck["layers"]}
    assert verdicts["queue"] == "problem" and "problem" not in list(verdicts.values())[1:], verdicts
    queue = stuck["layers"][0]
    assert queue["findings"] == ["admission_quota"]
    # 16 GPUs asked of a queue of 8: Kueue's message says it can never fit, and so does the cause.
    assert queue["evidence"]["cluster_queue"] == NS and queue["evidence"]["cause"] == "quota_never"
    assert "request (16) > maximum capacity (8)" in queue["evidence"]["message"], queue
    ok = _explain(first_run, f"{NS}/first-ok", short, "--no-build")
    assert ok["state"] == "running" and ok["primary"] == "healthy", ok
    assert {f["root_cause"] for f in ok["findings"]} <= {"healthy"}, ok["findings"]
    verdicts = {x["key"]: x["verdict"] for x in ok["layers"]}
    assert verdicts == {
        "queue": "ok",
        "topology": "ok",
        "gang": "ok",
        "startup": "ok",
        "throughput": "no data",
        "gpus": "ok",
    }, ok["layers"]
    assert ok["job_facts"]["nodes"] and ok["job_facts"]["pods_running"] == 1 and ok["job_facts"]["gpus"] == 8
    assert ok["layers"][0]["summary"].startswith(f"admitted in ClusterQueue {NS} at ")
    # A name not quite right: the closest ones.
    wrong = _cli(first_run, "explain", f"{NS}/first", "--no-build", env=short)
    assert wrong.returncode == 2 and f"no job {NS}/first in the lake; closest: " in wrong.stderr, wrong.stderr
    assert f"{NS}/first-ok" in wrong.stderr and f"{NS}/first-stuck" in wrong.stderr, wrong.stderr
    marks.append(time.monotonic())
    check_s, run_s, explain_s = (b - a for a, b in zip(marks, marks[1:], strict=False))
    print(
        f"\nfirst run: setup {first_run.setup_s:.0f} s, check {check_s:.0f} s, run {run_s:.0f} s (start to the "
        f"running Job landed and stopped), explain x3 {explain_s:.0f} s"
    )


def _explain(run: FirstRun, job: str, env: dict[str, str], *flags: str) -> dict[str, Any]:
    done = _cli(run, "explain", job, "--format", "json", *flags, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
