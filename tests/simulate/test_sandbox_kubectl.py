"""The sandbox as the real ``kubectl`` sees it: server-side tables, ages on the sandbox clock, the review APIs.

kubectl asks for a ``meta.k8s.io/v1`` Table and prints what the server puts in it, so these tests read its
output as a person would: the columns a real cluster shows, a pod's STATUS and RESTARTS, a Workload's printer
columns, and ages that make sense on a clock ten times faster than real time (kubectl reckoning them itself
printed ``<invalid>``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from collectors.simulate.sandbox import Sandbox
from collectors.simulate.tables import human_duration

KUBECTL = shutil.which("kubectl")


def _kubectl() -> str:
    if KUBECTL is None:
        if os.environ.get("CI"):
            raise RuntimeError("kubectl is not installed (.ci/run installs Debian's kubectl)")
        pytest.skip("kubectl is not installed")
    return KUBECTL


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory):
    sb = Sandbox(tmp_path_factory.mktemp("sandbox"), "mixed", speed=10.0, interval=30.0).start()
    sb.advance(15 * 60)  # a quarter of an hour in: jobs admitted, pods running
    yield sb
    sb.stop()


def kubectl(sb: Sandbox, *args: str) -> list[list[str]]:
    """kubectl's output as rows of cells, cut at the header's column starts (an empty cell stays a cell)."""
    out = subprocess.run([_kubectl(), "--kubeconfig", str(sb.kubeconfig), *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    starts = [0] + [m.end() for m in re.finditer(r"\s{2,}", lines[0])]
    return [[line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)] for line in lines]


_UNIT = {"y": 365 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


def seconds(text: str) -> int:
    """``3m20s`` / ``2d4h`` -> seconds (the inverse of HumanDuration, to its precision)."""
    parts = re.findall(r"(\d+)([ydhms])", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return sum(int(n) * _UNIT[u] for n, u in parts)


@pytest.mark.parametrize(("s", "shown"), [
    (-2, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (150, "2m30s"), (600, "10m"),
    (179 * 60, "179m"), (3 * 3600, "3h"), (3 * 3600 + 300, "3h5m"), (8 * 3600, "8h"), (47 * 3600, "47h"),
    (48 * 3600, "2d"), (50 * 3600, "2d2h"), (8 * 86400, "8d"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y"),
])
def test_ages_are_shown_as_kubectl_shows_them(s: int, shown: str) -> None:
    """apimachinery HumanDuration's steps (its own test table's boundaries)."""
    assert human_duration(s) == shown


def test_kubectl_get_pods_prints_status_and_restarts_with_ages_on_the_sandbox_clock(sandbox: Sandbox) -> None:
    rows = kubectl(sandbox, "get", "pods", "-A")
    assert rows[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    pods = {(r[0], r[1]): r for r in rows[1:]}
    running = [r for r in pods.values() if r[3] == "Running"]
    assert len(running) >= 4 and all(r[2] == "1/1" and r[4] == "0" for r in running)
    # Ages against the sandbox clock: the exporter pods were created at its start, 15 simulated minutes ago.
    dcgm = [r for (ns, _), r in pods.items() if ns == "gpu-operator"]
    assert len(dcgm) == sandbox.nodes
    for r in rows[1:]:
        assert "<invalid>" not in r[5]
    elapsed = (sandbox.now() - sandbox.sim_origin).total_seconds()
    for r in dcgm:
        assert elapsed - 120 <= seconds(r[5]) <= elapsed + 120, (r, elapsed)


def test_a_crashing_pod_shows_its_reason_and_its_restarts(sandbox: Sandbox) -> None:
    """printPod: the waiting reason of the last container is the STATUS; RESTARTS says when the last one was."""
    now = sandbox.now()
    ts = lambda d: (now - d).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    sandbox.api.put("", "v1", "pods", {
        "metadata": {"name": "crasher-0", "namespace": "team-z", "creationTimestamp": ts(timedelta(hours=1))},
        "spec": {"nodeName": "gpu-node-001", "containers": [{"name": "trainer", "image": "x"}]},
        "status": {"phase": "Running", "podIP": "192.168.0.99", "containerStatuses": [{
            "name": "trainer", "ready": False, "restartCount": 4, "image": "x",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 2m40s restarting failed"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                         "finishedAt": ts(timedelta(minutes=3))}},
        }]}})
    sandbox.api.put("", "v1", "pods", {
        "metadata": {"name": "puller-0", "namespace": "team-z", "creationTimestamp": ts(timedelta(minutes=20))},
        "spec": {"nodeName": "gpu-node-002", "containers": [{"name": "trainer", "image": "registry/x:missing"}]},
        "status": {"phase": "Pending", "containerStatuses": [{
            "name": "trainer", "ready": False, "restartCount": 0, "image": "registry/x:missing",
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}})
    rows = {r[0]: r for r in kubectl(sandbox, "get", "pods", "-n", "team-z", "-o", "wide")[1:]}
    assert rows["crasher-0"][1:3] == ["0/1", "CrashLoopBackOff"]
    restarts = re.fullmatch(r"4 \((\w+) ago\)", rows["crasher-0"][3])
    assert restarts and 180 <= seconds(restarts.group(1)) <= 180 + 120, rows["crasher-0"]  # the clock runs 10x
    assert 3600 <= seconds(rows["crasher-0"][4]) <= 3600 + 120
    assert rows["crasher-0"][5:7] == ["192.168.0.99", "gpu-node-001"]
    assert rows["puller-0"][1:4] == ["0/1", "ImagePullBackOff", "0"]
    assert rows["puller-0"][5] == "<none>"  # no pod IP yet


def test_kueue_and_podgroup_objects_show_their_crd_printer_columns(sandbox: Sandbox) -> None:
    rows = kubectl(sandbox, "get", "workloads.kueue.x-k8s.io", "-A")
    assert rows[0] == ["NAMESPACE", "NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"]
    admitted = [r for r in rows[1:] if len(r) == 7 and r[4] == "True"]
    assert admitted and all(r[3].endswith("-cq") for r in admitted)
    groups = kubectl(sandbox, "get", "podgroups.scheduling.x-k8s.io", "-A")
    assert groups[0] == ["NAMESPACE", "NAME", "PHASE", "MINMEMBER", "RUNNING", "SUCCEEDED", "FAILED", "AGE"]
    assert len(groups) > 1 and groups[1][2] in ("Pending", "Scheduling", "Scheduled", "Running", "Finished")
    queues = kubectl(sandbox, "get", "clusterqueues")
    assert queues[0] == ["NAME", "COHORT", "PENDING WORKLOADS"]
    nodes = kubectl(sandbox, "get", "nodes")
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert {r[1] for r in nodes[1:]} == {"Ready"} and len(nodes) == sandbox.nodes + 1


def test_kubectl_auth_reads_the_review_apis(sandbox: Sandbox) -> None:
    who = kubectl(sandbox, "auth", "whoami")
    assert who[1] == ["Username", "system:admin"]
    assert kubectl(sandbox, "auth", "can-i", "watch", "workloads.kueue.x-k8s.io") == [["yes"]]


def test_the_exporters_are_pods_reached_through_the_pod_proxy(sandbox: Sandbox, tmp_path: Path) -> None:
    rows = kubectl(sandbox, "get", "pods", "-n", "gpu-operator", "-l", "app=nvidia-dcgm-exporter")
    name = rows[1][0]
    out = subprocess.run([_kubectl(), "--kubeconfig", str(sandbox.kubeconfig), "get", "--raw",
                          f"/api/v1/namespaces/gpu-operator/pods/{name}:9400/proxy/metrics"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "DCGM_FI_DEV_GPU_UTIL{" in out.stdout and 'job="' not in out.stdout
    wrong = subprocess.run([_kubectl(), "--kubeconfig", str(sandbox.kubeconfig), "get", "--raw",
                            f"/api/v1/namespaces/gpu-operator/pods/{name}:9999/proxy/metrics"],
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0  # nothing listens on that port


def test_kubectl_get_watch_prints_rows_under_one_header(sandbox: Sandbox) -> None:
    """`kubectl get pods -A -w`: the watch's events come as one-row Tables, the columns in the first only, as
    kube-apiserver sends them (plain objects made kubectl print a second 'NAME AGE' header and '<invalid>' ages)."""
    proc = subprocess.Popen([_kubectl(), "--kubeconfig", str(sandbox.kubeconfig), "get", "pods", "-A", "-w"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        sandbox.advance(10 * 60)  # ten simulated minutes: pods start, finish, get deleted
        time.sleep(5)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    lines = [line for line in out.splitlines() if line.strip()]
    headers = [line for line in lines if line.split()[:2] == ["NAMESPACE", "NAME"]]
    assert len(headers) == 1 and lines[0] == headers[0], out[-2000:]
    assert lines[0].split() == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    listed = len(kubectl(sandbox, "get", "pods", "-A")) - 1
    assert len(lines) - 1 > listed, "no watch event was printed"  # the list, then the watch's rows
    assert "<invalid>" not in out and all(len(line.split()) >= 6 for line in lines[1:]), out[-2000:]
