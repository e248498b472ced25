-- Training throughput per job and time bucket, with the job's baseline (CONTRACT section 4): the median
-- of earlier runs of the same job (samples before the current run's pods were created) when there are any,
-- else the job's own median over its first steady window (baseline_start_s to baseline_end_s after all its
-- pods run, that time from the pods' own timestamps). A job first seen mid-run, whose steady window lies before
-- its first sample, takes the same length of window from its first observed sample: a steady job stays at
-- ratio 1 and a job slowing down after capture began is still below it. Samples attach to a job through their
-- pod, else (a pod deleted before gangscope saw it) through the Job controller's SuccessfulCreate Event naming
-- it, else through a job_name label in the namespace.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: ts: bucket start (bucket_s)
-- column: value: job throughput in the bucket (sum over the job's reporting series of their mean)
-- column: baseline: the job's baseline throughput
-- column: baseline_source: earlier_runs or steady_window
-- column: ratio: value / baseline
-- column: judged: the bucket is in the current run and past its warm-up, so a dip counts
-- column: dip: judged and pause_ratio <= ratio < throughput_ratio (a slowdown sample)
-- column: pause: ratio < pause_ratio: a pause (checkpoint, evaluation), not a slowdown; a long one is a stall
--   (intermediate.int_training_stalls)
WITH created AS (
    -- Pods gangscope never saw (deleted before it started watching) are still named by the Job controller's
    -- SuccessfulCreate Event on their Job ("Created pod: <name>"), which outlives them: an earlier run's samples.
    SELECT DISTINCT cluster, object_namespace AS namespace, object_name AS job,
           regexp_extract(message, '^Created pod: (.+)$', 1) AS pod
    FROM staging.stg_events
    WHERE reason = 'SuccessfulCreate' AND object_kind = 'Job' AND message LIKE 'Created pod: %'
),
per_series AS (
    SELECT m.cluster, m.namespace, m.ts, m.value, coalesce(p.job, c.job, m.job_name) AS job
    FROM intermediate.int_throughput_buckets m
    LEFT JOIN intermediate.int_pod_jobs p ON p.cluster = m.cluster AND p.namespace = m.namespace AND p.pod = m.pod
    LEFT JOIN created c ON p.pod IS NULL AND c.cluster = m.cluster AND c.namespace = m.namespace AND c.pod = m.pod
),
b AS (
    SELECT cluster, namespace, job, ts, sum(value) AS value FROM per_series WHERE job IS NOT NULL GROUP BY ALL
),
j AS (
    SELECT b.cluster, b.namespace, b.job, min(b.ts) AS first_ts,
           any_value(coalesce(j.run_started_at, '-infinity'::TIMESTAMPTZ)) AS run_start,
           any_value(j.all_running_at) AS all_running_at
    FROM b LEFT JOIN intermediate.int_jobs j USING (cluster, namespace, job)
    GROUP BY ALL
),
origin AS (
    SELECT j.*, f.first_run_ts, coalesce(j.all_running_at, f.first_run_ts) AS origin
    FROM j
    LEFT JOIN (SELECT b.cluster, b.namespace, b.job, min(b.ts) AS first_run_ts
               FROM b JOIN j USING (cluster, namespace, job) WHERE b.ts >= j.run_start GROUP BY ALL) f
      USING (cluster, namespace, job)
),
win AS (
    -- The steady window starts baseline_start_s after all pods run; for a job first seen mid-run (its window lies
    -- before the first sample), it starts at its first sample instead, so its baseline is what was observed.
    SELECT *, greatest(origin + to_seconds(getvariable('baseline_start_s')), first_run_ts) AS win_start FROM origin
),
base AS (
    SELECT o.cluster, o.namespace, o.job, o.origin, o.run_start,
           median(b.value) FILTER (WHERE b.ts < o.run_start) AS earlier,
           count(*) FILTER (WHERE b.ts < o.run_start) AS earlier_n,
           median(b.value) FILTER (WHERE b.ts >= o.win_start
                                     AND b.ts < o.win_start + to_seconds(getvariable('baseline_end_s')
                                                                         - getvariable('baseline_start_s'))) AS steady
    FROM win o JOIN b USING (cluster, namespace, job)
    GROUP BY ALL
)
SELECT b.cluster, b.namespace, b.job, b.ts, b.value,
       CASE WHEN x.earlier_n >= 3 THEN x.earlier ELSE x.steady END AS baseline,
       CASE WHEN x.earlier_n >= 3 THEN 'earlier_runs' ELSE 'steady_window' END AS baseline_source,
       b.value / nullif(CASE WHEN x.earlier_n >= 3 THEN x.earlier ELSE x.steady END, 0) AS ratio,
       b.ts >= x.run_start AND b.ts >= x.origin + to_seconds(getvariable('baseline_start_s')) AS judged,
       b.ts >= x.run_start AND b.ts >= x.origin + to_seconds(getvariable('baseline_start_s'))
           AND b.value < getvariable('throughput_ratio') * CASE WHEN x.earlier_n >= 3 THEN x.earlier ELSE x.steady END
           AND b.value >= getvariable('pause_ratio') * CASE WHEN x.earlier_n >= 3 THEN x.earlier ELSE x.steady END
           AS dip,
       b.value < getvariable('pause_ratio') * CASE WHEN x.earlier_n >= 3 THEN x.earlier ELSE x.steady END AS pause
FROM b JOIN base x USING (cluster, namespace, job)
