-- materialized: incremental
-- watermark: ts
-- watermark_from: staging.stg_metric_signals.ts
-- lookback_s: 60
-- Training throughput series per time bucket (bucket_s): each series' mean in the bucket, keyed by the pod
-- or job_name it came with. Job attribution happens later (intermediate.int_job_throughput), because which
-- job a pod belongs to can change as objects land; this model only ever appends. Incremental.
-- column: cluster: cluster name
-- column: namespace: namespace of the pod / job
-- column: pod: pod label of the series (NULL when it only names a job)
-- column: job_name: job_name label of the series
-- column: ts: bucket start
-- column: value: mean throughput of the series in the bucket (items/s)
SELECT cluster, namespace, pod, job_name, bucket AS ts, value
FROM (
    -- Buckets are time_bucket(width, ts)'s (origin 2000-01-03 00:00 UTC; data after it) computed on integer
    -- microseconds: several times faster than time_bucket on TIMESTAMPTZ (the time-zone library).
    SELECT cluster, namespace, pod, job_name, make_timestamptz(us - (us - 946857600000000) % width_us) AS bucket,
           avg(value) AS value
    FROM (SELECT *, epoch_us(ts) AS us, (getvariable('bucket_s') * 1000000)::BIGINT AS width_us
          FROM staging.stg_metric_signals)
    WHERE signal = 'throughput' AND value IS NOT NULL
      AND ts > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
    GROUP BY ALL
)
WHERE bucket > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
