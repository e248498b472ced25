-- GPU-hours held idle per job and cause: a partial gang start (members running while the gang is
-- incomplete, until it completes or until now) and topology misplacement (the GPUs of a misplaced job for
-- the length of its slowdown, times the share of throughput lost).
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: cause: partial_gang or misplacement
-- column: gpus: GPUs involved
-- column: started_at: period counted (ended_at NULL while ongoing; counted to the data's as_of)
-- column: ended_at: period counted (ended_at NULL while ongoing; counted to the data's as_of)
-- column: idle_gpu_hours: GPU-hours lost
WITH data_as_of AS (SELECT * FROM intermediate.int_as_of),
partial AS (
    SELECT g.cluster, g.namespace, g.job, 'partial_gang' AS cause, g.idle_gpus AS gpus,
           min(p.first_running_at) AS started_at, g.all_running_at AS ended_at, a.as_of
    FROM intermediate.int_gang g
    JOIN intermediate.int_pod_jobs p ON p.cluster = g.cluster AND p.namespace = g.namespace AND p.job = g.job
    JOIN data_as_of a ON a.cluster = g.cluster
    WHERE g.idle_gpus > 0 AND NOT p.deleted AND p.first_running_at IS NOT NULL
    GROUP BY ALL
),
misplaced AS (
    SELECT f.cluster, f.namespace, f.job, 'misplacement' AS cause, j.gpus, f.started_at, f.ended_at, a.as_of,
           1 - CAST(f.evidence->>'$.throughput.mean_ratio' AS DOUBLE) AS lost
    FROM marts.findings f
    JOIN intermediate.int_jobs j USING (cluster, namespace, job)
    JOIN data_as_of a ON a.cluster = f.cluster
    WHERE f.root_cause = 'topology_misplacement'
)
SELECT cluster, namespace, job, cause, gpus, started_at, ended_at,
       gpus * epoch(coalesce(ended_at, as_of) - started_at) / 3600 AS idle_gpu_hours
FROM partial
UNION ALL
SELECT cluster, namespace, job, cause, gpus, started_at, ended_at,
       gpus * greatest(lost, 0) * epoch(coalesce(ended_at, as_of) - started_at) / 3600
FROM misplaced
