"""A real Kubernetes 1.37 control plane for the tests: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok (fake GPU nodes and their kubelets) and Kueue, on free loopback ports.

The binaries are built once from their Go modules by ``.ci/build-kubernetes`` into
``~/.cache/gangscope-k8s/<part>-<version>/``; a machine without them skips the ``kubernetes`` tests (CI fails them).

Authentication: a static token per component (``--token-auth-file``) and TLS from a throwaway CA made here with
``openssl``; authorization is RBAC. The controller-manager runs every controller with its own service account
(``--use-service-account-credentials``), as kubeadm sets it up; the scheduler runs as ``system:kube-scheduler``.
The native gang APIs (``scheduling.k8s.io/v1beta1`` Workload and PodGroup, ``v1alpha3`` CompositePodGroup) are
switched on with their feature gates; Kueue runs outside the cluster with its internal certificate management,
its webhooks reached through an ExternalName Service for ``localhost``.

Nodes are kwok's: it plays the kubelet (status, lease, pod phases) of every Node labelled ``MANAGED_LABEL`` with
the stages shipped in its module (``stage/``), plus the chaos stage that fails a pod's container with an exit
code. Removing the label from a node is a kubelet that died: its lease stops, the node lifecycle controller marks
it ``Unknown`` and taints it, and the taint eviction controller deletes its pods.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from collectors.simulate.cluster import BLOCK_LABEL, GPUS_PER_NODE, HOST_LABEL, NODE_GROUP_LABEL, RACK_LABEL
from tests.servers import gobuild
from tests.servers.kafka import make_tls
from tests.servers.process import free_port, halt

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "build-kubernetes"
_SCRIPT = BUILD_SCRIPT.read_text()
VERSIONS = {part: re.search(rf"^{var}=(\S+)$", _SCRIPT, re.M).group(1)  # type: ignore[union-attr]
            for part, var in (("kubernetes", "K8S_VERSION"), ("etcd", "ETCD_VERSION"), ("kwok", "KWOK_VERSION"),
                              ("kueue", "KUEUE_VERSION"))}
CACHE = Path(os.environ.get("GANGSCOPE_K8S_CACHE") or Path.home() / ".cache" / "gangscope-k8s")

FEATURE_GATES = ("GenericWorkload=true,CompositePodGroup=true,TopologyAwareWorkloadScheduling=true,"
                 "PodGroupPreemptionPolicy=true,WorkloadWithJob=true")
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
MANAGED_LABEL = "gangscope.test/kwok"  # kwok plays the kubelet of nodes with this label (value "managed")
KUEUE_NAMESPACE = "kueue-system"
KUEUE_SERVICE = "kueue-webhook-service"
KUEUE_SECRET = "kueue-webhook-server-cert"
# How long after its lease stops a node is Unknown, and how long its pods tolerate that before eviction.
NODE_GRACE_S = 16
TOLERATION_S = 10
LEASE_S = 8  # kwok renews each node's lease at a quarter of this


def part(name: str) -> Path:
    """The cache directory of one built part (``bin/`` and what came with it)."""
    return CACHE / f"{name}-{VERSIONS[name]}"


def binaries_missing() -> list[str]:
    return [f"{n} {VERSIONS[n]}" for n in VERSIONS if not (part(n) / ".complete").exists()]


@dataclass
class Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, n: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0


@dataclass
class KubeCluster:
    """A running control plane. ``kubeconfig`` is an admin's (``system:masters``)."""

    directory: Path
    api_url: str
    ca_file: Path
    kubeconfig: Path
    etcd_url: str
    components: dict[str, Component] = field(default_factory=dict)
    started_s: dict[str, float] = field(default_factory=dict)  # component -> seconds from launch to ready
    tokens: dict[str, str] = field(default_factory=dict)
    argv: dict[str, list[str]] = field(default_factory=dict)  # component -> its command line
    ready_urls: dict[str, tuple[str, Path | None, str | None]] = field(default_factory=dict)  # url, CA, token

    # --- talking to it --------------------------------------------------------------------------------------------
    @property
    def kubectl_bin(self) -> Path:
        return part("kubernetes") / "bin" / "kubectl"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.kubectl_bin), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()[-1500:]}")
        return done

    def apply(self, *objects: dict[str, Any] | Iterable[dict[str, Any]], server_side: bool = True) -> None:
        """``kubectl apply`` of objects (dicts, or iterables of them)."""
        docs: list[dict[str, Any]] = []
        for o in objects:
            docs.extend([o] if isinstance(o, dict) else o)
        args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
        self.kubectl(*args, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))

    def get(self, resource: str, name: str | None = None, namespace: str | None = None) -> Any:
        args = ["get", resource, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        return json.loads(self.kubectl(*args).stdout)

    def request(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        """One API call as the admin (or with ``token``): (HTTP status, decoded JSON body)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api_url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {token or self.tokens['admin']}", "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:  # noqa: S310 - loopback
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def wait_for(self, what: str, check: Any, timeout_s: float = 120.0, every_s: float = 0.5) -> Any:
        """Poll ``check()`` until it returns something truthy; raise naming ``what`` when time runs out."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            self._assert_alive()
            time.sleep(every_s)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {str(last)[:500]})")

    def kubeconfig_for(self, user: str, token: str, path: Path | None = None) -> Path:
        """A kubeconfig that authenticates with ``token`` (e.g. a service account's)."""
        path = path or self.directory / f"kubeconfig-{user.replace(':', '-')}"
        _write_kubeconfig(path, self.api_url, self.ca_file, user, token)
        return path

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A token minted for a ServiceAccount through the TokenRequest API (what a pod's projected token is)."""
        status, body = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                                    {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                     "spec": {"expirationSeconds": seconds}})
        if status != 201:
            raise RuntimeError(f"TokenRequest for {namespace}/{name}: HTTP {status}: {body}")
        return str(body["status"]["token"])

    # --- etcd -----------------------------------------------------------------------------------------------------
    def etcd_revision(self) -> int:
        return int(self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd's history up to ``revision`` (default: now), as the API server does every 5 min: a watch
        from an older resourceVersion is then answered 410 Gone. Returns the revision compacted to."""
        rev = revision or self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def _etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback
            return json.loads(r.read())

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def restart(self, name: str, timeout_s: float = 90.0) -> float:
        """Stop one component and start it again with the same flags; returns seconds until it is ready."""
        comp = self.components[name]
        halt(comp.process, 30)
        t0 = time.monotonic()
        self.components[name] = _launch(name, self.argv[name], self.directory)
        _wait_ready(self, name, timeout_s)
        return time.monotonic() - t0

    def rss_mb(self) -> dict[str, float]:
        return {n: c.rss_mb() for n, c in self.components.items()}

    def _assert_alive(self) -> None:
        for c in self.components.values():
            if c.process.poll() is not None:
                raise RuntimeError(f"{c.name} exited with code {c.process.returncode}: {c.tail()}")

    def stop(self) -> None:
        for name in reversed(list(self.components)):
            halt(self.components[name].process, 20)
        if not os.environ.get("GANGSCOPE_K8S_KEEP"):
            shutil.rmtree(self.directory, ignore_errors=True)


# --- starting ---------------------------------------------------------------------------------------------------


def _launch(name: str, argv: list[str], directory: Path) -> Component:
    log = directory / f"{name}.log"
    out = log.open("ab")
    try:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=directory, preexec_fn=_die_with_parent)
    finally:
        out.close()
    return Component(name, proc, log)


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, however it dies (no control plane left behind)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _get_ok(url: str, ca: Path | None, token: str | None = None) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()  # noqa: S323
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, context=ctx if url.startswith("https") else None,  # noqa: S310
                                    timeout=3) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def _wait_ready(cluster: KubeCluster, name: str, timeout_s: float) -> None:
    comp = cluster.components[name]
    url, ca, token = cluster.ready_urls[name]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if comp.process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {comp.process.returncode}: {comp.tail()}")
        if _get_ok(url, ca, token):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name} was not ready at {url} within {timeout_s:.0f} s: {comp.tail()}")


def _write_kubeconfig(path: Path, server: str, ca: Path, user: str, token: str) -> None:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gangscope-test",
        "clusters": [{"name": "gangscope-test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "gangscope-test", "context": {"cluster": "gangscope-test", "user": user}}],
    }))
    path.chmod(0o600)


def _openssl(directory: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60, cwd=directory)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()[-400:]}")


# Users of the token file: name -> groups. The admin (tests, gangscope's own kubeconfig unless a test narrows it),
# kwok and Kueue are cluster admins; the controller-manager and the scheduler have their built-in roles.
_USERS = {
    "admin": ("gangscope-test-admin", "system:masters"),
    "kcm": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    "kwok": ("kwok", "system:masters"),
    "kueue": ("kueue-controller-manager", "system:masters"),
}


def start(timeout_s: float = 180.0, base_nodes: int = 0) -> KubeCluster:
    """Start the whole control plane; raises RuntimeError with the reason when it cannot. Waits for a build of its
    binaries that runs in the background (.ci/run)."""
    missing = binaries_missing()
    if missing:
        gobuild.wait(done=lambda: not binaries_missing())  # not for Helm, built after these
        missing = binaries_missing()
    if missing:
        raise RuntimeError(f"Kubernetes test binaries not built ({', '.join(missing)}): run .ci/build-kubernetes"
                           + (f"; its log ends: {tail}" if (tail := gobuild.log_tail()) else ""))
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl not found (the control plane's certificates are made with it)")
    root = Path(tempfile.mkdtemp(prefix="gangscope-k8s-"))
    try:
        return _start(root, timeout_s, base_nodes)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def _start(root: Path, timeout_s: float, base_nodes: int) -> KubeCluster:
    k8s_bin = part("kubernetes") / "bin"
    tls = make_tls(root / "tls")
    _openssl(root / "tls", "genrsa", "-out", "sa.key", "2048")
    _openssl(root / "tls", "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    tokens = {k: secrets.token_hex(16) for k in _USERS}
    (root / "tokens.csv").write_text("".join(
        f'{tokens[k]},{user},{user},"{groups}"\n' if groups else f"{tokens[k]},{user},{user}\n"
        for k, (user, groups) in _USERS.items()))
    ports = {n: free_port() for n in ("etcd", "etcd_peer", "api", "kcm", "scheduler", "kwok", "kueue_webhook",
                                      "kueue_health", "kueue_metrics", "kueue_visibility")}
    api_url = f"https://127.0.0.1:{ports['api']}"
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    cluster = KubeCluster(root, api_url, tls.ca_file, root / "kubeconfig", etcd_url, tokens=tokens)
    for k, (user, _) in _USERS.items():
        _write_kubeconfig(root / ("kubeconfig" if k == "admin" else f"kubeconfig-{k}"), api_url, tls.ca_file, user,
                          tokens[k])
    kube = {k: root / ("kubeconfig" if k == "admin" else f"kubeconfig-{k}") for k in _USERS}
    ready: dict[str, tuple[str, Path | None, str | None]] = {
        "etcd": (f"{etcd_url}/health", None, None),
        "kube-apiserver": (f"{api_url}/readyz", tls.ca_file, tokens["admin"]),
        "kube-controller-manager": (f"https://127.0.0.1:{ports['kcm']}/healthz", None, None),
        "kube-scheduler": (f"https://127.0.0.1:{ports['scheduler']}/healthz", None, None),
        "kueue": (f"http://127.0.0.1:{ports['kueue_health']}/readyz", None, None),
        "kwok": (f"http://127.0.0.1:{ports['kwok']}/healthz", None, None),
    }
    cluster.ready_urls = ready
    peer = f"http://127.0.0.1:{ports['etcd_peer']}"
    argv = {
        "etcd": [str(part("etcd") / "bin" / "etcd"), "--name=gangscope-test", f"--data-dir={root / 'etcd'}",
                 f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                 f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                 f"--initial-cluster=gangscope-test={peer}", "--unsafe-no-fsync", "--log-level=warn",
                 "--quota-backend-bytes=2147483648"],
        "kube-apiserver": [
            str(k8s_bin / "kube-apiserver"), f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={ports['api']}", f"--cert-dir={root / 'apiserver'}",
            f"--tls-cert-file={root / 'tls' / 'broker.crt'}", f"--tls-private-key-file={root / 'tls' / 'broker.key'}",
            f"--client-ca-file={tls.ca_file}", f"--token-auth-file={root / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
            f"--service-account-key-file={root / 'tls' / 'sa.pub'}",
            f"--service-account-signing-key-file={root / 'tls' / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16", "--endpoint-reconciler-type=none",
            f"--feature-gates={FEATURE_GATES}", f"--runtime-config={RUNTIME_CONFIG}",
            f"--default-not-ready-toleration-seconds={TOLERATION_S}",
            f"--default-unreachable-toleration-seconds={TOLERATION_S}", "--profiling=false", "--v=1"],
        "kube-controller-manager": [
            str(k8s_bin / "kube-controller-manager"), f"--kubeconfig={kube['kcm']}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['kcm']}", "--leader-elect=false",
            f"--cert-dir={root / 'kcm'}", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={root / 'tls' / 'sa.key'}", f"--root-ca-file={tls.ca_file}",
            f"--feature-gates={FEATURE_GATES}", "--node-monitor-period=2s",
            f"--node-monitor-grace-period={NODE_GRACE_S}s", "--profiling=false", "--v=1"],
        "kube-scheduler": [
            str(k8s_bin / "kube-scheduler"), f"--kubeconfig={kube['scheduler']}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['scheduler']}", "--leader-elect=false",
            f"--cert-dir={root / 'scheduler'}", f"--feature-gates={FEATURE_GATES}", "--profiling=false", "--v=1"],
    }
    t_all = time.monotonic()
    for name in ("etcd", "kube-apiserver"):
        t0 = time.monotonic()
        cluster.components[name] = _launch(name, argv[name], root)
        _wait_ready(cluster, name, timeout_s)
        cluster.started_s[name] = time.monotonic() - t0
    try:
        cluster.argv = argv
        t0 = time.monotonic()
        for name in ("kube-controller-manager", "kube-scheduler"):
            cluster.components[name] = _launch(name, argv[name], root)
        _install_kueue(cluster, ports, kube["kueue"], argv)
        t_kueue = time.monotonic()
        cluster.components["kueue"] = _launch("kueue", argv["kueue"], root)
        _mount_kueue_certs(cluster, timeout_s)
        argv["kwok"] = _kwok_argv(root, kube["kwok"], ports["kwok"])
        cluster.components["kwok"] = _launch("kwok", argv["kwok"], root)
        for name in ("kube-controller-manager", "kube-scheduler"):
            _wait_ready(cluster, name, timeout_s)
            cluster.started_s[name] = time.monotonic() - t0
        _wait_ready(cluster, "kwok", timeout_s)
        cluster.started_s["kwok"] = time.monotonic() - t_kueue
        _wait_ready(cluster, "kueue", timeout_s)
        _wait_kueue_webhooks(cluster, timeout_s)
        cluster.started_s["kueue"] = time.monotonic() - t_kueue
        if base_nodes:
            cluster.apply(gpu_nodes("gpu-node", base_nodes))
            wait_nodes_ready(cluster, [f"gpu-node-{i + 1:03d}" for i in range(base_nodes)], timeout_s)
        cluster.started_s["total"] = time.monotonic() - t_all
        return cluster
    except BaseException:
        cluster.stop()
        raise


# --- Kueue ------------------------------------------------------------------------------------------------------


def _install_kueue(cluster: KubeCluster, ports: dict[str, int], kubeconfig: Path, argv: dict[str, list[str]]) -> None:
    """Kueue's CRDs (with their conversion webhook, as its release manifests patch them), its namespace, the
    ExternalName Service its webhooks are reached through, the webhook configurations, and its config file."""
    kdir = part("kueue")
    crds = [yaml.safe_load(p.read_text()) for p in sorted((kdir / "crd").glob("*.yaml"))]
    converted = {"workloads", "clusterqueues", "localqueues", "cohorts", "multikueueclusters"}
    for crd in crds:
        if crd["spec"]["names"]["plural"] in converted:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {"namespace": KUEUE_NAMESPACE, "name": KUEUE_SERVICE, "path": "/convert",
                                             "port": ports["kueue_webhook"]}}}}
    cluster.apply(crds)
    cluster.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": KUEUE_SERVICE, "namespace": KUEUE_NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": "localhost"}},
        # The release ships it empty; Kueue's certificate rotator fills it (and the certDir from it).
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KUEUE_SECRET, "namespace": KUEUE_NAMESPACE}},
        _webhook_configurations(kdir / "webhook" / "manifests.yaml", ports["kueue_webhook"]),
    )
    for crd in crds:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s")
    root = cluster.directory
    (root / "kueue-certs").mkdir()
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['kueue_health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['kueue_metrics']}"},
        "webhook": {"port": ports["kueue_webhook"], "host": "127.0.0.1", "certDir": str(root / "kueue-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": KUEUE_SERVICE,
                                   "webhookSecretName": KUEUE_SECRET},
        "clientConnection": {"qps": 100, "burst": 200},
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": ports["kueue_visibility"]},
        "integrations": {"frameworks": ["batch/job"]},
    }
    (root / "kueue.yaml").write_text(yaml.safe_dump(config))
    argv["kueue"] = [str(kdir / "bin" / "kueue"), f"--config={root / 'kueue.yaml'}", f"--kubeconfig={kubeconfig}",
                     "--zap-log-level=info"]


def _mount_kueue_certs(cluster: KubeCluster, timeout_s: float) -> None:
    """What the kubelet does for Kueue's pod: its certificate rotator fills the Secret, and waits to find the
    certificate in its certDir (the Secret's volume in a cluster) before it injects the CA into the webhooks."""

    def filled() -> dict[str, str] | None:
        done = cluster.kubectl("get", "secret", KUEUE_SECRET, "-n", KUEUE_NAMESPACE, "-o", "json", check=False)
        data = json.loads(done.stdout).get("data") if done.returncode == 0 else None
        return data if data and "tls.crt" in data else None

    data = cluster.wait_for("Kueue's webhook certificate", filled, timeout_s, every_s=0.3)
    for key, value in data.items():
        (cluster.directory / "kueue-certs" / key).write_bytes(base64.b64decode(value))


def _webhook_configurations(manifests: Path, port: int) -> list[dict[str, Any]]:
    """Kueue's webhook configurations as its release names them, keeping the webhooks of the integrations run
    here (Kueue's own kinds and batch/v1 Jobs), each pointed at the ExternalName Service on Kueue's port."""
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc:
            continue
        kind = "mutating" if doc["kind"] == "MutatingWebhookConfiguration" else "validating"
        doc["metadata"]["name"] = f"kueue-{kind}-webhook-configuration"
        hooks = []
        for hook in doc["webhooks"]:
            groups = {g for r in hook.get("rules", []) for g in r["apiGroups"]}
            if not groups <= {"kueue.x-k8s.io", "batch"}:
                continue
            hook["clientConfig"]["service"].update(name=KUEUE_SERVICE, namespace=KUEUE_NAMESPACE, port=port)
            if groups == {"batch"}:  # as the release's kustomization: not in the system namespaces
                hook["namespaceSelector"] = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                                   "operator": "NotIn",
                                                                   "values": ["kube-system", KUEUE_NAMESPACE]}]}
            hooks.append(hook)
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def _wait_kueue_webhooks(cluster: KubeCluster, timeout_s: float) -> None:
    """Ready once the API server reaches Kueue's webhook: a server-side dry run of a ResourceFlavor passes."""
    probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "webhook-probe"}}

    def ok() -> bool:
        done = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False)
        return done.returncode == 0

    cluster.wait_for("Kueue's webhooks", ok, timeout_s, every_s=1.0)


