"""`gangscope check` against the sandbox and against API servers set up to lack one thing each.

It passes on the sandbox (warnings allowed), and fails with the right line when RBAC lacks ``watch`` on
Workloads (a bearer token with the real ClusterRole's rules less that verb), when the API server does not
answer, and when the dcgm-exporter serves no clock field (the real L4 dcgm-exporter scrape with its clock lines
taken out). The rest of each report must not fail: one missing thing is one failing line.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collectors.simulate.apiserver import ApiServer, Identity
from collectors.simulate.sandbox import Sandbox
from gangscope import config
from gangscope.app.check import run_checks

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "deploy" / "kubernetes" / "rbac.yaml"
L4 = ROOT / "tests" / "fixtures" / "reference" / "telemetry" / "dcgm-exporter_metrics_sample_L4_gpu-operator.prom"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory):
    sb = Sandbox(tmp_path_factory.mktemp("sandbox"), "mixed", speed=10.0, interval=30.0).start()
    sb.advance(12 * 60)  # jobs admitted and running
    sb.write_files()  # gangscope.yaml's clock follows the advanced sandbox clock
    yield sb
    sb.stop()


def check(*args: str) -> tuple[int, dict]:
    out = subprocess.run([sys.executable, "-m", "gangscope.app.cli", "check", "--format", "json", *args],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.stdout, out.stderr
    return out.returncode, json.loads(out.stdout)


def lines(report: dict, status: str) -> list[str]:
    return [f"{c['check']}: {c['message']}" for c in report["checks"] if c["status"] == status]


def kubeconfig(path: Path, server: str, token: str | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token} if token else {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def reader_rules() -> list[dict]:
    """The rules of the shipped gangscope-reader ClusterRole (deploy/kubernetes/rbac.yaml)."""
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole")
    return role["rules"]


def test_check_passes_on_the_sandbox(sandbox: Sandbox) -> None:
    code, report = check("--config", str(sandbox.config))
    assert code == 0 and report["status"] == "pass", lines(report, "fail")
    assert not lines(report, "fail")
    passed = "\n".join(lines(report, "pass"))
    assert "identity: as system:admin" in passed
    assert "Kueue kueue.x-k8s.io v1beta2, v1beta1 served; watching kueue.x-k8s.io/v1beta2" in passed
    assert "scheduler-plugins PodGroup scheduling.x-k8s.io/v1alpha1" in passed
    assert "Volcano PodGroup scheduling.volcano.sh/v1beta1" in passed and "JobSet jobset.x-k8s.io/v1alpha2" in passed
    assert "rbac: list and watch allowed on all" in passed
    assert "kueue: Kueue v0.19.2" in passed and "granular admission reasons on" in passed
    assert "topology: Topology default: all 20 GPU nodes carry its levels" in passed
    assert f"exporters: dcgm-exporter: {sandbox.nodes} of {sandbox.nodes} answered" in passed
    assert "clock: API server clock" in passed  # the sandbox's clock, as gangscope.yaml configures gangscope's
    # The sandbox's dcgm-exporter serves the SM clock and NVLink: no line says they are missing.
    assert not [x for x in lines(report, "warn") if "SM_CLOCK" in x or "nvlink" in x]


def test_check_with_only_the_kubeconfig_discovers_the_exporters_through_the_pod_proxy(sandbox: Sandbox) -> None:
    code, report = check("--kubeconfig", str(sandbox.kubeconfig), "--config", str(sandbox.config))
    assert code == 0, lines(report, "fail")
    with_config = yaml.safe_load(sandbox.config.read_text())
    cfg = sandbox.directory / "clock-only.yaml"  # the clock, and no targets: discovery finds the exporters
    cfg.write_text(yaml.safe_dump({"clock": with_config["clock"]}))
    code, report = check("--kubeconfig", str(sandbox.kubeconfig), "--config", str(cfg))
    assert code == 0, lines(report, "fail")
    passed = "\n".join(lines(report, "pass"))
    assert f"dcgm-exporter: {sandbox.nodes} of {sandbox.nodes} answered" in passed
    assert f"node_exporter: {sandbox.nodes} of {sandbox.nodes} answered" in passed
    assert "Kueue controller: 1 of 1 answered" in passed


def test_check_fails_on_the_one_line_when_rbac_lacks_watch_on_workloads(sandbox: Sandbox, tmp_path: Path) -> None:
    rules = copy.deepcopy(reader_rules())
    for r in rules:
        if r["apiGroups"] == ["kueue.x-k8s.io"]:
            r["resources"].remove("workloads")
    rules.append({"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]})
    rules.append({"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]})
    sa = "system:serviceaccount:gangscope:gangscope"
    sandbox.api.tokens = {"reader-token": Identity(sa, ("system:serviceaccounts", "system:authenticated"),
                                                   tuple(rules))}
    try:
        code, report = check("--kubeconfig", str(kubeconfig(tmp_path / "kc", sandbox.api.url, "reader-token")),
                             "--config", str(sandbox.config))
    finally:
        sandbox.api.tokens = None
    assert code == 1 and report["status"] == "fail"
    failed = lines(report, "fail")
    assert failed == ["rbac: cannot watch workloads.kueue.x-k8s.io: changes after the first list are never seen"]
    fix = next(c["fix"] for c in report["checks"] if c["status"] == "fail")
    assert "kubectl auth can-i watch workloads.kueue.x-k8s.io" in fix
    assert f"identity: as {sa}" in "\n".join(lines(report, "pass"))


def test_check_fails_when_the_api_server_does_not_answer(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, report = check("--kubeconfig", str(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")))
    assert code == 1
    (failed,) = [c for c in report["checks"] if c["status"] == "fail"]
    assert failed["check"] == "api" and f"cannot reach the API server at http://127.0.0.1:{port}" in failed["message"]
    assert "kubectl --context c get --raw /version" in failed["fix"]


def test_check_without_credentials_says_where_it_looked(tmp_path: Path) -> None:
    code, report = check("--kubeconfig", str(tmp_path / "missing"))
    assert code == 1 and [c["check"] for c in report["checks"]] == ["credentials"]


@pytest.fixture
def l4_cluster(tmp_path: Path):
    """A small API server with one GPU node and a dcgm-exporter pod that serves ``body`` through the pod proxy."""
    api = ApiServer().start()
    for g, v, p, k, ns in (("", "v1", "pods", "Pod", True), ("", "v1", "nodes", "Node", False),
                           ("", "v1", "events", "Event", True)):
        api.serve(g, v, p, k, ns)
    api.put("", "v1", "nodes", {"metadata": {"name": "gpu-node-1"},
                                "status": {"allocatable": {"nvidia.com/gpu": "1"}}})
    api.put("", "v1", "pods", {
        "metadata": {"name": "nvidia-dcgm-exporter-x2k4p", "namespace": "gpu-operator",
                     "labels": {"app": "nvidia-dcgm-exporter"}},
        "spec": {"nodeName": "gpu-node-1"}, "status": {"phase": "Running", "podIP": "192.168.0.2"}})
    served = {"body": L4.read_bytes()}
    api.pod_proxy = lambda ns, pod, scheme, port, path, q: (
        (200, "text/plain; version=0.0.4", served["body"]) if (pod, port, path) ==
        ("nvidia-dcgm-exporter-x2k4p", 9400, "/metrics") else None)
    settings = config.load(overrides={"k8s": {"kubeconfig": str(kubeconfig(tmp_path / "kc", api.url))},
                                      "metrics": {"discovery": [{"job": "dcgm"}]}}, environ={})
    yield settings, served
    api.stop()


def test_check_fails_when_the_dcgm_exporter_serves_no_clock_fields(l4_cluster) -> None:
    settings, served = l4_cluster
    whole = run_checks(settings)
    by = {(x.status, x.check): x.message for x in whole.lines}
    assert not whole.failed, whole.to_text()
    assert "dcgm-exporter: 1 of 1 answered" in by[("pass", "exporters")]
    # The real L4 scrape has no NVLink fields (a PCIe card): said as a warning, with what cannot be seen.
    assert "NVLink interconnect degradation cannot be seen" in by[("warn", "signals")]
    served["body"] = b"".join(line for line in L4.read_bytes().splitlines(keepends=True) if b"_CLOCK" not in line)
    assert b"DCGM_FI_DEV_GPU_UTIL" in served["body"] and b"CLOCK" not in served["body"]
    clockless = run_checks(settings)
    failed = [x for x in clockless.lines if x.status == "fail"]
    assert [(x.check, x.message) for x in failed] == [
        ("signals", "dcgm-exporter serves no DCGM_FI_DEV_SM_CLOCK: throttled GPUs cannot be seen (gpu_throttle)")]
    assert "default-counters.csv" in (failed[0].fix or "")
    assert clockless.to_text().endswith("1 fail")


def test_kueue_version_is_the_image_tag() -> None:
    """The version `check` reports is the controller image's tag: not a digest pinned after it, not a registry
    port (the last ':' of 'kueue:v0.19.2@sha256:...' or 'host:5000/kueue' is not the tag's)."""
    from gangscope.app.check import image_tag

    assert image_tag("registry.k8s.io/kueue/kueue:v0.19.2@sha256:4f1c") == "v0.19.2"
    assert image_tag("host:5000/kueue:v0.19.2") == "v0.19.2" and image_tag("kueue:v0.17.0") == "v0.17.0"
    assert image_tag("host:5000/kueue") is None and image_tag("kueue@sha256:4f1c") is None
