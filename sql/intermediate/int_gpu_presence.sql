-- materialized: incremental
-- watermark: ts
-- watermark_from: staging.stg_metric_signals.ts
-- lookback_s: 120
-- Which GPUs reported in each minute (any per-GPU signal), so a GPU whose series stop while the same
-- node's other GPUs keep reporting can be told from a whole node's exporter going silent.
-- column: cluster: the GPU
-- column: node: the GPU
-- column: gpu: the GPU
-- column: ts: minute bucket
-- column: samples: samples in the minute
-- column: namespace: the pod the GPU was allocated to in that minute (dcgm-exporter pod labels)
-- column: pod: the pod the GPU was allocated to in that minute (dcgm-exporter pod labels)
SELECT cluster, node, gpu, bucket AS ts, samples, namespace, pod
FROM (
    -- Buckets are time_bucket(width, ts)'s (origin 2000-01-03 00:00 UTC; data after it) computed on integer
    -- microseconds: several times faster than time_bucket on TIMESTAMPTZ (the time-zone library).
    SELECT cluster, node, gpu, make_timestamptz(us - (us - 946857600000000) % 60000000) AS bucket, count(*) AS samples,
           max(namespace) AS namespace, max(pod) AS pod
    FROM (SELECT *, epoch_us(ts) AS us FROM staging.stg_metric_signals)
    WHERE gpu IS NOT NULL AND node IS NOT NULL
      AND ts > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
    GROUP BY ALL
)
WHERE bucket > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
