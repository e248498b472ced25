"""Scrape targets: static ones from ``metrics.targets``, and exporter pods found through the API server.

Discovery behaves like a Prometheus ``kubernetes_sd`` pod role with the usual relabelling:
each Running pod with an IP becomes ``<scheme>://<podIP>:<port><path>`` (``via: pod_ip``), or, from
outside the cluster where pod IPs cannot be reached, the API server's proxy of that pod
(``via: apiserver``: ``<server>/api/v1/namespaces/<ns>/pods/[https:]<pod>:<port>/proxy<path>``, with the
kubeconfig's credentials; the ``instance`` stays ``<podIP>:<port>``); ``auto`` (the default,
``metrics.discovery_via``) is the first in a pod and the second elsewhere. Its samples get a
``node`` label (``spec.nodeName``), and for ``pod_labels`` jobs (by default ``training``
and ``ray``: the job's own endpoints) also ``pod`` and ``namespace``, unless the exporter
already wrote those labels itself (``honor_labels: true``). That is how a training job's
throughput samples find their pod and so their job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from gangscope.config import Settings
from gangscope.errors import UserError
from gangscope.secrets import redact_url

log = logging.getLogger(__name__)

DEFAULT_JOBS = ("dcgm", "node", "kueue", "scheduler", "ray", "training")

# Discovery presets per default job: what the usual charts label their pods with.
# A discovery entry names a job and overrides any of these keys.
PRESETS: dict[str, dict[str, Any]] = {
    "dcgm": {"label_selector": "app=nvidia-dcgm-exporter", "port": 9400},  # GPU Operator's DaemonSet
    "node": {"label_selector": "app.kubernetes.io/name=prometheus-node-exporter", "port": 9100},
    "kueue": {"namespace": "kueue-system", "label_selector": "control-plane=controller-manager", "port": 8443,
              "scheme": "https"},
    "scheduler": {"namespace": "kube-system", "label_selector": "component=kube-scheduler", "port": 10259,
                  "scheme": "https"},
    "ray": {"label_selector": "ray.io/node-type=head", "port": 8080},
    # Pods that opt in with the prometheus.io/scrape annotation; port/path from prometheus.io/port|path.
    "training": {"label_selector": "", "annotation_scrape": True},
}

_TLS_KEYS = ("ca_file", "cert_file", "key_file", "insecure_skip_verify")
_STATIC_KEYS = {"url", "job", "interval_s", "timeout_s", "bearer_token_file", "labels", "honor_labels", *_TLS_KEYS}
_DISCOVERY_KEYS = {"job", "namespace", "label_selector", "port", "path", "scheme", "interval_s", "timeout_s",
                   "bearer_token_file", "pod_labels", "annotation_scrape", "via", *_TLS_KEYS}
VIAS = ("auto", "pod_ip", "apiserver")


@dataclass(frozen=True, slots=True)
class Target:
    """One endpoint to scrape. ``labels`` are added to samples that lack them."""

    url: str
    job: str
    interval_s: float
    timeout_s: float
    bearer_token_file: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # Samples that carry their own job/instance keep them as their target (a /federate endpoint serves many).
    honor_labels: bool = False
    # Prometheus' __address__ when the URL is not the endpoint's own (the API server's pod proxy): podIP:port.
    address: str | None = None
    # The Authorization header of each scrape, asked anew each time (the kubeconfig's renewed token). Never logged.
    authorization: Callable[[], str | None] | None = field(default=None, hash=False, compare=False, repr=False)

    @property
    def name(self) -> str:
        """The URL as shown and stored (``raw.scrapes.target``, logs): without a password or token."""
        return redact_url(self.url)

    @property
    def instance(self) -> str:
        """``host:port`` of the URL (of the pod behind a proxy URL), as Prometheus sets ``instance``."""
        if self.address:
            return self.address
        parts = urlsplit(self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or ""
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _num(entry: dict[str, Any], key: str, default: float, where: str) -> float:
    v = entry.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise UserError(f"{where}.{key}: expected a number of seconds, got {v!r}")
    try:
        f = float(v)
    except ValueError:
        raise UserError(f"{where}.{key}: expected a number of seconds, got {v!r}") from None
    if f <= 0:
        raise UserError(f"{where}.{key}: must be positive, got {v!r}")
    return f


def _common(entry: dict[str, Any], settings: Settings, where: str) -> dict[str, Any]:
    interval = _num(entry, "interval_s", settings.metrics.default_interval_s, where)
    timeout = _num(entry, "timeout_s", min(settings.metrics.default_timeout_s, interval), where)
    if timeout > interval:
        raise UserError(f"{where}: timeout_s ({timeout:g}) must not exceed interval_s ({interval:g}), "
                        "or scrapes of a slow target would pile up")
    out: dict[str, Any] = {"interval_s": interval, "timeout_s": timeout}
    for k in ("bearer_token_file", "ca_file", "cert_file", "key_file"):
        v = entry.get(k)
        if v is not None and not isinstance(v, str):
            raise UserError(f"{where}.{k}: expected a file path, got {v!r}")
        out[k] = v or None
    if bool(out["cert_file"]) != bool(out["key_file"]):
        raise UserError(f"{where}: cert_file and key_file go together")
    skip = entry.get("insecure_skip_verify", False)
    if not isinstance(skip, bool):
        raise UserError(f"{where}.insecure_skip_verify: expected true or false, got {skip!r}")
    out["insecure_skip_verify"] = skip
    return out


def _job(entry: dict[str, Any], where: str) -> str:
    job = entry.get("job")
    if not isinstance(job, str) or not job:
        raise UserError(f"{where}.job: required, a name such as {', '.join(DEFAULT_JOBS)}")
    return job


def _check_keys(entry: Any, where: str, known: set[str], needs: str) -> None:
    """A config entry is a mapping of known keys; the error names the entry and the key."""
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a mapping with {needs}")
    unknown = sorted(set(entry) - known)
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")


def static_targets(settings: Settings) -> list[Target]:
    """``metrics.targets``, validated; every problem names the entry and the key."""
    out: list[Target] = []
    seen: set[str] = set()
    for i, entry in enumerate(settings.metrics.targets):
        where = f"metrics.targets[{i}]"
        _check_keys(entry, where, _STATIC_KEYS, "url and job")
        url = entry.get("url")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(f"{where}.url: expected http(s)://host[:port]/path, got {url!r}")
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError:
            raise UserError(f"{where}.url: bad port in {url!r}") from None
        if parts.password is not None and entry.get("bearer_token_file"):
            raise UserError(f"{where}: {redact_url(url)} carries user:password (basic auth) and bearer_token_file "
                            "is set too; a scrape sends one Authorization header, so choose one")
        if url in seen:
            raise UserError(f"{where}.url: {redact_url(url)} is listed twice")
        seen.add(url)
        labels = entry.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise UserError(f"{where}.labels: expected a mapping of label name to string")
        honor = entry.get("honor_labels", urlsplit(url).path.rstrip("/").endswith("/federate"))
        if not isinstance(honor, bool):
            raise UserError(f"{where}.honor_labels: expected true or false, got {honor!r}")
        out.append(Target(url=url, job=_job(entry, where), labels=dict(labels), honor_labels=honor,
                          **_common(entry, settings, where)))
    return out


@dataclass(frozen=True, slots=True)
class DiscoveryRule:
    job: str
    namespace: str | None
    label_selector: str
    port: int | None
    path: str
    scheme: str
    pod_labels: bool
    annotation_scrape: bool
    common: dict[str, Any]
    via: str = "pod_ip"  # pod_ip or apiserver (auto resolved by discovery_rules)


def discovery_rules(settings: Settings, in_cluster: bool = False) -> list[DiscoveryRule]:
    """``metrics.discovery`` merged over the job presets, validated; ``via: auto`` resolved for where we run."""
    out: list[DiscoveryRule] = []
    for i, raw in enumerate(settings.metrics.discovery):
        where = f"metrics.discovery[{i}]"
        _check_keys(raw, where, _DISCOVERY_KEYS, "at least job")
        job = _job(raw, where)
        entry = {**PRESETS.get(job, {}), **raw}
        port = entry.get("port")
        annotation = bool(entry.get("annotation_scrape", False))
        if port is None and not annotation:
            raise UserError(f"{where}.port: required for job {job!r} (no preset)")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            raise UserError(f"{where}.port: expected a port number, got {port!r}")
        scheme = entry.get("scheme", "http")
        if scheme not in ("http", "https"):
            raise UserError(f"{where}.scheme: expected http or https, got {scheme!r}")
        path = entry.get("path", "/metrics")
        if not isinstance(path, str) or not path.startswith("/"):
            raise UserError(f"{where}.path: expected a path starting with /, got {path!r}")
        selector = entry.get("label_selector", "")
        if not isinstance(selector, str):
            raise UserError(f"{where}.label_selector: expected a string such as app=dcgm-exporter")
        via = entry.get("via", settings.metrics.discovery_via)
        if via not in VIAS:
            raise UserError(f"{where}.via: expected {', '.join(VIAS)}, got {via!r}")
        out.append(DiscoveryRule(
            job=job, namespace=entry.get("namespace") or None, label_selector=selector, port=port, path=path,
            scheme=scheme, pod_labels=bool(entry.get("pod_labels", job in ("training", "ray"))),
            annotation_scrape=annotation, common=_common(entry, settings, where),
            via=("pod_ip" if in_cluster else "apiserver") if via == "auto" else via,
        ))
    return out


class PodLister(Protocol):
    def get_json(self, path: str, params: dict[str, Any] | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        ...


class ApiServerProxy(Protocol):
    """What a pod-proxy target needs of the API client: its URL, credentials and TLS settings."""

    host: str
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    verify: bool

    def authorization(self) -> str | None:
        ...


def pod_targets(rule: DiscoveryRule, pods: Iterable[dict[str, Any]],
                proxy: ApiServerProxy | None = None) -> list[Target]:
    """Targets for the Running pods of one rule (pure: tests feed it real-shaped PodLists); with ``proxy`` and
    ``rule.via == "apiserver"``, through the API server's pod proxy."""
    out: list[Target] = []
    for pod in pods:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        ip = status.get("podIP")
        if status.get("phase") != "Running" or not ip or meta.get("deletionTimestamp"):
            continue
        ann = meta.get("annotations") or {}
        port, path = rule.port, rule.path
        if rule.annotation_scrape:
            if ann.get("prometheus.io/scrape") != "true":
                continue
            try:
                port = int(ann.get("prometheus.io/port") or port or 0) or None
            except ValueError:
                log.warning("pod %s/%s: bad prometheus.io/port %r, skipped", meta.get("namespace"), meta.get("name"),
                            ann.get("prometheus.io/port"))
                continue
            path = ann.get("prometheus.io/path") or path
            if port is None:
                continue
        host = f"[{ip}]" if ":" in ip else ip
        labels: dict[str, str] = {}
        if spec.get("nodeName"):
            labels["node"] = spec["nodeName"]
        if rule.pod_labels:
            labels["pod"] = meta.get("name", "")
            labels["namespace"] = meta.get("namespace", "")
        if rule.via == "apiserver" and proxy is not None:
            pod = f"{'https:' if rule.scheme == 'https' else ''}{meta.get('name')}:{port}"
            common = {**rule.common, "bearer_token_file": None, "ca_file": proxy.ca_file,
                      "cert_file": proxy.cert_file, "key_file": proxy.key_file,
                      "insecure_skip_verify": not proxy.verify}
            out.append(Target(url=f"{proxy.host}/api/v1/namespaces/{meta.get('namespace')}/pods/{pod}/proxy{path}",
                              job=rule.job, labels=labels, address=f"{host}:{port}",
                              authorization=proxy.authorization, **common))
            continue
        out.append(Target(url=f"{rule.scheme}://{host}:{port}{path}", job=rule.job, labels=labels, **rule.common))
    return out


