-- Containers of a job that failed (CONTRACT section 4, workload_crash): one row per job with its crashes. A crash is a
-- container of the job's pods (not an init container: those are start-up) that terminated with a non-zero exit code
-- (state or lastState.terminated: Error, OOMKilled, ContainerCannotRun, StartError, ...), a container waiting in
-- CrashLoopBackOff, or the job's controller giving up on it (Job Failed / FailureTarget BackoffLimitExceeded,
-- PodFailurePolicy, MaxFailedIndexesExceeded, FailedIndexes; JobSet Failed, JobSet restarts). A container that
-- exited after its pod was deleted or disrupted (DisruptionTarget, the kubelet's eviction, a node shutdown) was
-- stopped, not crashed: it is left out here (node_failure and preemption name those). Exit code 0 is success.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: first_failed_at: the first crash (finishedAt of the first non-zero exit; the controller's decision when no
--   container was seen failing)
-- column: first_pod: the first rank that failed: pod, rank (completion index), container, node, exit code, reason
-- column: first_rank: the first rank that failed: pod, rank (completion index), container, node, exit code, reason
-- column: first_container: the first rank that failed: pod, rank (completion index), container, node, exit code,
--   reason
-- column: first_node: the first rank that failed: pod, rank (completion index), container, node, exit code, reason
-- column: first_exit_code: the first rank that failed: pod, rank (completion index), container, node, exit code,
--   reason
-- column: first_reason: the first rank that failed: pod, rank (completion index), container, node, exit code, reason
-- column: last_failed_at: the latest crash
-- column: failures: distinct container terminations with a non-zero exit code
-- column: oom_kills: of those, OOMKilled
-- column: exit_codes: distinct exit codes seen (sorted)
-- column: restarts: sum over the job's live containers of restartCount (restarts in place)
-- column: crash_looping: pods whose container waits in CrashLoopBackOff now (count)
-- column: crash_loop_message: the kubelet's back-off message of one of them
-- column: controller_kind: the Job or JobSet that gave up, its reason, message and time
-- column: controller_reason: the Job or JobSet that gave up, its reason, message and time
-- column: controller_message: the Job or JobSet that gave up, its reason, message and time
-- column: controller_failed_at: the Job or JobSet that gave up, its reason, message and time
-- column: jobset_restarts: JobSet status.restarts (recreations of all its Jobs)
-- column: recovered_at: when the job ran again with every member after its last crash, once that held (stall_s
--   running with no crash since, or it completed); NULL while not, or when its controller gave up
-- column: crashes: JSON list of up to 10 crashes {pod, rank, container, node, exit_code, reason, at}, first first
WITH pj AS (SELECT * FROM intermediate.int_pod_jobs),
terms AS (
    -- Every termination seen, current or previous (lastState), once.
    SELECT DISTINCT cluster, namespace, pod, pod_uid, container, node, exit_code, reason, finished_at
    FROM (
        SELECT cluster, namespace, pod, pod_uid, container, node, exit_code, reason, finished_at
        FROM staging.stg_container_states WHERE NOT init AND state = 'terminated'
        UNION ALL
        SELECT cluster, namespace, pod, pod_uid, container, node, last_exit_code, last_reason, last_finished_at
        FROM staging.stg_container_states WHERE NOT init AND last_exit_code IS NOT NULL
    )
    WHERE exit_code <> 0
),
crashes AS (
    SELECT t.*, p.job, p.completion_index AS rank, coalesce(t.node, p.node) AS on_node
    FROM terms t
    JOIN pj p ON p.cluster = t.cluster AND p.namespace = t.namespace AND p.pod = t.pod
     AND p.pod_uid IS NOT DISTINCT FROM t.pod_uid
    -- stopped, not crashed: exited after its deletion was requested or it was disrupted or ended by its node
    WHERE NOT (coalesce(t.finished_at >= least(p.deletion_requested_at, p.disruption_at) - INTERVAL 5 SECOND, false)
               OR (p.disruption_reason IS NOT NULL AND t.finished_at IS NULL)
               OR coalesce(p.status_reason IN ('Evicted', 'Terminated', 'NodeShutdown', 'NodeLost', 'Preempting'),
                           false))
),
crash_agg AS (
    SELECT cluster, namespace, job,
           min(finished_at) AS first_at, max(finished_at) AS last_at, count(*) AS failures,
           count(*) FILTER (WHERE reason = 'OOMKilled') AS oom_kills,
           list_sort(list(DISTINCT exit_code)) AS exit_codes,
           list({'pod': pod, 'rank': rank, 'container': container, 'node': on_node, 'exit_code': exit_code,
                 'reason': reason, 'at': finished_at} ORDER BY finished_at NULLS LAST, pod, container) AS crashes
    FROM crashes GROUP BY ALL
),
backoffs AS (
    -- The kubelet's crash-loop Event outlives the container states gangscope did not see: a pod first seen in an
    -- initial list shows only its last termination, its BackOff Event when the loop began.
    SELECT p.cluster, p.namespace, p.job, min(e.first_at) AS first_at
    FROM staging.stg_events e
    JOIN pj p ON p.cluster = e.cluster AND p.namespace = e.object_namespace AND p.pod = e.object_name
    WHERE e.object_kind = 'Pod' AND e.reason = 'BackOff' AND e.message ILIKE 'Back-off restarting failed container%'
    GROUP BY ALL
),
latest AS (
    -- Each live container's state now.
    SELECT s.*, p.job
    FROM staging.stg_container_states s
    JOIN pj p ON p.cluster = s.cluster AND p.namespace = s.namespace AND p.pod = s.pod
     AND p.pod_uid IS NOT DISTINCT FROM s.pod_uid AND NOT p.deleted
    WHERE NOT s.init
    QUALIFY row_number() OVER (PARTITION BY s.cluster, s.namespace, s.pod, s.pod_uid, s.container
                               ORDER BY s.last_seen_at DESC, s.restart_count DESC) = 1
),
loops AS (
    SELECT cluster, namespace, job, sum(restart_count) AS restarts,
           count(DISTINCT pod) FILTER (WHERE reason = 'CrashLoopBackOff') AS crash_looping,
           min(message) FILTER (WHERE reason = 'CrashLoopBackOff') AS crash_loop_message,
           min(first_seen_at) FILTER (WHERE reason = 'CrashLoopBackOff') AS loop_seen_at,
           max(started_at) FILTER (WHERE state = 'running' OR (state = 'terminated' AND exit_code = 0))
               AS last_started_at
    FROM latest GROUP BY ALL
),
controller AS (
    -- The Job / JobSet that gave up (a child object counts for its submitted object: stg_job_objects.parent_job).
    SELECT o.cluster, o.namespace, coalesce(o.parent_job, o.name) AS job,
           arg_min(o.kind, o.failed_at) FILTER (WHERE o.failed_reason IS NOT NULL) AS kind,
           arg_min(o.failed_reason, o.failed_at) FILTER (WHERE o.failed_reason IS NOT NULL) AS reason,
           arg_min(o.failed_message, o.failed_at) FILTER (WHERE o.failed_reason IS NOT NULL) AS message,
           min(o.failed_at) FILTER (WHERE o.failed_reason IS NOT NULL) AS failed_at,
           max(o.restarts) AS jobset_restarts, min(o.restarting_at) AS restarting_at
    FROM staging.stg_job_objects o
    WHERE (o.failed_reason IN ('BackoffLimitExceeded', 'PodFailurePolicy', 'MaxFailedIndexesExceeded', 'FailedIndexes',
                               'FailedJobs', 'ReachedMaxRestarts', 'FailJobSetFailurePolicyAction',
                               'PyTorchJobFailed', 'MPIJobFailed')
           OR o.restarts > 0)
    GROUP BY ALL
)
SELECT j.cluster, j.namespace, j.job,
       least(coalesce(c.first_at, l.loop_seen_at, k.failed_at, k.restarting_at, j.first_seen), b.first_at)
           AS first_failed_at,
       c.crashes[1].pod AS first_pod, c.crashes[1].rank AS first_rank, c.crashes[1].container AS first_container,
       c.crashes[1].node AS first_node, c.crashes[1].exit_code AS first_exit_code, c.crashes[1].reason AS first_reason,
       c.last_at AS last_failed_at,
       coalesce(c.failures, 0) AS failures, coalesce(c.oom_kills, 0) AS oom_kills, c.exit_codes,
       coalesce(l.restarts, 0) AS restarts, coalesce(l.crash_looping, 0) AS crash_looping, l.crash_loop_message,
       k.kind AS controller_kind, k.reason AS controller_reason, k.message AS controller_message,
       k.failed_at AS controller_failed_at, k.jobset_restarts,
       -- A restart is no recovery until it holds: running stall_s after it with no crash since (a crash loop
       -- restarts every few minutes), or the job completed.
       CASE WHEN k.failed_at IS NULL AND coalesce(l.crash_looping, 0) = 0
                 AND greatest(j.all_running_at, l.last_started_at) > coalesce(c.last_at, l.loop_seen_at)
                 AND (j.state = 'finished'
                      OR (j.state = 'running' AND epoch((SELECT as_of FROM intermediate.int_as_of x
                                                          WHERE x.cluster = j.cluster)
                                                         - greatest(j.all_running_at, l.last_started_at))
                                                  >= getvariable('stall_s')))
            THEN greatest(j.all_running_at, l.last_started_at) END AS recovered_at,
       to_json(c.crashes[1:10]) AS crashes
FROM intermediate.int_jobs j
LEFT JOIN crash_agg c USING (cluster, namespace, job)
LEFT JOIN loops l USING (cluster, namespace, job)
LEFT JOIN controller k USING (cluster, namespace, job)
LEFT JOIN backoffs b USING (cluster, namespace, job)
-- A crash, a crash loop, or a controller that gave up (or a JobSet that restarted) with no crash seen: only the
-- controller's word (its pods gone before gangscope saw them fail).
WHERE c.failures > 0 OR l.crash_looping > 0
   OR ((k.failed_at IS NOT NULL OR k.jobset_restarts > 0) AND NOT EXISTS (SELECT 1 FROM pj p WHERE p.cluster = j.cluster
                                               AND p.namespace = j.namespace AND p.job = j.job
                                               AND (p.disruption_reason IS NOT NULL
                                                    OR p.deletion_requested_at IS NOT NULL)))
