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
    SELECT cluster, node, gpu, time_bucket(INTERVAL 1 MINUTE, ts) AS bucket, count(*) AS samples,
           max(namespace) AS namespace, max(pod) AS pod
    FROM staging.stg_metric_signals
    WHERE gpu IS NOT NULL AND node IS NOT NULL
      AND ts > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
    GROUP BY ALL
)
WHERE bucket > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