# --- kwok and nodes ---------------------------------------------------------------------------------------------


def _kwok_argv(root: Path, kubeconfig: Path, port: int) -> list[str]:
    stage = part("kwok") / "stage"
    stages = [stage / "node" / "fast" / "node-initialize.yaml",
              stage / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml",
              *sorted((stage / "pod" / "general").glob("pod-*.yaml")),
              stage / "pod" / "chaos" / "pod-container-running-failed.yaml"]
    docs: list[dict[str, Any]] = [{
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
        "options": {"manageAllNodes": False, "manageNodesWithLabelSelector": f"{MANAGED_LABEL}=managed",
                    "nodeLeaseDurationSeconds": LEASE_S, "serverAddress": f"127.0.0.1:{port}",
                    "nodeLeaseParallelism": 4, "podPlayStageParallelism": 4, "nodePlayStageParallelism": 4,
                    "podsOnNodeSyncParallelism": 2,
                    # Pod IPs kwok writes into status (no traffic): without them its pod-create stage matches again
                    # and again, and every pod's Ready flaps.
                    "cidr": "10.244.0.1/16", "nodeIP": "10.244.0.1",
                    "enableCRDs": []}}]
    docs += [yaml.safe_load(p.read_text()) for p in stages]
    (root / "kwok.yaml").write_text(yaml.safe_dump_all(docs))
    return [str(part("kwok") / "bin" / "kwok"), f"--kubeconfig={kubeconfig}", f"--config={root / 'kwok.yaml'}"]


