"""Which of the kinds of CONTRACT section 2 the API server serves, and at which version.

Each *slot* is one kind we want, with its acceptable group/versions in order of
preference; discovery picks the first one the server offers with list and watch. Kueue
and the native ``scheduling.k8s.io`` API change versions across releases, so the
choice is re-made on every discovery round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from collectors.k8s.client import ApiError, Client

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Resource:
    """One served resource: enough to build its list/watch URL."""

    group: str  # "" for core
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def id(self) -> str:
        """``<plural>.<group>`` (``pods`` for core), the name kinds are selected by in config."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"


@dataclass(frozen=True, slots=True)
class Slot:
    """A kind we watch: its name, and (group, versions newest-first) alternatives."""

    name: str
    kind: str
    plural: str
    alternatives: tuple[tuple[str, tuple[str, ...]], ...]


_KUEUE = (("kueue.x-k8s.io", ("v1beta2", "v1beta1")),)
_NATIVE = ("scheduling.k8s.io", ("v1beta1", "v1alpha3", "v1alpha2", "v1alpha1"))

# Every kind of CONTRACT section 2. Events: core/v1 preferred, events.k8s.io/v1 if core
# is not served; both shapes describe the same objects, so watching both would double them.
SLOTS: tuple[Slot, ...] = (
    Slot("pods", "Pod", "pods", (("", ("v1",)),)),
    Slot("nodes", "Node", "nodes", (("", ("v1",)),)),
    Slot("events", "Event", "events", (("", ("v1",)), ("events.k8s.io", ("v1",)))),
    # Jobs and JobSets for their failure conditions and restarts (workload_crash, startup_failure).
    Slot("jobs.batch", "Job", "jobs", (("batch", ("v1",)),)),
    Slot("jobsets.jobset.x-k8s.io", "JobSet", "jobsets", (("jobset.x-k8s.io", ("v1alpha2",)),)),
    # The training / inference kinds teams submit, for their identity, gang size (spec) and terminal state: the job
    # is the submitted object, never a child (a TrainJob's JobSet, a RayJob's RayCluster, an LWS's StatefulSets).
    Slot("trainjobs.trainer.kubeflow.org", "TrainJob", "trainjobs", (("trainer.kubeflow.org", ("v1alpha1",)),)),
    Slot("pytorchjobs.kubeflow.org", "PyTorchJob", "pytorchjobs", (("kubeflow.org", ("v1",)),)),
    Slot("mpijobs.kubeflow.org", "MPIJob", "mpijobs", (("kubeflow.org", ("v2beta1", "v1")),)),
    Slot("leaderworkersets.leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets",
         (("leaderworkerset.x-k8s.io", ("v1",)),)),
    Slot("rayclusters.ray.io", "RayCluster", "rayclusters", (("ray.io", ("v1",)),)),
    Slot("rayjobs.ray.io", "RayJob", "rayjobs", (("ray.io", ("v1",)),)),
    Slot("workloads.kueue.x-k8s.io", "Workload", "workloads", _KUEUE),
    Slot("clusterqueues.kueue.x-k8s.io", "ClusterQueue", "clusterqueues", _KUEUE),
    Slot("localqueues.kueue.x-k8s.io", "LocalQueue", "localqueues", _KUEUE),
    Slot("resourceflavors.kueue.x-k8s.io", "ResourceFlavor", "resourceflavors", _KUEUE),
    Slot("topologies.kueue.x-k8s.io", "Topology", "topologies", _KUEUE),
    Slot("podgroups.scheduling.x-k8s.io", "PodGroup", "podgroups", (("scheduling.x-k8s.io", ("v1alpha1",)),)),
    Slot("podgroups.scheduling.volcano.sh", "PodGroup", "podgroups", (("scheduling.volcano.sh", ("v1beta1",)),)),
    Slot("workloads.scheduling.k8s.io", "Workload", "workloads", (_NATIVE,)),
    Slot("podgroups.scheduling.k8s.io", "PodGroup", "podgroups", (_NATIVE,)),
    # 1.37 gang of gangs; v1alpha3 only (v1beta1 has none), absent from discovery while its gate is off.
    Slot("compositepodgroups.scheduling.k8s.io", "CompositePodGroup", "compositepodgroups",
         (("scheduling.k8s.io", ("v1alpha3",)),)),
)


def _rid(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def selected_slots(kinds: list[str]) -> list[Slot]:
    """Slots named by ``settings.k8s.kinds`` (empty: all).

    An entry matches a slot by its name (``pods``, ``workloads.kueue.x-k8s.io``), by kind
    (``Workload`` matches Kueue's and the native one, case-insensitive), or a resource id
    such as ``events.events.k8s.io`` to force that alternative.
    """
    if not kinds:
        return list(SLOTS)
    wanted = {k.lower() for k in kinds}
    out: list[Slot] = []
    for slot in SLOTS:
        ids = {slot.name, slot.kind.lower()} | {_rid(slot.plural, g) for g, _ in slot.alternatives}
        hit = wanted & ids
        if not hit:
            continue
        forced = [g for g, _ in slot.alternatives if _rid(slot.plural, g) in hit]
        if forced and slot.name not in hit and slot.kind.lower() not in hit:
            slot = Slot(slot.name, slot.kind, slot.plural, tuple(a for a in slot.alternatives if a[0] in forced))
        out.append(slot)
    known = {s.name for s in SLOTS} | {s.kind.lower() for s in SLOTS} | {
        _rid(s.plural, g) for s in SLOTS for g, _ in s.alternatives}
    unknown = sorted(wanted - known)
    if unknown:
        from gangscope.errors import UserError

        raise UserError(f"k8s.kinds: unknown kind {unknown[0]!r} (known: {', '.join(s.name for s in SLOTS)})")
    return out


def served_resources(client: Client) -> dict[tuple[str, str], dict[str, Resource]]:
    """``{(group, version): {plural: Resource}}`` of list+watch-able resources served now."""
    group_versions: list[tuple[str, str]] = []
    for v in client.get_json("/api").get("versions", []):
        group_versions.append(("", v))
    for g in client.get_json("/apis").get("groups", []):
        for v in g.get("versions", []):
            group_versions.append((g["name"], v["version"]))
    wanted_groups = {g for s in SLOTS for g, _ in s.alternatives}
    out: dict[tuple[str, str], dict[str, Resource]] = {}
    for group, version in group_versions:
        if group not in wanted_groups:
            continue
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            doc = client.get_json(path)
        except ApiError as e:  # a group whose aggregated API is down: skip it this round
            log.warning("discovery of %s failed: %s", path, e)
            continue
        res: dict[str, Resource] = {}
        for r in doc.get("resources", []):
            verbs = set(r.get("verbs") or [])
            if "/" in r["name"] or not {"list", "watch"} <= verbs:
                continue
            res[r["name"]] = Resource(group, version, r["name"], r["kind"], bool(r.get("namespaced")))
        out[(group, version)] = res
    return out


def resolve(slots: list[Slot], served: dict[tuple[str, str], dict[str, Resource]]) -> dict[str, Resource | None]:
    """For each slot, the preferred served resource, or None when the server has none."""
    out: dict[str, Resource | None] = {}
    for slot in slots:
        out[slot.name] = None
        for group, versions in slot.alternatives:
            found = next((served[(group, v)][slot.plural] for v in versions
                          if slot.plural in served.get((group, v), {})), None)
            if found is not None:
                out[slot.name] = found
                break
    return out
