"""What a person sees of `gangscope check` in a terminal: its own lines only.

A scrape that fails is one FAIL line with its fix; the scraper's own WARNING log line about the same failure
(stderr, printed between the check's lines in a terminal) is hidden unless a log level is asked for.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from collectors.simulate.apiserver import ApiServer

ROOT = Path(__file__).resolve().parents[2]
L4 = ROOT / "tests" / "fixtures" / "reference" / "telemetry" / "dcgm-exporter_metrics_sample_L4_gpu-operator.prom"
# A check line ("PASS  api  ..."), a fix under one ("      fix: ..."), or the closing count.
CHECK_LINE = re.compile(r"(PASS|WARN|FAIL)  [a-z]+ +\S.*|\s+fix: \S.*|\d+ pass, \d+ warn, \d+ fail")


@pytest.fixture
def config(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """An API server with a GPU node and its dcgm-exporter (the real L4 scrape, through the pod proxy), and a
    static node_exporter target nothing listens on: (the config file, that target's URL)."""
    api = ApiServer().start()
    for g, v, p, k, ns in (
        ("", "v1", "pods", "Pod", True),
        ("", "v1", "nodes", "Node", False),
        ("", "v1", "events", "Event", True),
    ):
        api.serve(g, v, p, k, ns)
    api.put("", "v1", "nodes", {"metadata": {"name": "gpu-node-1"}, "status": {"allocatable": {"nvidia.com/gpu": "1"}}})
    api.put(
        "",
        "v1",
        "pods",
        {
            "metadata": {
                "name": "nvidia-dcgm-exporter-x2k4p",
                "namespace": "gpu-operator",
                "labels": {"app": "nvidia-dcgm-exporter"},
            },
            "spec": {"nodeName": "gpu-node-1"},
            "status": {"phase": "Running", "podIP": "192.168.0.2"},
        },
    )
    body = L4.read_bytes()
    api.pod_proxy = lambda ns, pod, scheme, port, path, q: (
        (200, "text/plain; version=0.0.4", body)
        if (pod, port, path) == ("nvidia-dcgm-exporter-x2k4p", 9400, "/metrics")
        else None
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/metrics"  # closed once the block ends
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": api.url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    path = tmp_path / "gangscope.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "k8s": {"kubeconfig": str(kubeconfig)},
                "metrics": {"discovery": [{"job": "dcgm"}], "targets": [{"url": url, "job": "node", "timeout_s": 2}]},
            }
        )
    )
    yield path, url
    api.stop()


def check(config: Path, *flags: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `gangscope check` in table format."""
    done = subprocess.run(
        [sys.executable, "-m", "gangscope.app.cli", "check", "--config", str(config), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    return done.returncode, done.stdout, done.stderr


def test_check_prints_only_its_lines_and_the_failure_with_its_fix(config: tuple[Path, str]) -> None:
    path, url = config
    code, out, err = check(path)
    assert err == ""  # the scraper's "scrape of ... failed" WARNING would be here, between the lines on a terminal
    lines = out.splitlines()
    assert [x for x in lines if not CHECK_LINE.fullmatch(x)] == [], out
    failed = [i for i, x in enumerate(lines) if x.startswith("FAIL")]
    assert code == 1 and len(failed) == 1, out
    line, fix = lines[failed[0]], lines[failed[0] + 1]
    assert re.fullmatch(rf"FAIL  exporters +node_exporter: 0 of 1 answered; 1 failed: {re.escape(url)}: .+", line)
    assert fix.strip() == "fix: look at the exporter pods (kubectl get pods -o wide) and their logs"
    assert lines[-1].endswith(" warn, 1 fail")
    assert any(
        re.fullmatch(r"PASS  exporters +dcgm-exporter: 1 of 1 answered; signals: .*gpu_util.*", x) for x in lines
    ), out


@pytest.mark.parametrize("flags", [("--log-level", "debug"), ("--log-level", "warning")])
def test_asking_for_a_log_level_shows_the_scrapers_lines(config: tuple[Path, str], flags: tuple[str, ...]) -> None:
    path, url = config
    code, out, err = check(path, *flags)
    assert code == 1 and "FAIL  exporters" in out
    assert f"WARNING collectors.metrics.scrape: scrape of {url} (job node) failed" in err, err
