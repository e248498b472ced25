"""``gangscope check``: the preflight a person runs before trusting gangscope on a cluster.

Each line is pass, warn or fail, with the fix; the exit code is 1 when any line fails (0 with warnings only).
It asks the API server what ``run`` will need (reachable, who we are, the kinds and versions served, list and
watch allowed on every kind watched, the clock), reads Kueue's version and whether its granular admission
reasons are on, compares the nodes' topology labels with the Kueue Topology levels, then scrapes every
exporter it discovers once and says which signals they give and which root causes cannot be seen without
the missing ones. Nothing is published and the lake is not touched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from gangscope.config import Settings

STATUSES = ("pass", "warn", "fail")


@dataclass
class Line:
    status: str  # pass, warn, fail
    check: str  # what was checked (api, identity, clock, kinds, rbac, kueue, topology, exporters, ...)
    message: str
    fix: str | None = None


class Report:
    def __init__(self) -> None:
        self.lines: list[Line] = []

    def add(self, status: str, check: str, message: str, fix: str | None = None) -> None:
        assert status in STATUSES
        self.lines.append(Line(status, check, message, fix))

    @property
    def failed(self) -> bool:
        return any(line.status == "fail" for line in self.lines)

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for line in self.lines if line.status == s) for s in STATUSES}

    def to_json(self) -> str:
        return json.dumps({"status": "fail" if self.failed else "pass", "counts": self.counts(),
                           "checks": [asdict(line) for line in self.lines]}, indent=2)

    def to_text(self) -> str:
        from reports.terminal import terminal_safe

        width = max((len(line.check) for line in self.lines), default=5)
        out = []
        for line in self.lines:
            out.append(f"{line.status.upper():<4}  {line.check:<{width}}  {line.message}")
            if line.fix:
                out.append(f"{'':<4}  {'':<{width}}  fix: {line.fix}")
        c = self.counts()
        out.append(f"{c['pass']} pass, {c['warn']} warn, {c['fail']} fail")
        return "\n".join(terminal_safe(x) for x in out)


# --- Kueue ---------------------------------------------------------------------------------------------------
# QuotaReserved=False reasons with UnadmittedWorkloadsObservability on (granular) and off (kueue-0.19 notes;
# the same sets sql/intermediate/int_admission.sql reads the gate from).
GRANULAR = {"WaitingForQuota", "ExceedsMaxQuota", "NoMatchingFlavor", "TopologyPlacementFailed",
            "WaitingForPreemptedWorkloads", "WaitingForPodsReady", "PendingEvaluation", "Misconfigured", "Suspended",
            "UnsatisfiedAdmissionChecks"}
COARSE = {"Pending", "Inadmissible", "Waiting", "UnsatisfiedChecks", "NoReservationUnsatisfiedChecks"}
GATE_FIX = ("start Kueue with --feature-gates=UnadmittedWorkloadsObservability=true (Beta, off by default in v0.19) "
            "for exact reasons; meanwhile gangscope tells the causes apart by Kueue's messages")

# --- exporters: what each family must give, and what cannot be seen without it ------------------------------
# (family, needed: signals of pipeline/signals.py or metric names, status when missing, what is lost, fix)
NEEDS: list[tuple[str, tuple[str, ...], str, str, str]] = [
    ("dcgm", ("DCGM_FI_DEV_SM_CLOCK",), "fail", "throttled GPUs cannot be seen (gpu_throttle)",
     "DCGM_FI_DEV_SM_CLOCK is in dcgm-exporter's default-counters.csv: put it back in the counters file it runs "
     "with (-f / the dcgm-exporter ConfigMap)"),
    ("dcgm", ("signal:nvlink_bw", "signal:nvlink_errors"), "warn",
     "NVLink interconnect degradation cannot be seen (interconnect_degradation on NVLink)",
     "add DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL and the NVLink error counters to dcgm-exporter's counters file "
     "(GPUs without NVLink, such as PCIe cards, have none)"),
    ("dcgm", ("signal:gpu_util",), "warn", "GPU utilisation cannot be seen (idle GPUs of a partial gang)",
     "add DCGM_FI_DEV_GPU_UTIL to dcgm-exporter's counters file"),
    ("node", ("signal:ib_bw", "signal:ib_errors", "signal:ib_port_state"), "warn",
     "InfiniBand degradation cannot be seen (interconnect_degradation on InfiniBand)",
     "node_exporter's infiniband collector (on by default) needs /sys/class/infiniband: mount the host's /sys, or "
     "ignore this on nodes without InfiniBand"),
    ("kueue", ("signal:kueue_pending",), "warn", "queue depth over time cannot be seen",
     "scrape Kueue's controller metrics (kueue_pending_workloads)"),
]
# Static targets name their job as their authors like: the usual names of the same exporters.
FAMILY_OF = {"dcgm-exporter": "dcgm", "nvidia-dcgm-exporter": "dcgm", "node-exporter": "node", "node_exporter": "node",
             "kube-scheduler": "scheduler"}
FAMILY_NAMES = {"dcgm": "dcgm-exporter", "node": "node_exporter", "kueue": "Kueue controller",
                "scheduler": "kube-scheduler", "ray": "Ray", "training": "training jobs"}


def _matcher(settings: Settings) -> Callable[[str], set[str]]:
    """metric name -> the signals it carries (pipeline/signals.py, configured entries included)."""
    from pipeline.signals import signal_map

    entries = signal_map(settings)

    def signals(name: str) -> set[str]:
        out = set()
        for e in entries:
            m = e["metric"]
            if (e["match"] == "exact" and name == m) or (e["match"] == "regex" and re.fullmatch(m, name)) \
                    or (e["match"] == "suffix" and name.endswith(m)):
                out.add(e["signal"])
        return out

    return signals


def _has(needed: tuple[str, ...], names: set[str], signals: set[str]) -> bool:
    return any(n.removeprefix("signal:") in signals if n.startswith("signal:") else n in names for n in needed)


# --- the checks ----------------------------------------------------------------------------------------------

def run_checks(settings: Settings) -> Report:
    from collectors.k8s.client import ApiError, Client, find_credentials
    from gangscope.errors import UserError

    report = Report()
    source = find_credentials(settings.k8s.kubeconfig, settings.k8s.context)
    if source is None:
        report.add("fail", "credentials", "no Kubernetes credentials: no kubeconfig with a current context "
                   "($KUBECONFIG, ~/.kube/config) and not in a pod with a service account",
                   "point $KUBECONFIG or k8s.kubeconfig (and k8s.context) at a cluster's kubeconfig")
        return report
    report.add("pass", "credentials", source.describe())
    try:
        client = Client.from_config(settings.k8s.kubeconfig, settings.k8s.context)
    except UserError as e:
        report.add("fail", "credentials", str(e), "fix the kubeconfig (kubectl config view --minify)")
        return report
    try:
        try:
            version, date = client.get_with_date("/version")
        except ApiError as e:
            context = f" --context {source.context}" if source.context else ""
            report.add("fail", "api", f"cannot reach the API server at {client.host}: {e}",
                       f"check `kubectl{context} get --raw /version`, the network or VPN, and the kubeconfig's "
                       "server and credentials")
            return report
        report.add("pass", "api", f"{client.host} answers ({version.get('gitVersion', '?')})")
        _clock(report, settings, date)
        _identity(report, client)
        resolved = _kinds(report, client, settings)
        _rbac(report, client, settings, resolved)
        gate_unknown = _kueue(report, client, resolved)
        _topology(report, client, resolved)
        _exporters(report, client, settings, source.kind == "in-cluster", gate_unknown)
    finally:
        client.close()
    return report


def _clock(report: Report, settings: Settings, date: str | None) -> None:
    from gangscope import clock

    if not date:
        report.add("warn", "clock", "the API server sent no Date header: clock skew not measured")
        return
    server = parsedate_to_datetime(date)
    skew = (server - clock.now()).total_seconds()  # gangscope's clock: the sandbox's when configured so
    text = f"API server clock {'ahead of' if skew >= 0 else 'behind'} this host's by {abs(skew):.0f} s (Date header)"
    fix = ("synchronise the clocks (NTP / chrony); past clock_skew_s records are refused as from the future, and "
           "waits and ages are off by the skew")
    if abs(skew) <= 5:
        report.add("pass", "clock", text)
    elif abs(skew) <= settings.clock_skew_s:
        report.add("warn", "clock", text, fix)
    else:
        report.add("fail", "clock", f"{text}, more than clock_skew_s ({settings.clock_skew_s:g} s)", fix)


def _identity(report: Report, client: Any) -> None:
    from collectors.k8s.client import ApiError

    try:
        doc = client.post_json("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                               {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    except ApiError as e:
        report.add("warn", "identity", f"cannot tell who we are (SelfSubjectReview, Kubernetes 1.28+): {e}")
        return
    user = (doc.get("status") or {}).get("userInfo") or {}
    groups = ", ".join(g for g in user.get("groups") or [] if g != "system:authenticated")
    report.add("pass", "identity", f"as {user.get('username', '?')}" + (f" (groups {groups})" if groups else ""))


def _kinds(report: Report, client: Any, settings: Settings) -> dict[str, Any]:
    """The kinds served and which version gangscope watches; lines per API family."""
    from collectors.k8s.discovery import SLOTS, resolve, selected_slots, served_resources

    served = served_resources(client)
    resolved = resolve(selected_slots(settings.k8s.kinds), served)
    by_group: dict[str, list[str]] = {}
    for (group, version), resources in served.items():
        if resources:
            by_group.setdefault(group, []).append(version)
    groups = client.get_json("/apis").get("groups", [])
    all_versions = {g["name"]: [v["version"] for v in g.get("versions", [])] for g in groups}

    def watched(name: str) -> str | None:
        r = resolved.get(name)
        return r.api_version if r else None

    core = [n for n in ("pods", "nodes", "events") if watched(n)]
    if len(core) == 3:
        report.add("pass", "kinds", "core: Pods, Nodes, Events v1")
    else:
        lacking = ", ".join(n for n in ("pods", "nodes", "events") if n not in core)
        report.add("fail", "kinds", f"core kinds not served with list and watch: {lacking}")
    jobs = ["batch/v1 Jobs" if "batch" in all_versions else None,
            f"JobSet jobset.x-k8s.io/{all_versions['jobset.x-k8s.io'][0]}" if "jobset.x-k8s.io" in all_versions
            else None]
    report.add("pass", "kinds", "jobs: " + ", ".join(j for j in jobs if j) if any(jobs) else "jobs: none served")
    kueue = all_versions.get("kueue.x-k8s.io")
    wl = watched("workloads.kueue.x-k8s.io")
    if kueue and wl:
        report.add("pass", "kinds", f"Kueue kueue.x-k8s.io {', '.join(kueue)} served; watching {wl}")
    else:
        report.add("warn", "kinds", "Kueue not served: no queue or admission findings (admission_quota, "
                   "admission_topology, preemption by Kueue)", "nothing to do if the cluster does not run Kueue")
    gangs = []
    for name, label in (("podgroups.scheduling.x-k8s.io", "scheduler-plugins PodGroup"),
                        ("podgroups.scheduling.volcano.sh", "Volcano PodGroup")):
        if watched(name):
            gangs.append(f"{label} {watched(name)}")
    native = all_versions.get("scheduling.k8s.io", [])
    native_kinds = [s.kind for s in SLOTS if s.name.endswith(".scheduling.k8s.io") and watched(s.name)]
    if native_kinds:
        at = watched("workloads.scheduling.k8s.io") or watched("podgroups.scheduling.k8s.io")
        gangs.append(f"native scheduling.k8s.io {', '.join(v for v in native if v != 'v1')} "
                     f"({', '.join(native_kinds)} at {at})")
    if gangs:
        report.add("pass", "kinds", "gangs: " + "; ".join(gangs))
    else:
        report.add("warn", "kinds", "no gang API served (coscheduling, Volcano or scheduling.k8s.io Workload / "
                   "PodGroup): gangs are judged from their pods alone")
    return resolved


def _rbac(report: Report, client: Any, settings: Settings, resolved: dict[str, Any]) -> None:
    from collectors.k8s.client import ApiError

    namespaces: list[str | None] = list(settings.k8s.namespaces) or [None]
    missing: list[str] = []
    checked = 0
    for res in (r for r in resolved.values() if r is not None):
        for ns in namespaces if res.namespaced else [None]:
            for verb in ("list", "watch"):
                attrs = {"verb": verb, "group": res.group, "resource": res.plural}
                if ns:
                    attrs["namespace"] = ns
                try:
                    doc = client.post_json("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                           {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                                            "spec": {"resourceAttributes": attrs}})
                except ApiError as e:
                    report.add("warn", "rbac", f"cannot ask what we may do (SelfSubjectAccessReview): {e}")
                    return
                checked += 1
                if not (doc.get("status") or {}).get("allowed"):
                    missing.append(f"{verb} {res.id}" + (f" in {ns}" if ns else ""))
    for m in missing:
        verb, what = m.split(" ", 1)
        report.add("fail", "rbac", f"cannot {verb} {what}: " + (
            "changes after the first list are never seen" if verb == "watch" else "these objects are never seen"),
            f"grant get, list, watch on {what.split(' in ')[0]} (the gangscope-reader ClusterRole of "
            f"deploy/kubernetes/rbac.yaml; `kubectl auth can-i {verb} {what.split(' in ')[0]}`)")
    if not missing:
        kinds = sum(1 for r in resolved.values() if r is not None)
        report.add("pass", "rbac", f"list and watch allowed on all {kinds} kinds watched ({checked} access reviews)")


def image_tag(image: str) -> str | None:
    """The tag of a container image reference: ``v0.19.2`` of ``registry.k8s.io/kueue/kueue:v0.19.2@sha256:...``,
    None when it has none (``host:5000/kueue`` has a registry port, not a tag; a digest alone says no version)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def _kueue(report: Report, client: Any, resolved: dict[str, Any]) -> bool:
    """Kueue's version (its controller's image) and whether the granular admission reasons are on; True when no
    Workload tells (the controller's metrics may)."""
    from collectors.k8s.client import ApiError

    wl = resolved.get("workloads.kueue.x-k8s.io")
    if wl is None:
        return False
    try:
        pods = client.get_json("/api/v1/namespaces/kueue-system/pods",
                               {"labelSelector": "control-plane=controller-manager"}).get("items") or []
    except ApiError:
        pods = []
    images = sorted({c.get("image", "") for p in pods for c in (p.get("spec") or {}).get("containers") or []
                     if "kueue" in c.get("image", "")})
    versions = sorted({v for v in map(image_tag, images) if v})
    if versions:
        report.add("pass", "kueue", f"Kueue {', '.join(versions)} (controller image {', '.join(images)})")
    else:
        report.add("warn", "kueue", "Kueue's version unknown: no controller-manager pod in kueue-system",
                   "nothing to do if Kueue runs elsewhere; its admission reasons are read either way")
    reasons: dict[str, int] = {}
    try:
        for w in client.get_json(wl.path(), {"limit": 500}).get("items") or []:
            for c in (w.get("status") or {}).get("conditions") or []:
                if c.get("type") == "QuotaReserved" and c.get("status") == "False" and c.get("reason"):
                    reasons[c["reason"]] = reasons.get(c["reason"], 0) + 1
    except ApiError:
        pass
    granular = sorted(r for r in reasons if r in GRANULAR)
    coarse = sorted(r for r in reasons if r in COARSE)
    if granular:
        report.add("pass", "kueue", f"granular admission reasons on: waiting Workloads say {', '.join(granular)}")
    if coarse and not granular:
        report.add("warn", "kueue", f"granular admission reasons off: waiting Workloads say {', '.join(coarse)}",
                   GATE_FIX)
    return not granular and not coarse


