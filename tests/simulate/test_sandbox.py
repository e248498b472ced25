"""`gangscope sandbox`: the simulated cluster served live, read by kubectl and by plain HTTP."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from collectors.simulate.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sb = Sandbox(tmp_path_factory.mktemp("sandbox"), "gpu_fault", speed=1.0, interval=30.0).start()
    yield sb
    sb.stop()


def kubectl(sb: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kubectl")
    if exe is None:
        pytest.skip("kubectl not installed")
    return subprocess.run([exe, "--kubeconfig", str(sb.kubeconfig), *args], capture_output=True, text=True,
                          timeout=60)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _ms(ts: str) -> int:
    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


def test_kubectl_reads_the_sandbox(sandbox: Sandbox) -> None:
    sb = sandbox
    sb.advance(30 * 60)  # half an hour in: jobs running, the GPU fault past
    with sb.api.cond:
        pods = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in
                sb.api.resources[("", "v1", "pods")].objects.values()}
    assert pods
    out = kubectl(sb, "get", "pods", "-A", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in json.loads(out.stdout)["items"]} == pods
    table = kubectl(sb, "get", "pods", "-A")
    assert table.returncode == 0 and all(name in table.stdout for _, name in pods)

    raw = kubectl(sb, "get", "--raw", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
    assert raw.returncode == 0, raw.stderr
    assert {q["metadata"]["name"] for q in json.loads(raw.stdout)["items"]} == {"team-a-cq", "team-b-cq", "team-c-cq"}

    rack = kubectl(sb, "get", "nodes", "-l", "cloud.provider.com/topology-rack=rack-1", "-o", "name")
    assert rack.stdout.split() == [f"node/gpu-node-00{i}" for i in range(1, 5)]
    on_node = kubectl(sb, "get", "pods", "-A", "--field-selector", "spec.nodeName=gpu-node-001", "-o", "json")
    assert on_node.returncode == 0, on_node.stderr
    found = json.loads(on_node.stdout)["items"]
    assert found and all(p["spec"]["nodeName"] == "gpu-node-001" for p in found)
    one = kubectl(sb, "get", "node", "gpu-node-002", "-o", "json")
    assert json.loads(one.stdout)["metadata"]["name"] == "gpu-node-002"
    missing = kubectl(sb, "get", "node", "gpu-node-999")
    assert missing.returncode != 0 and "not found" in missing.stderr

    kinds = kubectl(sb, "api-resources", "-o", "name")
    assert kinds.returncode == 0, kinds.stderr
    for name in ("pods", "nodes", "events", "workloads.kueue.x-k8s.io", "topologies.kueue.x-k8s.io",
                 "podgroups.scheduling.x-k8s.io", "podgroups.scheduling.volcano.sh", "podgroups.scheduling.k8s.io"):
        assert name in kinds.stdout.split()


def test_objects_and_faults_arrive_on_the_sandbox_clock(tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, "gpu_fault", speed=1.0, interval=30.0).start()
    try:
        truth = json.loads((sb.scenario_dir / "truth.json").read_text())
        xid = next(f for f in truth["faults"] if f["kind"] == "xid" and f["xid"] == 79)
        job = next(j for j in truth["jobs"] if f"{j['namespace']}/{j['job']}" == xid["job"])
        node_ip = _node_ip(sb, xid["node"])
        url = f"{sb.api.url}/exporters/dcgm-exporter/{node_ip}%3A9400/metrics"

        def pods_of_job() -> list[Any]:
            with sb.api.cond:
                return [o for o in sb.api.resources[("", "v1", "pods")].objects.values()
                        if o["metadata"]["namespace"] == job["namespace"]
                        and o["metadata"]["name"].startswith(job["job"])]

        assert pods_of_job() == []  # the job is created later in the scenario
        sb.advance((_ms(xid["onset"]) - sb.sim_origin.timestamp() * 1000) / 1000 - 60)  # a minute before the XID
        assert pods_of_job()
        code, before = get(url)
        assert code == 200
        assert "DCGM_FI_DEV_XID_ERRORS{" not in before  # absent until the first XID
        assert 'job="' not in before and 'instance="' not in before  # the scraper adds its own
        assert f'gpu="{xid["gpu"]}",UUID="{xid["uuid"]}"' in before
        stamps = [int(line.rsplit(" ", 1)[1]) for line in before.splitlines() if line and not line.startswith("#")]
        now_ms = sb.now().timestamp() * 1000
        assert all(now_ms - 60_000 <= t <= now_ms for t in stamps)

        sb.advance(120)  # the XID fired, and 20 s later the GPU's series stopped
        code, after = get(url)
        assert code == 200
        assert f'UUID="{xid["uuid"]}"' not in after
        others = {line.split('gpu="', 1)[1].split('"', 1)[0] for line in after.splitlines() if 'gpu="' in line}
        assert others == {str(g) for g in range(8)} - {str(xid["gpu"])}

        assert get(f"{sb.api.url}/exporters/dcgm-exporter/10.9.9.9%3A9400/metrics")[0] == 404
        sb.advance(2 * 3600)  # long after the scenario: every exporter has gone quiet
        assert get(url)[0] == 503
    finally:
        sb.stop()


def _node_ip(sb: Sandbox, node: str) -> str:
    with sb.api.cond:
        obj = sb.api.resources[("", "v1", "nodes")].objects[("", node)]
    return next(a["address"] for a in obj["status"]["addresses"] if a["type"] == "InternalIP")


def test_sandbox_plays_the_issue_31_stories(tmp_path: Path) -> None:
    """A crash-looping Job that fails, a restarting JobSet and a lost node's silent exporters, served live."""
    sb = Sandbox(tmp_path, "workload_crash", speed=1.0, interval=30.0).start()
    try:
        sb.advance(36 * 60)  # past the OOM Job's failure and the JobSet's restart
        with sb.api.cond:
            jobs = {o["metadata"]["name"]: o for o in sb.api.resources[("batch", "v1", "jobs")].objects.values()}
            jobsets = {o["metadata"]["name"]: o
                       for o in sb.api.resources[("jobset.x-k8s.io", "v1alpha2", "jobsets")].objects.values()}
        failed = next(c for c in jobs["moe-expert-ft"]["status"]["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "BackoffLimitExceeded"
        assert jobsets["llama-405b-pretrain"]["status"]["restarts"] == 1
        assert jobs["llama-405b-pretrain-workers-0"]["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
    finally:
        sb.stop()
    lost = Sandbox(tmp_path / "lost", "node_failure", speed=1.0, interval=30.0).start()
    try:
        truth = json.loads((lost.scenario_dir / "truth.json").read_text())
        f = next(f for f in truth["faults"] if f["kind"] == "node_lost")
        url = f"{lost.api.url}/exporters/dcgm-exporter/{_node_ip(lost, f['node'])}%3A9400/metrics"
        lost.advance((_ms(f["onset"]) - lost.sim_origin.timestamp() * 1000) / 1000 - 60)
        assert get(url)[0] == 200 and "DCGM_FI_DEV_SM_CLOCK{" in get(url)[1]
        lost.advance(5 * 60)  # the node is gone: its exporter stopped answering
        assert get(url)[0] == 503
        with lost.api.cond:
            node = lost.api.resources[("", "v1", "nodes")].objects[("", f["node"])]
        assert next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] == "Unknown"
    finally:
        lost.stop()
