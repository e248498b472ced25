"""A small lake with marts rows inserted directly, for report/baseline/sql tests.

Names from the cluster include hostile ones (``<script>``, quotes) so every renderer is
tested for escaping. Two windows: a Kueue + coscheduling day and a native scheduling.k8s.io day.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import duckdb

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)  # Kueue + coscheduling window
T1 = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)  # native Workload/PodGroup window
EVIL_JOB = "<script>alert(1)</script>"
EVIL_LABEL = 'rack"><img src=x onerror=alert(2)>'
EVIL_NODE = "gpu-node-<b>7</b>"
EVIL_TAINT = "x/y=<svg onload=alert(3)>:NoSchedule"

# The model tables the reports read, with the columns their sql/ files document (a subset where unused).
DDL = """
CREATE SCHEMA IF NOT EXISTS marts; CREATE SCHEMA IF NOT EXISTS staging; CREATE SCHEMA IF NOT EXISTS intermediate;
CREATE OR REPLACE TABLE marts.findings (cluster VARCHAR, namespace VARCHAR, job VARCHAR, job_kind VARCHAR,
  workload VARCHAR, pod_group VARCHAR, root_cause VARCHAR, severity VARCHAR, started_at TIMESTAMPTZ,
  ended_at TIMESTAMPTZ, confidence DOUBLE, nodes VARCHAR[], evidence JSON, summary VARCHAR);
CREATE OR REPLACE TABLE marts.jobs (cluster VARCHAR, namespace VARCHAR, job VARCHAR, job_kind VARCHAR,
  workload VARCHAR, pod_group VARCHAR, gang_system VARCHAR, cluster_queue VARCHAR, local_queue VARCHAR, state VARCHAR,
  root_cause VARCHAR, severity VARCHAR, summary VARCHAR, findings INTEGER, gang_size INTEGER, pods INTEGER,
  pods_running INTEGER, gpus INTEGER, nodes VARCHAR[], created_at TIMESTAMPTZ, all_running_at TIMESTAMPTZ,
  first_seen TIMESTAMPTZ, last_seen TIMESTAMPTZ);
CREATE OR REPLACE TABLE intermediate.int_admission (cluster VARCHAR, namespace VARCHAR, job VARCHAR,
  workload VARCHAR, cluster_queue VARCHAR, created_at TIMESTAMPTZ, quota_reserved_at TIMESTAMPTZ,
  admitted_at TIMESTAMPTZ, wait_s DOUBLE, blocked_by VARCHAR, reason VARCHAR, message VARCHAR);
CREATE OR REPLACE TABLE intermediate.int_gang (cluster VARCHAR, namespace VARCHAR, job VARCHAR, pod_group VARCHAR,
  gang_system VARCHAR, gang_size INTEGER, assembly_started_at TIMESTAMPTZ, all_running_at TIMESTAMPTZ,
  assembly_s DOUBLE, timeout_s DOUBLE, timed_out BOOLEAN, phase VARCHAR, assembled_at TIMESTAMPTZ,
  start_up_s DOUBLE, assembled_before_capture BOOLEAN);
CREATE OR REPLACE TABLE intermediate.int_placement (cluster VARCHAR, namespace VARCHAR, job VARCHAR, level VARCHAR,
  requested BOOLEAN, domains INTEGER, needed_domains INTEGER, misplaced BOOLEAN, domain_values VARCHAR[]);
CREATE OR REPLACE TABLE intermediate.int_job_throughput (cluster VARCHAR, namespace VARCHAR, job VARCHAR,
  ts TIMESTAMPTZ, value DOUBLE, baseline DOUBLE, ratio DOUBLE, judged BOOLEAN, dip BOOLEAN);
CREATE OR REPLACE TABLE marts.queue_health (cluster VARCHAR, cluster_queue VARCHAR, local_queue VARCHAR,
  jobs INTEGER, pending INTEGER, admitted INTEGER, wait_p50_s DOUBLE, wait_p95_s DOUBLE);
CREATE OR REPLACE TABLE marts.node_health (cluster VARCHAR, node VARCHAR, bandwidth_drops INTEGER,
  link_error_samples INTEGER, xid_codes VARCHAR, interconnect_score DOUBLE, trouble_score DOUBLE);
CREATE OR REPLACE TABLE marts.topology_label_audit (cluster VARCHAR, node VARCHAR, topology VARCHAR, level VARCHAR,
  gpus INTEGER);
