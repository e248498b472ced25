"""What ``gangscope run`` watches when nobody said, and the one summary it prints at the start.

With ``collectors`` unset, ``run`` does what kubectl and the Prometheus operator do: it takes the current
kubeconfig context (or the in-cluster service account) and, when there is one, watches the cluster (``k8s``)
and scrapes the exporters it finds there (``metrics``); ``collectors: []`` runs none. The metrics collector
with neither targets nor discovery configured discovers every preset (explicitly named or not).
The summary names the cluster and context, the API version watched per kind, the exporters found per
family, and where the lake and Kafka are. A cluster that cannot be reached is said once, with the fix, and
``run`` goes on with what it can (the pipeline, static targets) while the collectors wait for the server.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from gangscope.config import Settings

log = logging.getLogger("gangscope.run")


@dataclass
class Startup:
    settings: Settings  # with collectors (and, by default, metrics discovery) resolved
    defaulted: bool  # collectors were chosen here, not by the user
    source: Any = None  # collectors.k8s.client.Source, or None without credentials
    reachable: bool = False
    server_version: str | None = None
    problems: list[str] = field(default_factory=list)  # what cannot be seen, each with its fix (said once)
    watched: list[tuple[str, str]] = field(default_factory=list)  # (kind, api version)
    not_served: list[str] = field(default_factory=list)
    exporters: dict[str, int] = field(default_factory=dict)  # discovery job -> targets found now
    static_targets: int = 0
    via: str | None = None


def resolve(settings: Settings) -> Startup:
    """``settings`` with ``collectors`` chosen when unset: k8s and metrics when credentials are there."""
    from collectors.k8s.client import find_credentials

    source = find_credentials(settings.k8s.kubeconfig, settings.k8s.context)
    defaulted = settings.collectors is None
    if not defaulted:
        collectors = list(settings.collectors or [])
    else:
        collectors = ["k8s", "metrics"] if source else (["metrics"] if settings.metrics.targets else [])
    metrics = settings.metrics
    if "metrics" in collectors and source and not metrics.targets and not metrics.discovery:
        metrics = dataclasses.replace(metrics, discovery=default_discovery(source.kind == "in-cluster"))
    settings = dataclasses.replace(settings, collectors=collectors, metrics=metrics)
    if not defaulted:
        return Startup(settings, False, source)
    problems = [] if source else [
        "no Kubernetes credentials: no kubeconfig with a current context ($KUBECONFIG, ~/.kube/config) and not in a "
        "pod with a service account, so no cluster is watched. Fix: point $KUBECONFIG or k8s.kubeconfig (and "
        "k8s.context) at one, or set `collectors` to choose what runs (docs/configuration.md)"]
    return Startup(settings, True, source, problems=problems)


def default_discovery(in_cluster: bool) -> list[dict[str, Any]]:
    """Every discovery preset. In a pod, the HTTPS ones (Kueue's and kube-scheduler's /metrics) are scraped with the
    service account's token and without verifying their self-signed certificates, as kube-prometheus-stack does;
    they authorize it by a SubjectAccessReview (bind their metrics-reader role, e.g. Kueue's kueue-metrics-reader)."""
    from collectors.k8s.client import SA_TOKEN
    from collectors.metrics.targets import DEFAULT_JOBS, PRESETS

    return [{"job": j, **({"bearer_token_file": SA_TOKEN, "insecure_skip_verify": True}
                          if in_cluster and PRESETS.get(j, {}).get("scheme") == "https" else {})}
            for j in DEFAULT_JOBS]


def probe(start: Startup) -> Startup:
    """Ask the cluster what the summary shows: reachable, its version, the kinds served, the exporters found."""
    s = start.settings
    collectors = s.collectors or []
    start.static_targets = len(s.metrics.targets)
    if not start.source or not ({"k8s", "metrics"} & set(collectors)):
        return start
    from collectors.k8s.client import ApiError, Client
    from collectors.k8s.discovery import resolve as resolve_kinds
    from collectors.k8s.discovery import selected_slots, served_resources
    from gangscope.errors import UserError

    try:
        client = Client.from_config(s.k8s.kubeconfig, s.k8s.context)
    except UserError as e:
        start.problems.append(f"cannot use the Kubernetes credentials: {e}")
        return start
    try:
        start.server_version = str(client.get_json("/version", timeout_s=10.0).get("gitVersion") or "?")
        start.reachable = True
        if "k8s" in collectors:
            chosen = resolve_kinds(selected_slots(s.k8s.kinds), served_resources(client))
            start.watched = [(r.kind, r.api_version) for r in chosen.values() if r is not None]
            start.not_served = [name for name, r in chosen.items() if r is None]
    except (ApiError, UserError) as e:
        context = f" --context {start.source.context}" if start.source.context else ""
        then = "the collectors keep trying" if start.defaulted else "the k8s collector stops the service"
        start.problems.append(f"cannot reach the Kubernetes API server at {start.source.server or client.host} ({e}); "
                              f"{then}. Fix: check `kubectl{context} get --raw /version`, the network or VPN, and "
                              "the kubeconfig's server and credentials")
        return start
    finally:
        client.close()
    if "metrics" in collectors:
        _exporters(start)
    return start


def _exporters(start: Startup) -> None:
    from collectors.metrics.scrape import target_source
    from collectors.metrics.targets import discovery_rules
    from gangscope.errors import UserError

    s = start.settings
    try:
        rules = discovery_rules(s, in_cluster=start.source.kind == "in-cluster")
        targets = target_source(s)() if rules or s.metrics.targets else []
    except UserError as e:
        start.problems.append(f"metrics: {e}")
        return
    start.via = rules[0].via if rules else None
    for r in rules:
        start.exporters.setdefault(r.job, 0)
    for t in targets[start.static_targets:]:
        start.exporters[t.job] = start.exporters.get(t.job, 0) + 1
    if start.defaulted and start.exporters.get("dcgm") == 0:
        start.problems.append("no dcgm-exporter pods found (label app=nvidia-dcgm-exporter): GPU faults, throttled "
                              "GPUs and NVLink cannot be seen. Fix: install the GPU Operator's dcgm-exporter, or name "
                              "its pods in metrics.discovery (job: dcgm, label_selector, port)")


def summary(start: Startup, bootstrap: str, embedded: bool) -> str:
    """The startup summary: one log record, a line per subject."""
    s = start.settings
    lines = ["gangscope run: starting"]
    if start.source is not None:
        lines.append(f"  cluster: {start.source.describe()}, server {start.source.server or '?'}"
                     + (f" ({start.server_version})" if start.server_version else "") + f"; stamped as {s.cluster!r}")
    collectors = ", ".join(s.collectors or []) or "none"
    how = " (default: a cluster was found; set `collectors` to choose)" if start.defaulted and s.collectors else \
        " (default: no cluster found)" if start.defaulted else ""
    lines.append(f"  collectors: {collectors}{how}")
    if start.watched:
        lines.append("  watching: " + ", ".join(f"{kind} {api}" for kind, api in start.watched))
        if start.not_served:
            lines.append("  not served (picked up if they appear): " + ", ".join(start.not_served))
    if start.exporters or start.static_targets:
        via = {"apiserver": " through the API server's pod proxy", "pod_ip": " at their pod IPs"}.get(
            start.via or "", "")
        found = ", ".join(f"{job} {n}" for job, n in start.exporters.items())
        lines.append(f"  exporters{via}: {found or '-'}" + (f"; static targets: {start.static_targets}"
                                                              if start.static_targets else ""))
    lake = s.lake_data_path or str(s.lake_path)
    lines.append(f"  lake: {lake} (catalog {_catalog(s.catalog_url)})")
    lines.append(f"  Kafka: {bootstrap}" + (" (embedded, in memory: set --bootstrap-servers for a real cluster)"
                                            if embedded else ""))
    if s.server.listen:
        host, _, port = s.server.listen.rpartition(":")
        lines.append(f"  telemetry: http://{s.server.listen}/metrics" if port != "0" else
                     f"  telemetry: a free port on {host} (said once it serves)")
    return "\n".join(lines)


def _catalog(url: str) -> str:
    from gangscope.secrets import redact_url

    return redact_url(url) if "://" in url else url
