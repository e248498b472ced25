"""Scenarios driven by the real controllers (tests/k8s_real/scenarios.py), watched live by ``gangscope run`` and
judged by ``gangscope diagnose --format json``: every fault under its class as the job's primary finding, every
healthy job beside it healthy, and no job that the cluster does not have.

All scenarios play at once, each in its own namespace and node pool, while one ``gangscope run`` and one
``gangscope capture k8s`` watch them; the captures, split per scenario, are also landed offline and must give the
same classes (they are what ``tests/fixtures/real-k8s-1.37/`` keeps: set ``GANGSCOPE_REAL_CAPTURES_OUT`` to a folder
to write them there).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_real import scenarios as sc
from tests.servers.kubernetes import KubeCluster, kill_kubelet, wait_nodes_ready
from tests.sql import realk8s

pytestmark = pytest.mark.kubernetes

SCENARIOS = sc.scenarios()


@dataclass
class Played:
    rows: list[dict[str, Any]]  # the final `gangscope diagnose --all --format json`
    captures: dict[str, Path]  # namespace -> its trimmed capture
    config: Path
    seconds: float  # from the first job created to every expected class in diagnose

    def primary(self, ns: str) -> dict[str, str]:
        return primary_classes(self.rows, ns)


def primary_classes(rows: list[dict[str, Any]], ns: str) -> dict[str, str]:
    """job -> the class of its primary finding (CONTRACT section 4 precedence) in namespace ``ns``."""
    return {job: c for (n, job), c in realk8s.primary(rows).items() if n == ns}


def _cli(config: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gangscope.app.cli", *args, "--config", str(config)],
                          capture_output=True, text=True, timeout=timeout, env=_env())


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")}


def diagnose(config: Path, build: bool = True) -> list[dict[str, Any]]:
    done = _cli(config, "diagnose", "--all", "--format", "json", *([] if build else ["--no-build"]))
    if done.returncode != 0:
        raise AssertionError(f"diagnose failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout or "[]")


def _write_config(path: Path, cluster: KubeCluster, bootstrap: str, data: Path) -> Path:
    prefix = f"k8sreal{os.getpid()}."
    path.write_text(yaml.safe_dump({
        "cluster": "real-k8s", "data": str(data), "collectors": ["k8s"],
        "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": prefix},
        "pipeline": {"group_id": f"{prefix}pipeline", "flush_seconds": 1.0},
        "k8s": {"kubeconfig": str(cluster.kubeconfig), "namespaces": sorted(SCENARIOS)},
        "thresholds": realk8s.THRESHOLDS,
        "schedule": {"models_build": "interval:3", "report_hourly": "off", "report_daily": "off",
                     "compaction": "off", "retention": "off"},
        "server": {"listen": "127.0.0.1:0"},
        "findings": {"topic": False},
    }))
    return path


def _start(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "gangscope.app.cli", *args, "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, env=_env())


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"did not stop on SIGTERM: {log.read_text()[-2000:]}") from None
    assert code == 0, log.read_text()[-3000:]


def _expected_met(rows: list[dict[str, Any]]) -> bool:
    return all(primary_classes(rows, s.ns).get(job) == cls for s in SCENARIOS.values() for job, cls in s.expect.items())


@pytest.fixture(scope="module")
def played(kube_cluster: KubeCluster, tansu_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    cluster = kube_cluster
    work = tmp_path_factory.mktemp("k8s-real")
    cluster.apply([sc.namespace(ns) for ns in SCENARIOS])
    cluster.apply([n for s in SCENARIOS.values() for n in s.pool])
    wait_nodes_ready(cluster, [n for s in SCENARIOS.values() for n in s.node_names()])
    for ns in SCENARIOS:  # pods are admitted only once their namespace's default ServiceAccount exists
        cluster.wait_for(f"{ns}/default ServiceAccount",
                         lambda ns=ns: cluster.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0)
    config = _write_config(work / "gangscope.yaml", cluster, tansu_broker.bootstrap, work / "data")
    run_log, cap_log, capture = work / "run.log", work / "capture.log", work / "capture.jsonl"
    run = _start(config, run_log, "run")
    cap = _start(config, cap_log, "capture", "k8s", "--out", str(capture))
    try:
        # Both watch before the first job: every job is seen live from its creation.
        for log in (run_log, cap_log):
            cluster.wait_for(f"{log.name}: watches started", lambda log=log: log.read_text().count("watching ") >= 8,
                             timeout_s=120)
        t0 = time.monotonic()
        for s in SCENARIOS.values():
            sc.apply_all(cluster, s.objects)
        _choreography(cluster)
        deadline = time.monotonic() + 300
        rows: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            assert run.poll() is None, run_log.read_text()[-3000:]
            rows = diagnose(config, build=False) if (work / "data").exists() else []
            if _expected_met(rows):
                break
            time.sleep(5)
        seconds = time.monotonic() - t0
        time.sleep(8)  # the last events of the faults still playing (evictions, backoff) land in the capture
    finally:
        for proc, log in ((cap, cap_log), (run, run_log)):
            if proc.poll() is None:
                _stop(proc, log)
    rows = diagnose(config)
    captures = _split(capture, work)
    print(f"\nscenarios: every expected class in diagnose {seconds:.0f} s after the first job; capture "
          f"{capture.stat().st_size / 1e6:.1f} MB, {sum(1 for _ in capture.open())} events")
    yield Played(rows, captures, config, seconds)


def _choreography(cluster: KubeCluster) -> None:
    """The steps that follow the controllers: a preemptor once the victim runs, a deletion once the Job is done, a
    kubelet killed under a running pod, and the end of the crash loop."""
    cluster.wait_for("p-low running", lambda: sc.running(cluster, "gs-preempt", "p-low", 2), timeout_s=180)
    cluster.apply(sc.PREEMPTOR)
    cluster.wait_for("d-done complete", lambda: sc.job_condition(cluster, "gs-deleted", "d-done", "Complete"),
                     timeout_s=180)
    cluster.kubectl("delete", "job", "d-done", "-n", "gs-deleted", "--wait=true", timeout=120)
    cluster.wait_for("n-lost running", lambda: sc.running(cluster, "gs-node", "n-lost", 1), timeout_s=180)
    (victim,) = sc.pods_of(cluster, "gs-node", "n-lost")
    kill_kubelet(cluster, victim["spec"]["nodeName"])
    cluster.wait_for("c-crash failed", lambda: sc.job_condition(cluster, "gs-crash", "c-crash", "Failed"),
                     timeout_s=240)

    def evicted() -> bool:
        pods = sc.pods_of(cluster, "gs-node", "n-lost")
        return any(c["type"] == "DisruptionTarget" and c["status"] == "True"
                   for p in pods for c in p["status"].get("conditions") or [])

    cluster.wait_for("n-lost evicted by the taint", evicted, timeout_s=180)


def _split(capture: Path, work: Path) -> dict[str, Path]:
    lines = capture.read_text().splitlines()
    out_dir = Path(os.environ["GANGSCOPE_REAL_CAPTURES_OUT"]) if os.environ.get("GANGSCOPE_REAL_CAPTURES_OUT") \
        else work / "captures"
    out_dir.mkdir(parents=True, exist_ok=True)
    return {ns: sc.write_lines(out_dir / f"{ns.removeprefix('gs-')}.jsonl", sc.trim(lines, ns)) for ns in SCENARIOS}


# --- the tests ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ns", sorted(SCENARIOS))
def test_each_job_gets_its_class_and_no_job_is_invented(played: Played, ns: str) -> None:
    scn = SCENARIOS[ns]
    got = played.primary(ns)
    assert {j: got.get(j) for j in scn.expect} == scn.expect
    # No job the cluster does not have (a PodGroup or Workload taken for a job of its own, a pod for its Job).
    assert set(got) == set(scn.expect) | set(scn.pending_class)
    healthy = [j for j, c in scn.expect.items() if c == "healthy"]
    assert healthy and not [r for r in played.rows if r["namespace"] == ns and r["job"] in healthy
                            and r["root_cause"] != "healthy"]


def test_node_whose_kubelet_died_is_node_failure(played: Played) -> None:
    assert played.primary("gs-node").get("n-lost") == "node_failure"


def test_containers_failing_to_the_backoff_limit_are_workload_crash(played: Played) -> None:
    assert played.primary("gs-crash").get("c-crash") == "workload_crash"


def test_deleted_job_is_not_left_waiting_for_its_gang(played: Played) -> None:
    rows = [r for r in played.rows if r["namespace"] == "gs-deleted" and r["job"] == "d-done"]
    assert rows and {r["root_cause"] for r in rows} == {"healthy"}


def test_findings_name_the_real_objects(played: Played) -> None:
    """The evidence points at what the controllers wrote: the Kueue Workload of the Job, the ClusterQueue."""
    quota = next(r for r in played.rows if r["job"] == "q-short" and r["root_cause"] == "admission_quota")
    assert quota["workload"] and quota["workload"].startswith("job-q-short-")
    assert quota["evidence"].get("cause") in ("quota", "quota_never")
    pre = next(r for r in played.rows if r["job"] == "p-low" and r["root_cause"] == "preemption")
    assert (pre["evidence"].get("preemptor") or {}).get("job") == "p-high"


def test_captures_land_offline_to_the_same_classes(played: Played, tmp_path: Path) -> None:
    """The scenarios' captures (what tests/fixtures/real-k8s-1.37 keeps), landed together without Kafka as the one
    capture they were, judge every job as `gangscope run` did."""
    got = realk8s.judge(list(played.captures.values()), tmp_path / "data")
    assert got == realk8s.primary(played.rows)