def discover(rules: list[DiscoveryRule], client: PodLister, failing: set[str] | None = None) -> list[Target]:
    """List the pods of every rule from the API server and turn them into targets.

    A rule whose listing fails keeps no targets this time and logs one line (once while it keeps failing, when
    ``failing`` carries the state between calls); the others go on.
    """
    out: list[Target] = []
    proxy = client if all(hasattr(client, a) for a in ("host", "ca_file", "authorization")) else None
    failed: dict[str, str] = {}
    for rule in rules:
        path = f"/api/v1/namespaces/{rule.namespace}/pods" if rule.namespace else "/api/v1/pods"
        params = {"labelSelector": rule.label_selector} if rule.label_selector else {}
        try:
            doc = client.get_json(path, params, timeout_s=30.0)
        except Exception as e:  # one rule's failure must not stop the others
            failed[rule.job] = f"{path} {rule.label_selector}: {e}"
            continue
        if failing is not None and rule.job in failing:
            failing.discard(rule.job)
            log.info("discovery of job %s works again", rule.job)
        out.extend(pod_targets(rule, doc.get("items") or [], proxy))  # type: ignore[arg-type]
    new = [job for job in failed if failing is None or job not in failing]
    if new:  # one line for the round (an unreachable server fails every rule alike)
        log.warning("discovery of job%s %s failed: %s", "s" if len(new) > 1 else "", ", ".join(new),
                    failed[new[0]] if len(new) == 1 or len({v.split(": ", 1)[-1] for v in failed.values()}) == 1
                    else "; ".join(failed[j] for j in new))
    if failing is not None:
        failing.update(failed)
    return out
