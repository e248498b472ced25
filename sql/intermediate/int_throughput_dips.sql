-- Throughput dips per job: runs of consecutive judged samples below throughput_ratio x baseline that last
-- at least throughput_min_samples samples. Pauses (below pause_ratio x baseline: checkpoint saves, evaluation
-- passes) are neither: they are skipped, so a slowdown with checkpoints in it is one run (CONTRACT section 4). One row per dip (an incident). A dip reaching the job's newest
-- sample is ongoing (ended_at NULL) while the job runs; it ends at the first sample back above the threshold,
-- or, when the job stopped running in it (finished, gone, preempted), one bucket after its last low sample.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: started_at: first sample of the dip; last_dip_at: its last low sample
-- column: held_at: the low sample that made the run throughput_min_samples long: when the condition holds
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
    WHERE judged AND NOT coalesce(pause, false)
    WINDOW w AS (PARTITION BY cluster, namespace, job ORDER BY ts)
),
runs AS (
    -- Only the run's last sample can lack a next one (it is the job's newest): then the dip is ongoing.
    -- (Not arg_max(next_ts, ts): DuckDB's arg_max skips a NULL arg and answered the last low sample's time.)
    SELECT cluster, namespace, job, grp, min(ts) AS started_at, max(ts) AS last_dip_at,
           list_sort(list(ts))[getvariable('throughput_min_samples')] AS held_at,
           CASE WHEN count(next_ts) = count(*) THEN max(next_ts) END AS ended_at,
           count(*) AS samples, any_value(baseline) AS baseline, min(ratio) AS min_ratio, avg(ratio) AS mean_ratio,
           min(value) AS min_value
    FROM t WHERE dip
    GROUP BY cluster, namespace, job, grp
)
SELECT r.cluster, r.namespace, r.job, r.started_at, r.last_dip_at, r.held_at,
       coalesce(r.ended_at, CASE WHEN j.state IS DISTINCT FROM 'running'
                                 THEN r.last_dip_at + to_seconds(getvariable('bucket_s')) END) AS ended_at,
       r.samples, r.baseline, r.min_ratio, r.mean_ratio, r.min_value
FROM runs r
LEFT JOIN intermediate.int_jobs j USING (cluster, namespace, job)
WHERE r.samples >= getvariable('throughput_min_samples')
