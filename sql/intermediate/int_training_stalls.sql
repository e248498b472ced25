-- Training that stopped making progress while its gang runs (CONTRACT section 4, training_stalled): the shape of a hung
-- collective before a watchdog kills it. In the job's current run, after every member ran, its throughput had been
-- reported and then stopped for stall_s or more: the gauge fell under pause_ratio x baseline, the counter stopped
-- rising (its rate is 0), or the series disappeared while the pods stayed Running. A shorter pause is normal life
-- (checkpoints, evaluation), however often it repeats. A stall counts only while the monitoring shows itself alive
-- through at least half of its minutes (the job's own zero samples or any job's throughput in the cluster, its
-- nodes' GPUs): gangscope or a scraper that stopped is missing data, not a stall. A stall still going needs the job running now; one that ended, progress again.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: stalled_from: first moment without progress (the bucket after the last one with progress)
-- column: ended_at: first bucket with progress again (NULL while stalled)
-- column: stalled_s: seconds without progress (to the data's now while ongoing)
-- column: last_progress_at: the last bucket with progress, and its throughput
-- column: last_value: the last bucket with progress, and its throughput
-- column: baseline: the job's baseline throughput
-- column: how: reported_zero (samples kept coming, about 0: a gauge at 0, a counter that stopped rising) or
--   stopped_reporting (the series disappeared)
-- column: gpu_util: mean utilisation and power of the job's GPUs while stalled (a hung NCCL collective keeps the
--   GPUs busy at ~100 %, power falls)
-- column: gpu_power: mean utilisation and power of the job's GPUs while stalled (a hung NCCL collective keeps the
--   GPUs busy at ~100 %, power falls)
WITH a AS (SELECT * FROM intermediate.int_as_of),
j AS (SELECT * FROM intermediate.int_jobs),
tp AS (
    SELECT t.cluster, t.namespace, t.job, t.ts, t.value, t.baseline,
           coalesce(t.ratio >= getvariable('pause_ratio'), t.value > 0) AS progress
    FROM intermediate.int_job_throughput t
    JOIN j USING (cluster, namespace, job)
    WHERE j.all_running_at IS NOT NULL AND t.ts >= j.all_running_at
      AND t.ts >= coalesce(j.run_started_at, '-infinity'::TIMESTAMPTZ)
),
prog AS (
    SELECT *, lead(ts) OVER (PARTITION BY cluster, namespace, job ORDER BY ts) AS next_ts
    FROM tp WHERE progress
),
own_last AS (
    SELECT cluster, namespace, job, max(ts) AS last_ts FROM tp GROUP BY ALL
),
others AS (
    -- the newest throughput bucket of the cluster (any job): the training scrapes are alive until then
    SELECT cluster, max(ts) AS last_ts FROM intermediate.int_throughput_buckets GROUP BY ALL
),
job_gpu_minutes AS (
    -- The minutes in which the job's nodes reported GPUs since all its members ran (no stall is looked for before),
    -- joined on the node: a list_contains(j.nodes, node) join tried every job against every GPU-minute of the
    -- history (6.9 s of a 20.6 s scheduled build at 1,280 nodes, issue 37).
    SELECT DISTINCT n.cluster, n.namespace, n.job, g.ts
    FROM (SELECT DISTINCT cluster, namespace, job, all_running_at, unnest(nodes) AS node
          FROM j WHERE all_running_at IS NOT NULL) n
    JOIN intermediate.int_gpu_presence g
      ON g.cluster = n.cluster AND g.node = n.node AND g.ts >= n.all_running_at - INTERVAL 1 MINUTE
),
gpus_alive AS (
    SELECT cluster, namespace, job, max(ts) + INTERVAL 1 MINUTE AS last_ts FROM job_gpu_minutes GROUP BY ALL
),
alive_minutes AS (
    -- Minutes in which the monitoring reported something a stall can be told by: any throughput in the cluster, or
    -- the job's nodes' GPUs.
    SELECT DISTINCT cluster, NULL::VARCHAR AS namespace, NULL::VARCHAR AS job,
           make_timestamptz(epoch_us(ts) - (epoch_us(ts) - 946857600000000) % 60000000) AS m
    FROM intermediate.int_throughput_buckets
    UNION
    SELECT cluster, namespace, job, ts FROM job_gpu_minutes
),
gaps AS (
    SELECT p.cluster, p.namespace, p.job, p.ts AS last_progress_at, p.value AS last_value, p.baseline,
           p.ts + to_seconds(getvariable('bucket_s')) AS stalled_from, p.next_ts AS ended_at,
           -- how far the data reaches for this job: the data's now, but no further than something reported
           least(a.as_of, greatest(o.last_ts + to_seconds(getvariable('bucket_s')),
                                   c.last_ts + to_seconds(getvariable('bucket_s')), g.last_ts)) AS alive_until,
           EXISTS (SELECT 1 FROM tp x WHERE x.cluster = p.cluster AND x.namespace = p.namespace AND x.job = p.job
                   AND x.ts > p.ts AND x.ts < coalesce(p.next_ts, 'infinity'::TIMESTAMPTZ)) AS own_samples_after,
           jj.state
    FROM prog p
    JOIN a ON a.cluster = p.cluster
    JOIN j jj ON jj.cluster = p.cluster AND jj.namespace = p.namespace AND jj.job = p.job
    LEFT JOIN own_last o ON o.cluster = p.cluster AND o.namespace = p.namespace AND o.job = p.job
    LEFT JOIN others c ON c.cluster = p.cluster
    LEFT JOIN gpus_alive g ON g.cluster = p.cluster AND g.namespace = p.namespace AND g.job = p.job
),
covered AS (
    SELECT g.*, (SELECT count(DISTINCT m.m) FROM alive_minutes m
                 WHERE m.cluster = g.cluster AND (m.job IS NULL OR (m.namespace = g.namespace AND m.job = g.job))
                   AND m.m >= g.stalled_from - INTERVAL 1 MINUTE AND m.m < coalesce(g.ended_at, g.alive_until))
                    AS alive_minutes
    FROM gaps g
),
stalls AS (
    SELECT *, epoch(coalesce(ended_at, alive_until) - stalled_from) AS stalled_s
    FROM covered
    WHERE ((ended_at IS NOT NULL AND epoch(ended_at - stalled_from) >= getvariable('stall_s'))
           OR (ended_at IS NULL AND state = 'running' AND epoch(alive_until - stalled_from) >= getvariable('stall_s')))
      AND alive_minutes >= 0.5 * epoch(coalesce(ended_at, alive_until) - stalled_from) / 60
),
util AS (
    SELECT s.cluster, s.namespace, s.job, s.stalled_from, avg(m.gpu_util) AS gpu_util, avg(m.gpu_power) AS gpu_power
    FROM stalls s
    JOIN (SELECT DISTINCT cluster, namespace, job, pod FROM intermediate.int_pod_jobs) p
      ON p.cluster = s.cluster AND p.namespace = s.namespace AND p.job = s.job
    JOIN intermediate.int_gpu_minutes m ON m.cluster = p.cluster AND m.namespace = p.namespace AND m.pod = p.pod
     AND m.ts >= s.stalled_from AND m.ts < coalesce(s.ended_at, s.alive_until)
    GROUP BY ALL
)
SELECT s.cluster, s.namespace, s.job, s.stalled_from, s.ended_at, s.stalled_s, s.last_progress_at, s.last_value,
       s.baseline, CASE WHEN s.own_samples_after THEN 'reported_zero' ELSE 'stopped_reporting' END AS how,
       u.gpu_util, u.gpu_power
FROM stalls s
LEFT JOIN util u USING (cluster, namespace, job, stalled_from)
