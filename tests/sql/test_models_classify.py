"""Classification on a small cluster built from reference-shaped objects: one job per class (and traps
that must stay healthy), all in one lake built once. Real DuckLake, real models, real signal staging."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pipeline import models
from reports import diagnose
from tests.sql.lakefix import Raw, build_lake, cond, dcgm, failed_scheduling, iso, node, pod, topology, workload

NS = "ml"
END = 40.0  # minutes of data
TICK = 0.25  # 15 s
QUOTA_MSG = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, "
             "8 more needed")


def _admitted(minutes: float) -> list[dict]:
    return [cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", minutes),
            cond("Admitted", "True", "Admitted", "The workload is admitted", minutes)]


def _kueue_job(raw: Raw, job: str, nodes: list[str], kind: str = "Job", labels: dict | None = None) -> list[str]:
    wl = f"{kind.lower()}-{job}-abcde"
    raw.event(0, workload(NS, wl, kind, job, len(nodes), _admitted(0.5), cluster_queue="cq"))
    pods = []
    for i, n in enumerate(nodes):
        name = f"{job}-{i}"
        raw.event(0.6, pod(NS, name, "Job", job if kind == "Job" else f"{job}-w", None, "Pending",
                           labels=labels, annotations={"kueue.x-k8s.io/workload": wl}))
        raw.event(1.0, pod(NS, name, "Job", job if kind == "Job" else f"{job}-w", n, "Running",
                           labels=labels, annotations={"kueue.x-k8s.io/workload": wl}), "MODIFIED")
        pods.append(name)
    return pods


def _build_cluster(raw: Raw) -> None:
    racks = {"n1": "rack-a", "n2": "rack-a", "n3": "rack-a", "n4": "rack-a", "n5": "rack-a",
             "n6": "rack-b", "n7": "rack-b", "n8": "rack-b", "n9": "rack-b", "n10": "rack-c", "n11": "rack-c",
             "n12": "rack-c"}
    for n, r in racks.items():
        raw.event(0, node(n, r))
    raw.event(0, topology())

    gpu_pods = _kueue_job(raw, "gpu-job", ["n1", "n2"])
    xid_pods = _kueue_job(raw, "xid13-job", ["n3"])
    ic_pods = _kueue_job(raw, "ic-job", ["n4", "n5"], kind="JobSet",
                         labels={"jobset.sigs.k8s.io/jobset-name": "ic-job"})
    silent_pods = _kueue_job(raw, "silent-job", ["n6"])
    spread_pods = _kueue_job(raw, "spread-job", ["n8", "n10"])
    slow_pods = _kueue_job(raw, "slow-job", ["n9"])
    wide_pods = _kueue_job(raw, "wide-xid-job", ["n11", "n12"])

    # Legacy condition style: Pending + "insufficient unused quota" message; never admitted.
    raw.event(0, workload(NS, "job-quota-job-11111", "Job", "quota-job", 2,
                          [cond("QuotaReserved", "False", "Pending", QUOTA_MSG, 0.1)]))
    # Granular style: TopologyPlacementFailed.
    raw.event(0, workload(NS, "job-topo-job-22222", "Job", "topo-job", 4,
                          [cond("QuotaReserved", "False", "TopologyPlacementFailed",
                                "couldn't assign flavors to pod set main: topology \"default\" doesn't allow to fit "
                                "any of 4 pod(s)", 0.1)], required="cloud.provider.com/topology-rack"))
    # Preempted after running.
    pre = _kueue_job(raw, "pre-job", ["n3"])
    raw.event(20, workload(NS, "job-pre-job-abcde", "Job", "pre-job", 1,
                           _admitted(0.5)[:1] + [cond("Admitted", "False", "NoReservation",
                                                      "The workload has no reservation", 20),
                                                 cond("Evicted", "True", "Preempted",
                                                      "Preempted to accommodate a workload (UID: x, JobUID: y) due to "
                                                      "prioritization in the ClusterQueue", 20)],
                           cluster_queue="cq"), "MODIFIED")
    raw.event(20.5, pod(NS, pre[0], "Job", "pre-job", "n3", "Running",
                        annotations={"kueue.x-k8s.io/workload": "job-pre-job-abcde"}), "DELETED")

    # Coscheduling gang without Kueue: 2 of 4 members run, 2 cannot be scheduled (partial start).
    raw.event(0, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                  "metadata": {"name": "gang-job", "namespace": NS},
                  "spec": {"minMember": 4, "scheduleTimeoutSeconds": 60}, "status": {"phase": "Scheduling"}})
    for i in range(4):
        running = i < 2
        raw.event(0.5, pod(NS, f"gang-job-{i}", "Job", "gang-job", "n7" if running else None,
                           "Running" if running else "Pending", gpus=4,
                           labels={"scheduling.x-k8s.io/pod-group": "gang-job"}))
    raw.event(1, failed_scheduling(NS, "gang-job-2", "0/10 nodes are available: 2 Insufficient nvidia.com/gpu, "
                                   "8 node(s) had untolerated taint(s). preemption: 0/10 nodes are available: "
                                   "10 Preemption is not helpful for scheduling.", 1))
    raw.event(1, failed_scheduling(NS, "gang-job-3", "rejected due to timeout after waiting 1m0s at plugin "
                                   "Coscheduling", 2, new_api=True))

    # Native scheduling.k8s.io gang (1.36 v1alpha2): PodGroupScheduled=False.
    raw.event(0, {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
                  "metadata": {"name": "native-wl", "namespace": NS},
                  "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "native-job"},
                           "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]}})
    raw.event(0, {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                  "metadata": {"name": "native-pg", "namespace": NS},
                  "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "native-wl",
                                                               "podGroupTemplateName": "workers"}},
                           "schedulingPolicy": {"gang": {"minCount": 2}}},
                  "status": {"conditions": [cond("PodGroupScheduled", "False", "Unschedulable",
                                                 "pod group is unschedulable", 1)]}})
    for i in range(2):
        raw.event(0.5, pod(NS, f"native-job-{i}", "Job", "native-job", None, "Pending",
                           spec={"schedulingGroup": {"podGroupName": "native-pg"}}))

    # Telemetry: two GPUs per node reported (NVLink bandwidth and utilisation), throughput per first pod.
    pod_of = {"n1": gpu_pods[0], "n2": gpu_pods[1], "n3": xid_pods[0], "n4": ic_pods[0], "n5": ic_pods[1],
              "n6": silent_pods[0], "n8": spread_pods[0], "n10": spread_pods[1], "n9": slow_pods[0],
              "n11": wide_pods[0], "n12": wide_pods[1]}
    throughput = {"gpu-job": gpu_pods[0], "xid13-job": xid_pods[0], "ic-job": ic_pods[0],
                  "silent-job": silent_pods[0], "spread-job": spread_pods[0], "slow-job": slow_pods[0],
                  "pre-job": pre[0]}
    t = 0.0
    while t <= END:
        for n in racks:
            if n == "n6" and t >= 20:
                continue  # silent exporter: no samples at all, which is missing data, not a drop
            for g in (0, 1):
                if n == "n1" and g == 0 and t >= 20:
                    continue  # XID 79: the GPU fell off the bus, its series stop; GPU 1 keeps reporting
                p = (NS, pod_of[n]) if n in pod_of and g == 0 else None
                bw = 100000.0
                if n == "n4" and t >= 20:
                    bw = 20000.0  # NVLink degradation on one node of ic-job
                dcgm(raw, t, n, g, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", bw, p)
                dcgm(raw, t, n, g, "DCGM_FI_DEV_GPU_UTIL", 95.0, p)
            if n == "n1" and 19 <= t < 20:
                dcgm(raw, t, n, 0, "DCGM_FI_DEV_XID_ERRORS", 79.0, (NS, pod_of[n]))
            if n == "n3" and t >= 25:
                dcgm(raw, t, n, 1, "DCGM_FI_DEV_XID_ERRORS", 13.0)  # application error: not hardware
            if n in ("n11", "n12") and t >= 30:
                for g in (0, 1):  # the same XID on four devices at once: the workload, not four broken GPUs
                    dcgm(raw, t, n, g, "DCGM_FI_DEV_XID_ERRORS", 94.0)
        for job, p in throughput.items():
            if job == "pre-job" and t >= 20:
                continue
            v = 1000.0
            if t >= 20 and job in ("gpu-job", "ic-job", "spread-job", "slow-job"):
                v = 500.0
            if t >= 20 and job == "spread-job":
                v = 600.0
            raw.sample(t, "train_tokens_per_second", {"namespace": NS, "pod": p, "job_name": job}, v)
        t += TICK


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    settings, con, stats = build_lake(tmp_path_factory.mktemp("cls") / "data", _build_cluster)
    yield settings, con, stats
    con.close()


def _primary(con) -> dict[str, str]:
    return dict(con.execute("SELECT job, root_cause FROM marts.jobs WHERE namespace = ?", [NS]).fetchall())


@pytest.mark.parametrize("job,expected", [
    ("gpu-job", "gpu_fault"),
    ("xid13-job", "healthy"),
    ("ic-job", "interconnect_degradation"),
    ("silent-job", "healthy"),
    ("spread-job", "topology_misplacement"),
    ("slow-job", "unexplained_slowdown"),
    ("quota-job", "admission_quota"),
    ("topo-job", "admission_topology"),
    ("pre-job", "preemption"),
    ("gang-job", "gang_assembly"),
    ("native-job", "gang_assembly"),
    ("wide-xid-job", "healthy"),
])
def test_primary_class(built, job: str, expected: str) -> None:
    _, con, _ = built
    assert _primary(con).get(job) == expected


def test_every_job_found_once(built) -> None:
    _, con, _ = built
    jobs = _primary(con)
    assert set(jobs) == {"gpu-job", "xid13-job", "ic-job", "silent-job", "spread-job", "slow-job", "quota-job",
                         "topo-job", "pre-job", "gang-job", "native-job", "wide-xid-job"}


def test_evidence_holds_threshold_values(built) -> None:
    _, con, _ = built
    rows = {(r["job"], r["root_cause"]): r for r in diagnose.findings(con, include_healthy=True)}
    ic = rows[("ic-job", "interconnect_degradation")]
    assert ic["nodes"] == ["n4"]  # only the degraded node, not its healthy peer
    drop = ic["evidence"]["bandwidth_drops"][0]
    assert drop["node"] == "n4" and drop["signal"] == "nvlink_bw" and drop["ratio"] < 0.6
    assert ic["evidence"]["throughput"]["min_ratio"] < 0.8 and ic["evidence"]["throughput"]["low_samples"] >= 3
    assert ic["started_at"] == iso(20)
    # The condition ("below baseline for >= 3 samples") holds at the third low sample: what time to verdict
    # counts from (bench/verdict.py).
    assert ic["evidence"]["throughput"]["first_low_at"] == iso(20)
    assert ic["evidence"]["throughput"]["held_at"] == iso(20.5)
    gpu = rows[("gpu-job", "gpu_fault")]
    kinds = {(f["kind"], f["xid"]) for f in gpu["evidence"]["faults"]}
    assert ("xid", 79) in kinds and ("gpu_missing", None) in kinds
    assert gpu["nodes"] == ["n1"] and gpu["severity"] == "critical"
    quota = rows[("quota-job", "admission_quota")]
    assert quota["evidence"]["reason"] == "Pending" and quota["evidence"]["wait_s"] > 600
    assert quota["ended_at"] is None
    gang = rows[("gang-job", "gang_assembly")]
    assert gang["evidence"]["timeout_s"] == 60 and gang["evidence"]["pods_running"] == 2
    assert gang["evidence"]["failed_scheduling"]["Insufficient nvidia.com/gpu"] == 2
    assert gang["evidence"]["idle_gpus"] == 8 and gang["severity"] == "critical"
    mis = rows[("spread-job", "topology_misplacement")]
    assert mis["evidence"]["domains"] == 2 and mis["evidence"]["needed_domains"] == 1


def test_no_healthy_job_is_flagged(built) -> None:
    _, con, _ = built
    bad = con.execute("SELECT job, root_cause FROM marts.findings WHERE job IN ('xid13-job', 'silent-job', "
                      "'wide-xid-job') "
                      "AND root_cause <> 'healthy'").fetchall()
    assert bad == []
    # n6's exporter went silent: the node has no bandwidth rows after that, and no drop is reported for it.
    assert con.execute("SELECT count(*) FROM intermediate.int_node_bandwidth WHERE node = 'n6' "
                       "AND ts >= TIMESTAMPTZ '2026-11-01 00:20:00+00'").fetchone()[0] == 0


def test_json_output_contract(built) -> None:
    _, con, _ = built
    rows = json.loads(diagnose.to_json(diagnose.findings(con)))
    assert rows and all(set(r) == set(diagnose.FIELDS) | set(diagnose.EXTRA_FIELDS) for r in rows)
    assert all(r["next_steps"] and r["next_steps"][0]["check"].startswith("kubectl ") for r in rows)
    assert all(r["root_cause"] != "healthy" for r in rows)
    starts = [r["started_at"] for r in rows]
    assert starts == sorted(starts, reverse=True)
    assert all(r["started_at"].endswith("Z") for r in rows)


def test_sql_assertions_pass(built) -> None:
    _, con, _ = built
    failing = {k: v for k, v in models.run_assertions(con).items() if v}
    assert failing == {}


def test_failed_scheduling_parsed(built) -> None:
    _, con, _ = built
    rows = con.execute("SELECT pod, total_nodes, node_count, reason, category FROM staging.stg_failed_scheduling "
                       "ORDER BY pod, reason").fetchall()
    assert ("gang-job-2", 10, 2, "Insufficient nvidia.com/gpu", "insufficient_gpu") in rows
    assert ("gang-job-2", 10, 8, "node(s) had untolerated taint(s)", "taint") in rows
    assert ("gang-job-3", None, None, "rejected due to timeout after waiting 1m0s at plugin Coscheduling",
            "gang") in rows


def test_window_filters(built) -> None:
    from tests.sql.lakefix import ts

    _, con, _ = built
    everything = diagnose.findings(con)
    early = diagnose.findings(con, until=ts(5))
    assert early and all(r["started_at"] <= iso(5) for r in early)
    assert {r["job"] for r in early} < {r["job"] for r in everything}
    late = diagnose.findings(con, since=ts(39))
    assert all(r["ended_at"] is None or r["ended_at"] >= iso(39) for r in late)
    assert diagnose.findings(con, since=ts(100), until=ts(101)) == [
        r for r in diagnose.findings(con, until=ts(101)) if r["ended_at"] is None]
    assert "gang-job" in diagnose.to_table(everything)


def test_rebuilding_the_same_data_gives_the_same_findings(built) -> None:
    """Same lake, same findings, evidence included: a tie (several racks with nothing free) once named a
    different "largest free domain" from one build to the next, so a finding's evidence flapped."""
    settings, con, _ = built
    query = ("SELECT job, root_cause, severity, started_at, ended_at, confidence, nodes::VARCHAR, evidence::VARCHAR, "
             "summary FROM marts.findings WHERE namespace = ? ORDER BY ALL")
    first = con.execute(query, [NS]).fetchall()
    for _ in range(5):
        models.build(settings, con, full=True)
        assert con.execute(query, [NS]).fetchall() == first
