-- Throughput dips per job: runs of consecutive judged samples below throughput_ratio x baseline that last
-- at least throughput_min_samples samples. One row per dip (an incident).
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: started_at: first sample of the dip; last_dip_at: its last low sample
-- column: ended_at: first sample back above the threshold (NULL while ongoing)
-- column: samples: low samples in the run
-- column: baseline: how deep it went
-- column: min_ratio: how deep it went
-- column: mean_ratio: how deep it went
-- column: min_value: how deep it went
WITH t AS (
    SELECT *, row_number() OVER w - row_number() OVER (PARTITION BY cluster, namespace, job, dip ORDER BY ts) AS grp,
           lead(ts) OVER w AS next_ts
    FROM intermediate.int_job_throughput
    WHERE judged
    WINDOW w AS (PARTITION BY cluster, namespace, job ORDER BY ts)
),
runs AS (
    SELECT cluster, namespace, job, grp, min(ts) AS started_at, max(ts) AS last_dip_at, arg_max(next_ts, ts) AS ended_at,
           count(*) AS samples, any_value(baseline) AS baseline, min(ratio) AS min_ratio, avg(ratio) AS mean_ratio,
           min(value) AS min_value
    FROM t WHERE dip
    GROUP BY cluster, namespace, job, grp
)
SELECT cluster, namespace, job, started_at, last_dip_at, ended_at, samples, baseline, min_ratio, mean_ratio, min_value
FROM runs
WHERE samples >= getvariable('throughput_min_samples')