def gpu_nodes(prefix: str, count: int, *, per_rack: int = 4, racks_per_block: int = 2, gpus: int = GPUS_PER_NODE,
              labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """kwok GPU nodes labelled like the simulator's (collectors/simulate/cluster.py): ``<prefix>-001`` ... in racks
    ``<prefix>-rack-N`` of ``per_rack`` nodes, in blocks ``<prefix>-block-N``; the node group ``tas-group``."""
    out = []
    for i in range(count):
        rack, name = i // per_rack, f"{prefix}-{i + 1:03d}"
        block = rack // racks_per_block
        cap = {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": str(gpus), "ephemeral-storage": "3Ti"}
        out.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"node.alpha.kubernetes.io/ttl": "0"}, "labels": {
                HOST_LABEL: name, RACK_LABEL: f"{prefix}-rack-{rack + 1}", BLOCK_LABEL: f"{prefix}-block-{block + 1}",
                NODE_GROUP_LABEL: "tas-group", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "type": "kwok", MANAGED_LABEL: "managed", **(labels or {})}},
            "spec": {},
            "status": {"capacity": cap, "allocatable": cap},
        })
    return out


def wait_nodes_ready(cluster: KubeCluster, names: list[str], timeout_s: float = 120.0) -> None:
    def ready() -> bool:
        items = cluster.get("nodes")["items"]
        ok = {n["metadata"]["name"] for n in items
              if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])}
        return set(names) <= ok

    cluster.wait_for(f"nodes {names[0]}..{names[-1]} Ready", ready, timeout_s)


def kill_kubelet(cluster: KubeCluster, node: str) -> None:
    """The node's kubelet dies: kwok stops playing it (no more lease renewals, status or pod updates)."""
    cluster.kubectl("label", "node", node, f"{MANAGED_LABEL}-")

