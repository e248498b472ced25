"""The Kubernetes manifests: read-only RBAC on exactly the watched kinds, a Deployment running `gangscope run`."""

from __future__ import annotations

from pathlib import Path

import yaml

from collectors.k8s.discovery import SLOTS
from gangscope import config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def manifests() -> dict[tuple[str, str], dict]:
    out = {}
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    for f in kust["resources"]:
        for d in yaml.safe_load_all((DEPLOY / f).read_text()):
            out[(d["kind"], d["metadata"]["name"])] = d
    return out


def test_cluster_role_is_read_only_on_exactly_the_contract_kinds():
    role = manifests()[("ClusterRole", "gangscope-reader")]
    granted = set()
    for rule in role["rules"]:
        assert sorted(rule["verbs"]) == ["get", "list", "watch"]
        assert "*" not in rule["apiGroups"] and "*" not in rule["resources"]
        assert set(rule) == {"apiGroups", "resources", "verbs"}  # no nonResourceURLs, no resourceNames tricks
        granted |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    wanted = {(g, s.plural) for s in SLOTS for g, _ in s.alternatives}
    assert granted == wanted


def test_binding_deployment_and_config_fit_together(tmp_path):
    m = manifests()
    ns = m[("Namespace", "gangscope")]["metadata"]["name"]
    sa = m[("ServiceAccount", "gangscope")]
    binding = m[("ClusterRoleBinding", "gangscope-reader")]
    assert binding["roleRef"]["name"] == "gangscope-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": ns}]
    dep = m[("Deployment", "gangscope")]
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    assert pod["serviceAccountName"] == "gangscope"
    (c,) = pod["containers"]
    assert c["args"][0] == "run" and c["securityContext"]["readOnlyRootFilesystem"] is True
    cfg_mount = next(v for v in c["volumeMounts"] if v["name"] == "config")["mountPath"]
    assert c["args"][1:] == ["--config", f"{cfg_mount}/gangscope.yaml"]
    cm = m[("ConfigMap", "gangscope")]
    f = tmp_path / "gangscope.yaml"
    f.write_text(cm["data"]["gangscope.yaml"])
    s = config.load(f, environ={})  # the shipped settings are valid
    assert s.collectors == ["k8s", "metrics"] and str(s.data) == "/data"
    assert s.server.listen.endswith(str(c["ports"][0]["containerPort"]))
    # The Service (remote write, /metrics) reaches that port of exactly these pods.
    svc = m[("Service", "gangscope")]
    assert svc["metadata"]["namespace"] == ns
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == [c["ports"][0]["name"]]
