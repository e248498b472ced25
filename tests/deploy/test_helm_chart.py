"""The Helm chart (deploy/helm/gangscope) beside the kustomize manifests (deploy/kubernetes).

Rendered by the real Helm (built from its Go module by .ci/run into ~/.cache/gangscope-helm/<version>/) and
the real kustomize (kubectl's): the default rendering describes the same Deployment, RBAC, Service and volume,
and settings that load to the same ``Settings``; Helm's own release labels and the config checksum are the only
differences allowed. The values for Kafka SASL/TLS, the catalog, object storage, remote write and Alertmanager
turn into Secrets references and mounts, never into a secret's value in the manifests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangscope import config
from tests.servers import gobuild

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gangscope"
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by",
               "helm.sh/chart")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None and name == "helm":
        gobuild.wait()  # .ci/run builds Helm in the background
        built = sorted(Path.home().glob(".cache/gangscope-helm/*/.complete"))
        found = str(built[-1].parent / "helm") if built else None
    if found is None:
        if os.environ.get("CI"):
            raise RuntimeError(f"{name} not found (.ci/run builds helm and installs kubectl)")
        pytest.skip(f"{name} not found")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300, cwd=ROOT)


def helm_template(*flags: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = _run(_tool("helm"), "template", "gangscope", str(CHART), "--namespace", "gangscope", *flags)
    assert out.returncode == 0, out.stderr
    return _by_kind(out.stdout)


def _by_kind(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


def _strip(obj: Any) -> Any:
    """Without Helm's release labels and the pod template's config checksum."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items()
                if k not in HELM_LABELS and not k.startswith("checksum/") and not (k == "annotations" and all(
                    a.startswith("checksum/") for a in v))}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


@pytest.fixture(scope="module")
def kustomized() -> dict[tuple[str, str], dict[str, Any]]:
    out = _run(_tool("kubectl"), "kustomize", str(KUSTOMIZE))
    assert out.returncode == 0, out.stderr
    return _by_kind(out.stdout)