CREATE OR REPLACE TABLE marts.idle_gpu_hours (cluster VARCHAR, namespace VARCHAR, job VARCHAR, cause VARCHAR,
  gpus INTEGER, started_at TIMESTAMPTZ, ended_at TIMESTAMPTZ, idle_gpu_hours DOUBLE);
CREATE OR REPLACE TABLE staging.stg_metric_signals (cluster VARCHAR, ts TIMESTAMPTZ, signal VARCHAR, metric VARCHAR,
  node VARCHAR, gpu VARCHAR, device VARCHAR, namespace VARCHAR, pod VARCHAR, job_name VARCHAR, value DOUBLE,
  target VARCHAR, scrape_job VARCHAR);
"""

# (ns, job, cq, queue_sys, gang_sys, root_cause, severity, gpus, created offset min, admit wait s, assembly s,
#  timed out, level, domains, compliant, tput/gpu, idle h)
JOBS = [
    ("team-a", "llama-a", "cq-a", "kueue", "coscheduling", "interconnect_degradation", "critical", 16, 0, 30, 40,
     False, "rack", 1, True, 900.0, 0.0),
    ("team-a", "llama-b", "cq-a", "kueue", "coscheduling", "admission_quota", "warning", 8, 5, 1500, None,
     False, "rack", None, None, None, 0.0),
    ("team-b", EVIL_JOB, "cq-b", "kueue", "coscheduling", "gang_assembly", "critical", 8, 10, 60, 400,
     True, "rack", 2, False, None, 1.5),
    ("team-b", "bert-c", "cq-b", "kueue", "coscheduling", "topology_misplacement", "warning", 8, 20, 90, 50,
     False, "rack", 3, False, 400.0, 2.0),
    ("team-b", "bert-d", "cq-b", "kueue", "coscheduling", "healthy", None, 8, 25, 120, 70,
     False, "rack", 1, True, 700.0, 0.0),
]
# Native window: same shapes on scheduling.k8s.io (no Kueue).
NATIVE_JOBS = [  # marts.jobs has one row per job, so the re-runs after the move live in new namespaces
    ("team-a-v137", "llama-a", None, None, "native", "healthy", None, 16, 0, None, 20, False, "rack", 1, True, 950.0,
     0.0),
    ("team-b-v137", "bert-c", None, None, "native", "gang_assembly", "critical", 8, 10, None, 500, True, "rack", 2,
     False, None, 3.0),
    ("team-b-v137", "bert-d", None, None, "native", "healthy", None, 8, 20, None, 30, False, "rack", 1, True, 650.0,
     0.0),
]


def insert_jobs(con: duckdb.DuckDBPyConnection, jobs: list[tuple], base: datetime, cluster: str = "default") -> None:
    for (ns, job, cq, qs, gs, cause, sev, gpus, off, wait, asm, tout, level, doms, comp, tput, idle) in jobs:
        created = base + timedelta(minutes=off)
        admitted = created + timedelta(seconds=wait) if wait is not None and cause != "admission_quota" else None
        running = (admitted or created) + timedelta(seconds=asm) if asm is not None and not tout else None
        nodes = [f"gpu-node-{i}" for i in range(max(1, gpus // 8))]
        wl = f"{job}-wl" if qs else None
        con.execute(
            "INSERT INTO marts.jobs VALUES (?, ?, ?, 'JobSet', ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?)",
            [cluster, ns, job, wl, f"{job}-pg", gs, cq, f"lq-{cq}" if cq else None, cause, sev or "info",
             None if cause == "healthy" else f"{job}: {cause}", 0 if cause == "healthy" else 1, gpus // 8,
             gpus // 8, gpus // 8, gpus, nodes, created, running, created, created + timedelta(hours=1)])
        if qs:
            con.execute("INSERT INTO intermediate.int_admission VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [cluster, ns, job, wl, cq, created, admitted, admitted, wait,
                         "quota" if cause == "admission_quota" else None,
                         "WaitingForQuota" if cause == "admission_quota" else None,
                         "couldn't assign flavors to pod set workers: insufficient unused quota for nvidia.com/gpu"
                         if cause == "admission_quota" else None])
        if asm is not None:
            con.execute("INSERT INTO intermediate.int_gang VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 300, ?, ?, ?, ?, false)",
                        [cluster, ns, job, f"{job}-pg", gs, gpus // 8, admitted or created, running, asm, tout,
                         "Pending" if tout else "Running",
                         None if tout or running is None else running - timedelta(seconds=95),
                         None if tout or running is None else 95.0])
        if doms is not None:
            con.execute("INSERT INTO intermediate.int_placement VALUES (?, ?, ?, ?, true, ?, 1, ?, ?)",
                        [cluster, ns, job, level, doms, not comp, [f"rack-{i}" for i in range(doms)]])
        if tput is not None:
            # Three judged buckets around the job's rate (median = tput * gpus) and one warm-up bucket that
            # must not count.
            for k, factor, judged in ((0, 5.0, False), (1, 0.9, True), (2, 1.0, True), (3, 1.2, True)):
                con.execute("INSERT INTO intermediate.int_job_throughput VALUES (?, ?, ?, ?, ?, ?, ?, ?, false)",
                            [cluster, ns, job, created + timedelta(minutes=k), tput * gpus * factor, tput * gpus,
                             factor, judged])
        if cause != "healthy":
            started = created + timedelta(minutes=15)
            evidence = {"throughput_ratio": 0.55, "nvlink_bw_ratio": 0.4, "at": started.isoformat(),
                        "topology_domains": doms, "node_label": EVIL_LABEL}
            if cause == "gang_assembly":  # what the next step's closest-node sentences read, hostile
                evidence["closest_nodes"] = [{"node": EVIL_NODE, "gpus": 8, "free_gpus": 4, "gpus_needed": 8,
                                              "untolerated_taints": [EVIL_TAINT], "cordoned": False}]
                evidence["nodes_failing_selector"] = [{"node": "n1", "missing": [f"label {EVIL_LABEL}=x"]}]
            con.execute(
                "INSERT INTO marts.findings VALUES (?, ?, ?, 'JobSet', ?, ?, ?, ?, ?, NULL, 0.9, ?, ?, ?)",
                [cluster, ns, job, wl, f"{job}-pg", cause, sev, started, nodes,
                 json.dumps(evidence), f"{job} is {cause} since {started:%H:%M} on {nodes[0]}"])
        if idle:
            con.execute("INSERT INTO marts.idle_gpu_hours VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
                        [cluster, ns, job, "partial_gang" if cause == "gang_assembly" else "misplacement", gpus,
                         created, idle])


def build(con: duckdb.DuckDBPyConnection, native: bool = True) -> None:
    con.execute(DDL)
    con.execute("BEGIN")  # one DuckLake commit, not one per row
    insert_jobs(con, JOBS, T0)
    if native:
        insert_jobs(con, NATIVE_JOBS, T1)
    con.execute("INSERT INTO marts.queue_health VALUES ('default', 'cq-a', 'lq-cq-a', 2, 1, 1, 765.0, 1426.5), "
                "('default', 'cq-b', 'lq-cq-b', 3, 0, 3, 90.0, 117.0)")
    con.execute("INSERT INTO marts.node_health VALUES ('default', 'gpu-node-1', 3, 12, NULL, 21.0, 21.0), "
                "('default', 'gpu-node-0', 0, 0, NULL, 0.0, 0.0), ('default', ?, 0, 0, '79', 0.0, 10.0)", [EVIL_JOB])
    con.execute("INSERT INTO marts.topology_label_audit VALUES ('default', 'gpu-node-7', ?, "
                "'cloud.provider.com/topology-rack', 8)", [EVIL_LABEL])
    # llama-a throughput drops at minute 15 while gpu-node-1's NVLink bandwidth drops.
    rows = []
    for i in range(0, 60):
        ts = T0 + timedelta(minutes=i)
        bad = i >= 15
        rows.append(("default", ts, "throughput", "tokens_per_second", "gpu-node-0", None, None, "team-a",
                     "llama-a-worker-0", "llama-a", 5000.0 if bad else 9000.0 + (i % 3) * 50, "t", "train"))
        for n in ("gpu-node-0", "gpu-node-1"):
            v = 20000.0 if (bad and n == "gpu-node-1") else 50000.0 + (i % 5) * 300
            rows.append(("default", ts, "nvlink_bw", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", n, "0", None, None, None,
                         None, v, "dcgm", "dcgm"))
    con.executemany("INSERT INTO staging.stg_metric_signals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.execute("COMMIT")
