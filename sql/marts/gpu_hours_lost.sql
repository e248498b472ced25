-- GPU-hours lost per finding, the fleet view's first figure: GPUs a job asked for while it waited in the queue,
-- GPUs held idle by the running members of an incomplete gang, GPUs held by pods whose containers never started,
-- GPUs of a job stopped by a fault, a lost node, a crash, a stall or a preemption, and the share of a slow job's GPUs its throughput lost (1 - mean ratio to baseline). Counted from the
-- finding's start (a queue wait from the Workload's creation) to its end, or to the data's as_of while ongoing.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: root_cause: the finding's class
-- column: started_at: the finding's start
-- column: how: waiting in queue, idle in partial gang, idle before start, stopped, running slow
-- column: gpus: GPUs counted
-- column: hours: length of the period counted
-- column: lost_share: share of those GPUs lost (1 except for a slow job)
-- column: gpu_hours: gpus x hours x lost_share
WITH f AS (
    SELECT f.*, a.as_of, j.gpus AS job_gpus, w.gpus AS requested_gpus
    FROM marts.findings f
    JOIN intermediate.int_as_of a USING (cluster)
    JOIN intermediate.int_jobs j USING (cluster, namespace, job)
    LEFT JOIN staging.stg_workloads w ON w.cluster = f.cluster AND w.namespace = f.namespace AND w.name = f.workload
    WHERE f.root_cause <> 'healthy'
),
counted AS (
    SELECT cluster, namespace, job, root_cause, started_at, ended_at, as_of,
           CASE WHEN root_cause IN ('admission_quota', 'admission_topology') THEN 'waiting in queue'
                WHEN root_cause = 'gang_assembly' THEN 'idle in partial gang'
                WHEN root_cause = 'startup_failure' THEN 'idle before start'
                WHEN root_cause IN ('gpu_fault', 'node_failure', 'preemption', 'workload_crash', 'training_stalled')
                THEN 'stopped'
                ELSE 'running slow' END AS how,
           CASE WHEN root_cause IN ('admission_quota', 'admission_topology') THEN coalesce(requested_gpus, job_gpus)
                WHEN root_cause = 'gang_assembly' THEN TRY_CAST(evidence->>'$.idle_gpus' AS INTEGER)
                WHEN root_cause = 'startup_failure' THEN TRY_CAST(evidence->>'$.gpus_held' AS INTEGER)
                ELSE job_gpus END AS gpus,
           CASE WHEN root_cause IN ('admission_quota', 'admission_topology')
                THEN coalesce(TRY_CAST(evidence->>'$.created_at' AS TIMESTAMPTZ), started_at)
                WHEN root_cause = 'gang_assembly'
                THEN coalesce(TRY_CAST(evidence->>'$.assembly_started_at' AS TIMESTAMPTZ), started_at)
                WHEN root_cause = 'startup_failure'
                THEN coalesce(TRY_CAST(evidence->>'$.first_pod.bound_at' AS TIMESTAMPTZ), started_at)
                ELSE started_at END AS counted_from,
           CASE WHEN root_cause IN ('interconnect_degradation', 'gpu_throttle', 'topology_misplacement',
                                    'unexplained_slowdown')
                THEN greatest(0, 1 - coalesce(TRY_CAST(evidence->>'$.throughput.mean_ratio' AS DOUBLE), 1))
                ELSE 1 END AS lost_share
    FROM f
)
SELECT cluster, namespace, job, root_cause, started_at, how, coalesce(gpus, 0) AS gpus,
       greatest(epoch(coalesce(ended_at, as_of) - counted_from), 0) / 3600 AS hours, lost_share,
       coalesce(gpus, 0) * greatest(epoch(coalesce(ended_at, as_of) - counted_from), 0) / 3600 * lost_share AS gpu_hours
FROM counted