def test_helm_lint_passes() -> None:
    out = _run(_tool("helm"), "lint", "--strict", str(CHART))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_default_rendering_is_the_kustomize_deployment_rbac_and_service(kustomized, tmp_path) -> None:
    chart = helm_template()
    kinds = ("Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "PersistentVolumeClaim")
    for key in sorted(k for k in kustomized if k[0] in kinds):
        assert key in chart, f"{key} not rendered by the chart"
        assert _strip(chart[key]) == _strip(kustomized[key]), key
    assert {k for k in chart if k[0] in kinds} == {k for k in kustomized if k[0] in kinds}
    assert chart[("Deployment", "gangscope")]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    # The settings themselves: both files load to the same Settings.
    loaded = []
    for name, docs in (("chart", chart), ("kustomize", kustomized)):
        f = tmp_path / f"{name}.yaml"
        f.write_text(docs[("ConfigMap", "gangscope")]["data"]["gangscope.yaml"])
        loaded.append(config.load(f, environ={}))
    assert loaded[0] == loaded[1]


def test_the_rbac_is_read_only() -> None:
    role = helm_template()[("ClusterRole", "gangscope-reader")]
    for rule in role["rules"]:
        assert sorted(rule["verbs"]) == ["get", "list", "watch"] and "*" not in rule["resources"]


def test_values_turn_into_secret_references_mounts_and_settings(tmp_path) -> None:
    chart = helm_template(
        "--set", "kafka.sasl.enabled=true", "--set", "kafka.sasl.passwordSecret.name=kafka-password",
        "--set", "kafka.tls.enabled=true", "--set", "kafka.tls.caSecret.name=kafka-ca",
        "--set", "kafka.tls.clientCertSecret.name=gangscope-client",
        "--set", "catalogSecret.name=lake-catalog", "--set", "objectStorage.dataPath=s3://lake/gangscope/",
        "--set", "objectStorage.credentialsSecret=duckdb-s3", "--set", "remoteWrite.enabled=true",
        "--set", "alertmanager.url=http://alertmanager-operated.monitoring:9093", "--set", "memoryLimit=2GB",
        "--set", "resources.limits.memory=8Gi", "--set-json", 'config={"thresholds": {"admission_wait_s": 300}}')
    dep = chart[("Deployment", "gangscope")]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["GANGSCOPE_KAFKA_SASL_PLAIN_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "kafka-password", "key": "password"}
    assert env["GANGSCOPE_CATALOG"]["valueFrom"]["secretKeyRef"] == {"name": "lake-catalog", "key": "url"}
    plain = {k: e["value"] for k, e in env.items() if "value" in e}
    assert plain["GANGSCOPE_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["kafka-ca"]["secret"]["secretName"] == "kafka-ca"
    assert plain["GANGSCOPE_KAFKA_SSL_CAFILE"] == f"{mounts['kafka-ca']}/ca.crt"
    assert plain["GANGSCOPE_KAFKA_SSL_CERTFILE"].startswith(mounts["kafka-client"])
    assert volumes["duckdb-secrets"]["secret"]["secretName"] == "duckdb-s3"
    assert mounts["duckdb-secrets"] == f"{plain['HOME']}/.duckdb/stored_secrets"
    assert c["resources"]["limits"]["memory"] == "8Gi"
    # The rendered settings, with the environment the pod gets (secrets stand in), load as meant.
    f = tmp_path / "gangscope.yaml"
    f.write_text(chart[("ConfigMap", "gangscope")]["data"]["gangscope.yaml"])
    s = config.load(f, environ={**plain, "GANGSCOPE_KAFKA_SASL_PLAIN_PASSWORD": "from-the-secret",
                                 "GANGSCOPE_CATALOG": "postgres://gangscope@pg/lake"})
    assert s.collectors == ["k8s", "metrics", "remote_write"]
    assert s.kafka.security == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                "sasl_plain_username": "gangscope", "sasl_plain_password": "from-the-secret",
                                "ssl_cafile": "/etc/gangscope/kafka-ca/ca.crt",
                                "ssl_certfile": "/etc/gangscope/kafka-client/tls.crt",
                                "ssl_keyfile": "/etc/gangscope/kafka-client/tls.key"}
    assert s.catalog == "postgres://gangscope@pg/lake" and s.lake_data_path == "s3://lake/gangscope/"
    assert s.findings.alertmanager_url == "http://alertmanager-operated.monitoring:9093"
    assert s.memory_limit == "2GB" and s.thresholds.admission_wait_s == 300
    # A change of settings rolls the pod (the checksum follows the config).
    assert dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != \
        helm_template()[("Deployment", "gangscope")]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]


def test_sasl_without_its_password_secret_is_refused() -> None:
    out = _run(_tool("helm"), "template", "gangscope", str(CHART), "--set", "kafka.sasl.enabled=true")
    assert out.returncode != 0 and "kafka.sasl.passwordSecret.name" in out.stderr


def test_a_release_of_another_name_keeps_its_objects_apart() -> None:
    out = _run(_tool("helm"), "template", "team-a", str(CHART), "--namespace", "obs")
    assert out.returncode == 0, out.stderr
    docs = _by_kind(out.stdout)
    assert ("Deployment", "team-a-gangscope") in docs and ("ClusterRole", "team-a-gangscope-reader") in docs
    binding = docs[("ClusterRoleBinding", "team-a-gangscope-reader")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gangscope", "namespace": "obs"}]


def test_the_live_page_is_on_the_service_only_with_its_credential_from_a_secret(tmp_path) -> None:
    """The page shares the Service's port (ClusterIP unless the user chooses a type); its credential comes from an
    optional Secret by reference, never as a value; page.enabled=false turns it off in the settings."""
    default = helm_template()
    svc = default[("Service", "gangscope")]
    assert svc["spec"]["type"] == "ClusterIP" and [p["port"] for p in svc["spec"]["ports"]] == [9108]
    assert not [k for k in default if k[0] in ("Ingress", "Route", "Gateway", "HTTPRoute")]
    (c,) = default[("Deployment", "gangscope")]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    for name, key in (("GANGSCOPE_SERVER_TOKEN", "token"), ("GANGSCOPE_SERVER_BASIC_AUTH", "basic-auth")):
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "gangscope-page", "key": key, "optional": True}
        assert "value" not in env[name]
    chart = helm_template("--set", "page.enabled=false", "--set", "page.authSecret=ops-page",
                          "--set", "service.type=LoadBalancer")
    assert chart[("Service", "gangscope")]["spec"]["type"] == "LoadBalancer"
    (c,) = chart[("Deployment", "gangscope")]["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e for e in c["env"]}["GANGSCOPE_SERVER_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "ops-page"
    f = tmp_path / "gangscope.yaml"
    f.write_text(chart[("ConfigMap", "gangscope")]["data"]["gangscope.yaml"])
    assert config.load(f, environ={}).server.page is False
    f.write_text(default[("ConfigMap", "gangscope")]["data"]["gangscope.yaml"])
    s = config.load(f, environ={"GANGSCOPE_SERVER_TOKEN": "from-the-secret"})
    assert s.server.page is True and s.server.token == "from-the-secret" and s.server.listen == "0.0.0.0:9108"
