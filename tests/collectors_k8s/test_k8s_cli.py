"""`gangscope collect k8s` as a user runs it: kubeconfig with a context, a real broker, SIGTERM to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from collectors.k8s.client import Client
from gangscope.app import cli
from tests.collectors_k8s import objects
from tests.collectors_k8s.conftest import names, read_k8s_topic

ROOT = Path(__file__).resolve().parents[2]


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "other",
        "clusters": [{"name": "fake", "cluster": {"server": url}},
                     {"name": "other", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "reader", "user": {"token": "s3cret-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "reader"}},
                     {"name": "other", "context": {"cluster": "other", "user": "reader"}}],
    }))
    return path


def test_client_from_kubeconfig_context_sends_the_token(api, tmp_path):
    api.serve("", "v1", "pods", "Pod")
    c = Client.from_config(str(kubeconfig(tmp_path / "kc", api.url)), "fake")
    assert c.get_json("/api") == {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    assert api.authorizations[-1] == "Bearer s3cret-token"


def test_bad_context_and_unreachable_server_are_one_line_errors(api, tmp_path, capsys, settings):
    kc = kubeconfig(tmp_path / "kc", api.url)
    assert cli.main(["capture", "k8s", "--kubeconfig", str(kc), "--context", "nope", "--out",
                     str(tmp_path / "x.jsonl")]) == 2
    assert "cannot load Kubernetes credentials" in capsys.readouterr().err
    # the current context points at a closed port
    assert cli.main(["capture", "k8s", "--kubeconfig", str(kc), "--out", str(tmp_path / "x.jsonl"),
                     "--duration", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gangscope: cannot reach the Kubernetes API server at http://127.0.0.1:9")


@pytest.mark.slow
def test_collect_k8s_publishes_until_sigterm(api, tmp_path, reference, settings):
    objects.populate(api, reference)
    kc = kubeconfig(tmp_path / "kc", api.url)
    env = {**os.environ, "GANGSCOPE_KAFKA_TOPIC_PREFIX": settings.kafka.topic_prefix, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gangscope.app.cli", "collect", "k8s", "--kubeconfig", str(kc), "--context", "fake",
         "--bootstrap-servers", settings.kafka.bootstrap_servers, "--cluster", "east", "--data",
         str(tmp_path / "d")], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while api.count_requests(watch=True) < 12 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        api.put("", "v1", "pods", objects.pod(reference, "while-running"))
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "s3cret-token" not in err
    records = read_k8s_topic(settings, expect=13 + 24)  # 13 objects, a BEGIN/END pair per kind
    assert "while-running" in names(records, "ADDED", "Pod")
    assert {r["cluster"] for r in records} == {"east"}
    assert len([r for r in records if "object" in r]) == 13


@pytest.mark.slow
def test_relist_benchmark_runs_small(settings):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "k8s_relist.py"), "--pods", "300", "--events", "100",
                          "--bootstrap-servers", settings.kafka.bootstrap_servers],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("relist: objects=400 seconds=") and "objects_per_s=" in last
