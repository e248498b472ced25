-- Gang timeline per job that is admitted or not under Kueue (CONTRACT section 4): assembly starts at admission,
-- else at the creation of the current run's pods (or the gang object); it ends when the gang's minimum number of
-- members are bound to nodes (the pods' PodScheduled times, or the gang object's own scheduled condition),
-- not when their containers run: image pulls and container start-up are start_up_s, not assembly. A gang
-- already bound when gangscope first saw it, with no time of its own, assembled before capture began and is
-- never timed out for it.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: pod_group: identity
-- column: gang_system: identity
-- column: gang_size: members needed (intermediate.int_jobs)
-- column: pods: live pods
-- column: pods_bound: live pods bound to a node
-- column: pods_running: live pods Running now
-- column: gpus: GPUs requested by live pods
-- column: assembly_started_at: Kueue admission, else creation of the current pods or of the gang object
-- column: assembled_at: when gang_size members were bound (or the gang object was scheduled); NULL while not
-- column: assembled_before_capture: assembled_at is only the first observation: the gang was bound before capture
-- column: all_running_at: when the last needed member first ran (NULL while incomplete)
-- column: assembly_s: seconds from assembly_started_at to assembled_at (to as_of while not assembled)
-- column: start_up_s: seconds from assembled_at to all_running_at (image pull, container start-up); NULL when
--   either is unknown or only bounded by the capture start
-- column: timeout_s: the timeout that applies
-- column: timed_out: not assembled within timeout_s (still waiting past it, or bound later than it)
-- column: phase: gang object phase now (coscheduling/Volcano phase, native Scheduled/Unschedulable/Pending)
-- column: group_message: native PodGroupScheduled / Volcano condition message
-- column: failed_reasons: FailedScheduling reasons of the job's pods as a JSON object reason -> max node count
-- column: first_failed_at: first FailedScheduling event of the job's pods
-- column: idle_gpus: GPUs of members already running while the gang is incomplete (a partial start)
WITH j AS (
    -- A deleted job is judged up to its deletion, not to the data's "now".
    SELECT j.*, CASE WHEN j.deleted_at < a.as_of THEN j.deleted_at ELSE a.as_of END AS as_of, ad.admitted_at
    FROM intermediate.int_jobs j
    JOIN intermediate.int_as_of a USING (cluster)
    LEFT JOIN intermediate.int_admission ad USING (cluster, namespace, job)
    -- A requeued Workload (evicted, waiting for quota again) is queued, not assembling: its wait is admission's.
    WHERE j.workload IS NULL OR (ad.admitted_at IS NOT NULL AND NOT ad.requeued)
),
pg AS (
    SELECT * FROM staging.stg_pod_groups
    QUALIFY row_number() OVER (PARTITION BY cluster, namespace, name ORDER BY last_seen_at DESC) = 1
),
fs AS (
    SELECT p.cluster, p.namespace, p.job, f.reason, max(coalesce(f.node_count, 0)) AS nodes, min(f.first_at) AS first_at
    FROM staging.stg_failed_scheduling f
    JOIN intermediate.int_pod_jobs p ON p.cluster = f.cluster AND p.namespace = f.namespace AND p.pod = f.pod
    WHERE NOT p.deleted
    GROUP BY ALL
),
fs_json AS (
    SELECT cluster, namespace, job,
           -- keys in a fixed order (json_group_object's follows the hash table: evidence changed between builds)
           to_json(map_from_entries(list((reason, nodes) ORDER BY reason) FILTER (WHERE reason IS NOT NULL)))
               AS failed_reasons,
           min(first_at) AS first_failed_at
    FROM fs GROUP BY ALL
),
idle AS (
    SELECT cluster, namespace, job, coalesce(sum(gpus), 0) AS running_gpus
    FROM intermediate.int_pod_jobs WHERE NOT deleted AND phase = 'Running'
    GROUP BY ALL
),
timed AS (
    SELECT j.*, pg.phase, pg.scheduled_message,
           -- The current Workload's admission, unless the live pods are older (a run Kueue did not admit);
           -- with no live pods yet (a Job run again under its name), never an earlier run's pods.
           coalesce(CASE WHEN j.admitted_at >= j.run_started_at - INTERVAL 1 MINUTE OR j.run_started_at IS NULL
                         THEN j.admitted_at END,
                    j.run_started_at, pg.created_at, j.created_at) AS started_at,
           -- The gang object's own scheduled time counts only for the current run (not a recreated run's old group).
           least(j.all_bound_at, CASE WHEN pg.scheduled_at >= j.run_started_at - INTERVAL 1 MINUTE
                                        OR j.run_started_at IS NULL THEN pg.scheduled_at END) AS assembled_at,
           j.bound_before_capture AND NOT coalesce(pg.scheduled_at < j.all_bound_at, false) AS before_capture
    FROM j
    LEFT JOIN pg ON pg.cluster = j.cluster AND pg.namespace = j.namespace AND pg.name = j.pod_group
)
SELECT
    t.cluster, t.namespace, t.job, t.pod_group, t.gang_system, t.gang_size, t.pods, t.pods_bound, t.pods_running, t.gpus,
    t.started_at AS assembly_started_at,
    t.assembled_at,
    t.assembled_at IS NOT NULL AND t.before_capture AS assembled_before_capture,
    t.all_running_at,
    epoch(coalesce(t.assembled_at, t.as_of) - t.started_at) AS assembly_s,
    CASE WHEN NOT t.before_capture AND NOT t.running_before_capture
         THEN greatest(epoch(t.all_running_at - t.assembled_at), 0) END AS start_up_s,
    coalesce(t.schedule_timeout_s, getvariable('gang_timeout_s')) AS timeout_s,
    CASE WHEN t.assembled_at IS NULL THEN epoch(t.as_of - t.started_at)
         WHEN t.before_capture THEN 0
         ELSE epoch(t.assembled_at - t.started_at) END > coalesce(t.schedule_timeout_s, getvariable('gang_timeout_s'))
        AS timed_out,
    t.phase,
    t.scheduled_message AS group_message,
    f.failed_reasons,
    f.first_failed_at,
    CASE WHEN t.assembled_at IS NULL AND t.pods_running < t.gang_size THEN coalesce(i.running_gpus, 0) ELSE 0 END
        AS idle_gpus
FROM timed t
LEFT JOIN fs_json f ON f.cluster = t.cluster AND f.namespace = t.namespace AND f.job = t.job
LEFT JOIN idle i ON i.cluster = t.cluster AND i.namespace = t.namespace AND i.job = t.job
WHERE t.state <> 'finished' OR t.all_running_at IS NOT NULL
