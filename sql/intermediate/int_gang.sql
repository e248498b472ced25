-- Gang timeline per job that is admitted or not under Kueue: when assembly started (admission, else
-- creation), the timeout that applies (PodGroup scheduleTimeoutSeconds, else gang_timeout_s), when all
-- members first ran, and what held it back (gang object phase/condition, FailedScheduling reasons).
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: pod_group: identity
-- column: gang_system: identity
-- column: gang_size: members needed (intermediate.int_jobs)
-- column: pods: live pods
-- column: pods_running: live pods Running now
-- column: gpus: GPUs requested by live pods
-- column: assembly_started_at: Kueue admission, else creation of the gang object or first pod
-- column: all_running_at: when the last needed member first ran (NULL while incomplete)
-- column: assembly_s: seconds from assembly_started_at to all_running_at (to as_of while incomplete)
-- column: timeout_s: the timeout that applies
-- column: timed_out: assembly took (or is taking) longer than timeout_s
-- column: phase: gang object phase now (coscheduling/Volcano phase, native Scheduled/Unschedulable/Pending)
-- column: group_message: native PodGroupScheduled / Volcano condition message
-- column: failed_reasons: FailedScheduling reasons of the job's pods as a JSON object reason -> max node count
-- column: idle_gpus: GPUs of members already running while the gang is incomplete (a partial start)
WITH j AS (
    SELECT j.*, a.as_of, ad.admitted_at
    FROM intermediate.int_jobs j
    JOIN intermediate.int_as_of a USING (cluster)
    LEFT JOIN intermediate.int_admission ad USING (cluster, namespace, job)
    WHERE j.workload IS NULL OR ad.admitted_at IS NOT NULL
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
)
SELECT
    j.cluster, j.namespace, j.job, j.pod_group, j.gang_system, j.gang_size, j.pods, j.pods_running, j.gpus,
    coalesce(CASE WHEN j.admitted_at >= j.run_started_at - INTERVAL 1 MINUTE THEN j.admitted_at END,
             j.run_started_at, pg.created_at, j.created_at) AS assembly_started_at,
    j.all_running_at,
    epoch(coalesce(j.all_running_at, j.as_of) - coalesce(
        CASE WHEN j.admitted_at >= j.run_started_at - INTERVAL 1 MINUTE THEN j.admitted_at END,
        j.run_started_at, pg.created_at, j.created_at)) AS assembly_s,
    coalesce(j.schedule_timeout_s, getvariable('gang_timeout_s')) AS timeout_s,
    epoch(coalesce(j.all_running_at, j.as_of) - coalesce(
        CASE WHEN j.admitted_at >= j.run_started_at - INTERVAL 1 MINUTE THEN j.admitted_at END,
        j.run_started_at, pg.created_at, j.created_at))
        > coalesce(j.schedule_timeout_s, getvariable('gang_timeout_s')) AS timed_out,
    pg.phase,
    pg.scheduled_message AS group_message,
    f.failed_reasons,
    f.first_failed_at,
    CASE WHEN j.all_running_at IS NULL AND j.pods_running < j.gang_size THEN coalesce(i.running_gpus, 0) ELSE 0 END
        AS idle_gpus
FROM j
LEFT JOIN pg ON pg.cluster = j.cluster AND pg.namespace = j.namespace AND pg.name = j.pod_group
LEFT JOIN fs_json f ON f.cluster = j.cluster AND f.namespace = j.namespace AND f.job = j.job
LEFT JOIN idle i ON i.cluster = j.cluster AND i.namespace = j.namespace AND i.job = j.job
WHERE j.state <> 'finished' OR j.all_running_at IS NOT NULL