def _topology(report: Report, client: Any, resolved: dict[str, Any]) -> None:
    """Every level of every Kueue Topology against the labels of the GPU nodes."""
    topo = resolved.get("topologies.kueue.x-k8s.io")
    if topo is None:
        return
    topologies = client.get_json(topo.path()).get("items") or []
    if not topologies:
        report.add("pass", "topology", "no Kueue Topology: topology-aware scheduling not in use")
        return
    nodes = client.get_json("/api/v1/nodes").get("items") or []
    gpu_nodes = [n for n in nodes if float(((n.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu", 0)
                                           or 0) > 0] or nodes
    for t in topologies:
        name = (t.get("metadata") or {}).get("name")
        levels = [lv.get("nodeLabel") for lv in (t.get("spec") or {}).get("levels") or [] if lv.get("nodeLabel")]
        problems = False
        for level in levels:
            lacking = [(n.get("metadata") or {}).get("name") for n in gpu_nodes
                       if level not in ((n.get("metadata") or {}).get("labels") or {})]
            if len(lacking) == len(gpu_nodes):
                problems = True
                report.add("fail", "topology", f"Topology {name}: no GPU node carries level {level}: a job that "
                           "requires it is never admitted (admission_topology)", f"label the nodes with {level}, or "
                           f"remove the level from Topology {name}")
            elif lacking:
                problems = True
                shown = ", ".join(lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
                report.add("warn", "topology", f"Topology {name}: {len(lacking)} of {len(gpu_nodes)} GPU nodes lack "
                           f"{level} ({shown}): Kueue cannot place pods on them", f"label them with {level}")
        if not problems:
            report.add("pass", "topology", f"Topology {name}: all {len(gpu_nodes)} GPU nodes carry its levels "
                       f"({', '.join(levels)})")


def _exporters(report: Report, client: Any, settings: Settings, in_cluster: bool, gate_unknown: bool) -> None:
    """Discover the exporters as ``run`` would, scrape each once, and say what their signals let us see."""
    import dataclasses

    from collectors.metrics.scrape import Scraper, target_source
    from collectors.metrics.targets import DEFAULT_JOBS, discovery_rules
    from gangscope.app.startup import default_discovery
    from gangscope.errors import UserError

    s = settings
    if not s.metrics.targets and not s.metrics.discovery:
        s = dataclasses.replace(s, metrics=dataclasses.replace(s.metrics, discovery=default_discovery(in_cluster)))
    try:
        rules = discovery_rules(s, in_cluster=in_cluster)
        targets = target_source(s, client)()
    except UserError as e:
        report.add("fail", "exporters", f"metrics settings: {e}")
        return
    if rules and rules[0].via == "apiserver" and targets:
        try:
            doc = client.post_json("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "subresource": "proxy"}}})
            if not (doc.get("status") or {}).get("allowed"):
                report.add("fail", "rbac", "cannot get pods/proxy: from outside the cluster the exporters are "
                           "scraped through the API server's pod proxy", "grant get on pods/proxy, or run gangscope "
                           "in the cluster (metrics.discovery_via: pod_ip)")
        except Exception:  # noqa: BLE001 - the scrapes below say it anyway
            pass
    batches: list[Any] = []

    async def once() -> None:
        async with Scraper(s.cluster, batches.append, max_body_bytes=s.metrics.max_body_bytes,
                           skew_s=10 * 365 * 86400.0) as scraper:  # names, not times, matter here
            await scraper.scrape_round(targets)

    asyncio.run(once())
    by_job: dict[str, list[Any]] = {}
    for b in batches:
        if not b.error or not b.error.startswith("skipped"):
            by_job.setdefault(FAMILY_OF.get(b.job, b.job), []).append(b)
    signals_of = _matcher(s)
    jobs = [r.job for r in rules] or sorted(by_job)
    for job in dict.fromkeys([*(j for j in DEFAULT_JOBS if j in jobs), *jobs, *by_job]):
        got = [b for b in by_job.get(job, []) if b.up]
        found = len({b.target for b in by_job.get(job, [])})
        name = FAMILY_NAMES.get(job, job)
        if found == 0:
            if job == "dcgm":
                report.add("warn", "exporters", "no dcgm-exporter found: GPU faults, throttled GPUs and NVLink "
                           "cannot be seen", "install the GPU Operator's dcgm-exporter (pods labelled "
                           "app=nvidia-dcgm-exporter), or name its pods in metrics.discovery")
            elif job == "node":
                report.add("warn", "exporters", "no node_exporter found: InfiniBand cannot be seen",
                           "install prometheus-node-exporter (label app.kubernetes.io/name=prometheus-node-exporter)")
            elif job not in ("training",):
                report.add("pass", "exporters", f"{name}: none found (optional)")
            continue
        failed = [b for b in by_job.get(job, []) if not b.up]
        names = {m for b in got for m in b.series_metric}
        signals = set().union(*(signals_of(m) for m in names)) if names else set()
        text = f"{name}: {len(got)} of {found} answered"
        if signals:
            text += f"; signals: {', '.join(sorted(signals))}"
        if failed:
            report.add("warn" if got else "fail", "exporters", f"{text}; {len(failed)} failed: {failed[0].target}: "
                       f"{failed[0].error}", "kueue / kube-scheduler /metrics need their metrics-reader role bound "
                       "to gangscope's service account" if job in ("kueue", "scheduler") else
                       "look at the exporter pods (kubectl get pods -o wide) and their logs")
        else:
            report.add("pass", "exporters", text)
        for family, needed, status, lost, fix in NEEDS:
            if family == job and got and not _has(needed, names, signals):
                what = ", ".join(n.removeprefix("signal:") for n in needed)
                report.add(status, "signals", f"{name} serves no {what}: {lost}", fix)
        if job == "kueue" and got and gate_unknown:
            if "kueue_unadmitted_workloads" in names:
                report.add("pass", "kueue", "granular admission reasons on: the controller exports "
                           "kueue_unadmitted_workloads")
            else:
                report.add("warn", "kueue", "granular admission reasons: no Workload waits now and the controller "
                           "does not export kueue_unadmitted_workloads (emitted only with the gate on)", GATE_FIX)
            gate_unknown = False
    if gate_unknown:
        report.add("warn", "kueue", "granular admission reasons: cannot tell (no Workload waits now and Kueue's "
                   "metrics were not scraped)", GATE_FIX)
    _throughput(report, client, by_job.get("training", []) + by_job.get("ray", []), signals_of)


def _throughput(report: Report, client: Any, batches: list[Any], signals_of: Callable[[str], set[str]]) -> None:
    """Every running GPU job should report a training-throughput metric, or its slowdowns cannot be seen."""
    from collectors.k8s.client import ApiError

    try:
        pods = client.get_json("/api/v1/pods", {"fieldSelector": "status.phase=Running"}).get("items") or []
    except ApiError:
        return
    jobs: dict[tuple[str, str], set[str]] = {}
    for p in pods:
        meta, spec = p.get("metadata") or {}, p.get("spec") or {}
        gpus = sum(float(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", 0) or 0)
                   for c in spec.get("containers") or [])
        if gpus <= 0:
            continue
        labels = meta.get("labels") or {}
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), {})
        job = labels.get("jobset.sigs.k8s.io/jobset-name") or owner.get("name") or meta.get("name")
        jobs.setdefault((meta.get("namespace", ""), job), set()).add(meta.get("name", ""))
    reporting_pods: set[tuple[str, str]] = set()
    reporting_jobs: set[tuple[str, str]] = set()
    for b in batches:
        for metric, labels in zip(b.series_metric, b.series_labels, strict=False):
            if "throughput" not in signals_of(metric):
                continue
            ns = labels.get("namespace") or labels.get("exported_namespace") or ""
            if labels.get("pod") or labels.get("exported_pod"):
                reporting_pods.add((ns, labels.get("pod") or labels.get("exported_pod")))
            if labels.get("job_name"):
                reporting_jobs.add((ns, labels["job_name"]))
    silent = [f"{ns}/{job}" for (ns, job), members in sorted(jobs.items())
              if (ns, job) not in reporting_jobs and not any((ns, p) in reporting_pods for p in members)]
    for job in silent:
        report.add("warn", "throughput", f"no training-throughput metric for job {job}: its slowdowns "
                   "(interconnect, throttling, misplacement, stalls) cannot be seen",
                   "expose a gauge ending in tokens_per_second / samples_per_second (or a *_total counter) on a "
                   "pod annotated prometheus.io/scrape: \"true\", or name the metric in metrics.throughput_metrics")
    if jobs and not silent:
        report.add("pass", "throughput", f"all {len(jobs)} running GPU jobs report training throughput")


def _quiet_logs(settings: Settings, args: Any) -> None:
    """The scrapes' and discoveries' own WARNING lines (a target that failed, ...) say again, between the check's
    lines, what a check line already says with its fix: noise for a first-time user. Kept when a log level is asked
    for on the command line (``--log-level``) or configured as debug; errors always pass."""
    if getattr(args, "log_level", None) or settings.log.level.upper() == "DEBUG":
        return
    for handler in logging.getLogger().handlers:  # those of gangscope.logs.setup, made anew for each command
        handler.setLevel(max(handler.level, logging.ERROR))


def _handler(settings: Settings, args: Any) -> int:
    from gangscope import clock

    _quiet_logs(settings, args)
    clock.configure(settings.clock.sim_origin, settings.clock.wall_origin, settings.clock.speed)
    if args.kubeconfig or args.context:
        import dataclasses

        settings = dataclasses.replace(settings, k8s=dataclasses.replace(
            settings.k8s, kubeconfig=args.kubeconfig or settings.k8s.kubeconfig,
            context=args.context or settings.k8s.context))
    report = run_checks(settings)
    out = report.to_json() if args.format == "json" else report.to_text()
    sys.stdout.write(out + "\n")
    return 1 if report.failed else 0


def register(groups: dict[str, Any], common: Any) -> None:
    p = groups["root"].add_parser(
        "check", parents=[common], help="preflight: can gangscope see this cluster? (pass / warn / fail, with fixes)",
        description="Check what `gangscope run` needs of the cluster, one line each with its fix: the API server "
        "reachable and who we are (SelfSubjectReview), clock skew (the Date header), the kinds and versions served "
        "(Kueue v1beta1/v1beta2, coscheduling and Volcano PodGroups, scheduling.k8s.io, JobSet, Jobs), list and "
        "watch allowed on every kind watched (SelfSubjectAccessReview), Kueue's version and whether its granular "
        "admission reasons are on, the nodes' topology labels against the Kueue Topology levels, and the exporters: "
        "found, answering, and which signals they give (no SM clock: throttled GPUs cannot be seen; no NVLink "
        "fields; no throughput metric for a running job). Exit 1 when a line fails, else 0. Publishes nothing.")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default k8s.kubeconfig, $KUBECONFIG, "
                   "~/.kube/config; in a pod: the service account)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current context)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    p.set_defaults(handler=_handler)
