"""`gangscope run` as a new user starts it: nothing configured but a kubeconfig (the sandbox's).

It must find the cluster and the exporters by itself (k8s + metrics, exporters discovered in the cluster and
scraped through the API server's pod proxy), say so in one summary, land both, and stay quiet otherwise: no
apscheduler chatter, no broker probe with an exception text. With no cluster, or one that does not answer,
it says so once with the fix and keeps running what it can.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from collectors.simulate.sandbox import Sandbox
from pipeline import lake

ROOT = Path(__file__).resolve().parents[2]


def _config(settings, tmp_path: Path, **extra) -> Path:
    """Only where the lake and the test's broker are, and no scheduled builds: nothing about the cluster."""
    cfg = {"data": str(settings.data),
           "kafka": {"bootstrap_servers": settings.kafka.bootstrap_servers,
                     "topic_prefix": settings.kafka.topic_prefix},
           "pipeline": {"group_id": settings.pipeline.group_id, "flush_seconds": 0.5},
           "schedule": {k: "off" for k in ("models_build", "report_hourly", "report_daily", "compaction", "retention")},
           "server": {"listen": "127.0.0.1:0"}, **extra}
    path = tmp_path / "gangscope.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(config: Path, kubeconfig: Path, *flags: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")}
    env.update(PYTHONPATH=str(ROOT), KUBECONFIG=str(kubeconfig))
    return subprocess.Popen([sys.executable, "-m", "gangscope.app.cli", "run", "--config", str(config), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _until(proc: subprocess.Popen, text: str, timeout_s: float = 90.0) -> str:
    got = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        got += line
        if text in line:
            return got
    proc.kill()
    raise AssertionError(f"{text!r} not logged; got:\n{got}")


def _stop(proc: subprocess.Popen, before: str) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        err = proc.communicate(timeout=120)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(before + proc.communicate()[1]) from None
    assert proc.returncode == 0, before + err
    return before + err


@pytest.mark.timeout(300)
def test_run_with_only_a_kubeconfig_watches_the_cluster_and_scrapes_its_exporters(settings, tmp_path):
    sb = Sandbox(tmp_path / "sandbox", "gpu_fault", speed=1.0, interval=15.0).start()
    off = {k: "off" for k in ("report_hourly", "report_daily", "compaction", "retention")}
    # A scheduled job (never due here) so that apscheduler has something to be chatty about.
    proc = _run(_config(settings, tmp_path, schedule={**off, "models_build": "interval:3600"}), sb.kubeconfig)
    try:
        head = _until(proc, "scheduler started")
        deadline = time.monotonic() + 90
        landed = (0, 0)
        while time.monotonic() < deadline:
            con = lake.connect(settings, read_only=True)
            try:
                landed = con.execute(
                    "SELECT (SELECT count(*) FROM raw.k8s_objects WHERE kind = 'Node'), "
                    "(SELECT count(DISTINCT instance) FROM raw.scrapes WHERE up AND job = 'dcgm')").fetchone()
            finally:
                con.close()
            if landed[0] >= sb.nodes and landed[1] >= sb.nodes:
                break
            time.sleep(1)
        err = _stop(proc, head)
    finally:
        if proc.poll() is None:
            proc.kill()
        sb.stop()
    assert landed[0] >= sb.nodes and landed[1] == sb.nodes, (landed, err)  # every node's dcgm-exporter, found
    summary = err[err.index("gangscope run: starting"):]
    assert f'context "gangscope-sandbox" (cluster gangscope-sandbox, user sandbox), server {sb.api.url}' in summary
    assert "collectors: k8s, metrics (default: a cluster was found" in summary
    assert "Pod v1" in summary and "Workload kueue.x-k8s.io/v1beta2" in summary \
        and "PodGroup scheduling.volcano.sh/v1beta1" in summary
    assert f"exporters through the API server's pod proxy: dcgm {sb.nodes}, node {sb.nodes}, kueue 1," in summary
    assert "lake: " in summary and f"Kafka: {settings.kafka.bootstrap_servers}" in summary
    # server.listen 127.0.0.1:0: the summary cannot know the port, the line after it names the one served.
    assert ":0/metrics" not in err and "telemetry: a free port on 127.0.0.1 (said once it serves)" in summary
    assert re.search(r"telemetry on http://127\.0\.0\.1:[1-9][0-9]* \(/metrics, /healthz", err), err
    # The summary is the start; the kinds are not said again one per line, and the noise is gone.
    assert "watching v1 Pod" not in err and "collector k8s started" not in err
    for noise in ("apscheduler", "Adding job tentatively", "max.message.bytes", "KafkaConnectionError"):
        assert noise not in err, noise
    assert " WARNING " not in err and " ERROR " not in err, err
    # Samples keep their pod's address as their instance, not the API server's.
    con = lake.connect(settings, read_only=True)
    try:
        instances = {r[0] for r in con.execute(
            "SELECT DISTINCT instance FROM raw.scrapes WHERE job = 'dcgm'").fetchall()}
        nodes = {r[0] for r in con.execute(
            "SELECT DISTINCT node FROM raw.metric_samples WHERE metric LIKE 'DCGM%'").fetchall()}
    finally:
        con.close()
    assert all(i.endswith(":9400") and not i.startswith("127.") for i in instances), instances
    assert nodes == {f"gpu-node-{i:03d}" for i in range(1, sb.nodes + 1)}


@pytest.mark.timeout(120)
def test_debug_keeps_the_scheduler_lines(settings, tmp_path):
    config = _config(settings, tmp_path)
    cfg = yaml.safe_load(config.read_text())
    cfg["schedule"]["models_build"] = "interval:3600"
    config.write_text(yaml.safe_dump(cfg))
    proc = _run(config, tmp_path / "no-kubeconfig", "--log-level", "debug")
    try:
        head = _until(proc, "scheduler started")
        probe = "did not tell its topics' max.message.bytes"
        if probe not in head:  # the pipeline thread probes the broker: before or after the scheduler starts
            head += _until(proc, probe)
        err = _stop(proc, head)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "apscheduler.scheduler" in err and "Adding job tentatively" in err, err
    assert "Added job" in err and "Scheduler started" in err, err  # every line of it at debug
    assert "did not tell its topics' max.message.bytes" in err  # the embedded broker's probe, said at debug


@pytest.mark.timeout(120)
def test_no_cluster_is_said_once_with_the_fix_and_the_pipeline_runs(settings, tmp_path):
    proc = _run(_config(settings, tmp_path), tmp_path / "no-kubeconfig")
    try:
        head = _until(proc, "scheduler started")
        time.sleep(2)
        err = _stop(proc, head)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "collectors: none (default: no cluster found)" in err
    warnings = [line for line in err.splitlines() if " WARNING " in line]
    assert len(warnings) == 1 and "no Kubernetes credentials" in warnings[0] and "Fix:" in warnings[0], err
    assert "stopped" in err


@pytest.mark.timeout(120)
def test_an_unreachable_cluster_is_said_once_and_run_keeps_going(settings, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "me", "user": {"token": "s3cr3t-token-value"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "me"}}]}))
    proc = _run(_config(settings, tmp_path, k8s={"discovery_interval_s": 1}), kubeconfig)
    try:
        head = _until(proc, "scheduler started")
        time.sleep(5)  # the k8s collector retries every second meanwhile, quietly
        assert proc.poll() is None, "run stopped"
        err = _stop(proc, head)
    finally:
        if proc.poll() is None:
            proc.kill()
    warnings = [line for line in err.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(warnings) == 1, err
    assert f"cannot reach the Kubernetes API server at http://127.0.0.1:{port}" in warnings[0]
    assert "the collectors keep trying" in warnings[0] and "kubectl --context gone get --raw /version" in warnings[0]
    assert "s3cr3t-token-value" not in err
