"""Discovery against the fake API server: version preference, subresources, kind selection."""

from __future__ import annotations

import pytest

from collectors.k8s.client import ApiError, Client
from collectors.k8s.discovery import SLOTS, resolve, selected_slots, served_resources
from gangscope.errors import UserError
from tests.collectors_k8s import objects


def test_prefers_newest_served_versions(api, reference):
    objects.populate(api, reference)  # Kueue v1beta2 and v1beta1, native v1alpha2
    api.serve("scheduling.k8s.io", "v1beta1", "workloads", "Workload")  # a 1.37 server offers both
    chosen = resolve(list(SLOTS), served_resources(Client(api.url)))
    assert chosen["workloads.kueue.x-k8s.io"].api_version == "kueue.x-k8s.io/v1beta2"
    assert chosen["topologies.kueue.x-k8s.io"].namespaced is False
    assert chosen["workloads.scheduling.k8s.io"].api_version == "scheduling.k8s.io/v1beta1"
    assert chosen["podgroups.scheduling.k8s.io"].api_version == "scheduling.k8s.io/v1alpha2"
    assert chosen["podgroups.scheduling.x-k8s.io"].path("ns1") == \
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns1/podgroups"
    assert chosen["nodes"].path("ns1") == "/api/v1/nodes"  # cluster-scoped ignores the namespace
    assert chosen["events"].api_version == "v1"
    assert chosen["jobs.batch"] is None  # not populated here: skipped, not an error


def test_jobs_and_jobsets_are_watched_for_their_failures(api):
    api.serve("batch", "v1", "jobs", "Job")
    api.serve("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
    chosen = resolve(list(SLOTS), served_resources(Client(api.url)))
    assert chosen["jobs.batch"].path("ml") == "/apis/batch/v1/namespaces/ml/jobs"
    assert (chosen["jobsets.jobset.x-k8s.io"].api_version, chosen["jobsets.jobset.x-k8s.io"].kind) == \
        ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert [s.name for s in selected_slots(["Job"])] == ["jobs.batch"]


def test_kubernetes_1_37_native_versions_and_composite_pod_groups(api):
    """A 1.37 server serves Workload/PodGroup as v1beta1 and v1alpha3, CompositePodGroup as v1alpha3 only."""
    for v in ("v1beta1", "v1alpha3"):
        api.serve("scheduling.k8s.io", v, "workloads", "Workload")
        api.serve("scheduling.k8s.io", v, "podgroups", "PodGroup")
    chosen = resolve(list(SLOTS), served_resources(Client(api.url)))
    assert chosen["compositepodgroups.scheduling.k8s.io"] is None  # gate CompositePodGroup off: not discovered
    api.serve("scheduling.k8s.io", "v1alpha3", "compositepodgroups", "CompositePodGroup")
    chosen = resolve(list(SLOTS), served_resources(Client(api.url)))
    assert chosen["workloads.scheduling.k8s.io"].api_version == "scheduling.k8s.io/v1beta1"
    assert chosen["podgroups.scheduling.k8s.io"].api_version == "scheduling.k8s.io/v1beta1"
    cpg = chosen["compositepodgroups.scheduling.k8s.io"]
    assert (cpg.api_version, cpg.kind) == ("scheduling.k8s.io/v1alpha3", "CompositePodGroup")
    assert cpg.path("ml-team") == "/apis/scheduling.k8s.io/v1alpha3/namespaces/ml-team/compositepodgroups"
    assert [s.name for s in selected_slots(["CompositePodGroup"])] == ["compositepodgroups.scheduling.k8s.io"]


def test_unserved_kinds_resolve_to_none_and_old_kueue_falls_back(api, reference):
    objects.populate(api, reference, kueue_versions=("v1beta1",), native=False)
    chosen = resolve(list(SLOTS), served_resources(Client(api.url)))
    assert chosen["workloads.kueue.x-k8s.io"].api_version == "kueue.x-k8s.io/v1beta1"
    assert chosen["workloads.scheduling.k8s.io"] is None
    assert chosen["podgroups.scheduling.k8s.io"] is None


def test_events_fall_back_to_events_k8s_io(api):
    api.serve("events.k8s.io", "v1", "events", "Event")
    chosen = resolve(list(SLOTS), served_resources(Client(api.url)))
    assert chosen["events"].api_version == "events.k8s.io/v1"
    assert chosen["pods"] is None


def test_kind_selection():
    assert [s.name for s in selected_slots(["Pod", "PodGroup"])] == [
        "pods", "podgroups.scheduling.x-k8s.io", "podgroups.scheduling.volcano.sh", "podgroups.scheduling.k8s.io"]
    (ev,) = selected_slots(["events.events.k8s.io"])
    assert ev.alternatives == (("events.k8s.io", ("v1",)),)
    assert len(selected_slots([])) == len(SLOTS)
    with pytest.raises(UserError, match="unknown kind 'deployments'"):
        selected_slots(["deployments"])


def test_unreachable_server_is_an_api_error():
    with pytest.raises(ApiError):
        served_resources(Client("http://127.0.0.1:9"))


def test_the_kinds_teams_submit_are_watched_when_served(api):
    """Issue 33: RayCluster / RayJob, TrainJob, PyTorchJob, MPIJob and LeaderWorkerSet, each at the version its
    operator serves; MPIJob's v2beta1 preferred over the legacy v1."""
    served = [("ray.io", "v1", "rayclusters", "RayCluster"), ("ray.io", "v1", "rayjobs", "RayJob"),
              ("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
              ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"), ("kubeflow.org", "v1", "mpijobs", "MPIJob"),
              ("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
              ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")]
    chosen = resolve(list(SLOTS), served_resources(Client(api.url)))
    assert chosen["rayclusters.ray.io"] is None  # not installed: skipped, not an error
    for g, v, plural, kind in served:
        api.serve(g, v, plural, kind)
    chosen = resolve(list(SLOTS), served_resources(Client(api.url)))
    got = {n: (r.api_version, r.kind) for n, r in chosen.items() if r is not None and r.group not in ("", "batch")}
    assert got == {"rayclusters.ray.io": ("ray.io/v1", "RayCluster"), "rayjobs.ray.io": ("ray.io/v1", "RayJob"),
                   "trainjobs.trainer.kubeflow.org": ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
                   "pytorchjobs.kubeflow.org": ("kubeflow.org/v1", "PyTorchJob"),
                   "mpijobs.kubeflow.org": ("kubeflow.org/v2beta1", "MPIJob"),
                   "leaderworkersets.leaderworkerset.x-k8s.io": ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")}
    assert chosen["rayjobs.ray.io"].path("ml") == "/apis/ray.io/v1/namespaces/ml/rayjobs"
