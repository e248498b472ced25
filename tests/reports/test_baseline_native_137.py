"""Migration baseline across the move (issue 19): a Kueue + coscheduling window and a Kubernetes 1.37 native window
of the same job, built by the real models; `compare` says per job what moved and what differs (gang object,
a per-group timeout against none, placement) and what did not (gang size)."""

from __future__ import annotations

from pathlib import Path

from pipeline import lake, models
from reports import baseline
from tests.sql.lakefix import Raw, cond, iso, node, pod, topology, workload
from tests.sql.refobjects import clone_pod, load

NS = "ml-team"
JOB_FILE = "gang/k8s-1.37_job-spec-scheduling_workload-podgroup-pods.yaml"
RACKS = {"gpu-node-17": "rack-a", "gpu-node-18": "rack-a", "gpu-node-19": "rack-b", "gpu-node-20": "rack-b"}


def _nodes(raw: Raw) -> None:
    for name, rack in RACKS.items():
        n = node(name, rack)
        n["metadata"]["labels"]["topology.example.com/rack"] = rack
        raw.event(0, n)
    raw.event(0, topology())


def _before(raw: Raw) -> None:
    """bert-pretrain on Kueue + coscheduling: admitted, PodGroup minMember 4 with scheduleTimeoutSeconds 60, pods
    on two racks."""
    _nodes(raw)
    raw.event(0, workload(NS, "job-bert-pretrain-3f2a1", "Job", "bert-pretrain", 4,
                          [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", 0.5),
                           cond("Admitted", "True", "Admitted", "The workload is admitted", 0.5)], cluster_queue="cq"))
    raw.event(0, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                  "metadata": {"name": "bert-pretrain", "namespace": NS},
                  "spec": {"minMember": 4, "scheduleTimeoutSeconds": 60}, "status": {"phase": "Running"}})
    for i, n in enumerate(RACKS):
        labels = {"scheduling.x-k8s.io/pod-group": "bert-pretrain"}
        ann = {"kueue.x-k8s.io/workload": "job-bert-pretrain-3f2a1"}
        raw.event(0.6, pod(NS, f"bert-pretrain-{i}", "Job", "bert-pretrain", None, "Pending", labels=labels,
                           annotations=ann))
        raw.event(1.0, pod(NS, f"bert-pretrain-{i}", "Job", "bert-pretrain", n, "Running", labels=labels,
                           annotations=ann, conditions=[cond("PodScheduled", "True", "", "", 0.8)]), "MODIFIED")
    raw.event(30, node("gpu-node-99", "rack-z"), "MODIFIED")


def _after(raw: Raw, reference: Path) -> None:
    """The same job on 1.37: spec.scheduling gang, the Job controller's Workload and PodGroup (v1beta1 and v1alpha3),
    pods on one rack, no Kueue."""
    _nodes(raw)
    job, wl, pg, p0 = load(reference, JOB_FILE, "2026-09-02T09:00:00Z")
    raw.event(0, job)
    for obj in (wl, pg):
        raw.event(0.1, obj)
        raw.event(0.1, {**obj, "apiVersion": "scheduling.k8s.io/v1alpha3"})
    for i, n in enumerate(["gpu-node-17", "gpu-node-18", "gpu-node-17", "gpu-node-18"]):
        p = clone_pod(p0, f"bert-pretrain-{i}-x7k2p", f"bert-pod-{i}", i)
        p["spec"]["nodeName"] = n
        p["status"] = {"phase": "Running", "startTime": iso(0.2),
                       "conditions": [cond("PodScheduled", "True", "", "", 0.2)]}
        raw.event(0.3, p)
    raw.event(30, node("gpu-node-99", "rack-z"), "MODIFIED")


def _snapshot(tmp: Path, fill) -> dict:
    from gangscope import config

    settings = config.load(overrides={"data": str(tmp / "data")}, environ={})
    con = lake.connect(settings)
    raw = Raw()
    fill(raw)
    raw.write(con)
    models.build(settings, con)
    try:
        return baseline.compute(con, settings.cluster)
    finally:
        con.close()


def test_compare_kueue_coscheduling_with_137_native_per_job(tmp_path: Path, reference: Path) -> None:
    before = _snapshot(tmp_path / "a", _before)
    after = _snapshot(tmp_path / "b", lambda raw: _after(raw, reference))
    assert before["systems"] == {"queue": ["kueue"], "gang": ["coscheduling"]}
    assert after["systems"] == {"queue": [], "gang": ["native"]}
    assert after["per_job"][f"{NS}/bert-pretrain"]["pod_group"] == \
        "bert-pretrain-7c56f99548-bert-pretrain-pgt-0-548d6479cc"
    result = baseline.compare(before, after)
    (job,) = result["jobs"]
    assert job["job"] == f"{NS}/bert-pretrain"
    assert job["moved"] == "kueue_coscheduling -> native"
    d = job["differs"]
    assert d["gang"] == ["coscheduling", "native"] and d["queue"] == ["kueue", None]
    assert d["group_timeout_s"] == [60, None]  # a per-group timeout before, none on 1.37
    assert d["placement_domains"] == [2, 1]
    assert "gang_size" not in d and "root_cause" not in d  # 4 members both times, healthy both times
    table = baseline.format_table(result)
    assert f"{NS}/bert-pretrain: api kueue_coscheduling -> native" in table
    assert "group_timeout_s 60 -> -" in table


def test_older_snapshot_without_per_job_still_compares(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path / "a", _before)
    old = {k: v for k, v in snap.items() if k != "per_job"}
    assert baseline.compare(old, snap)["jobs"] == []

