-- materialized: incremental
-- watermark: ts
-- watermark_from: staging.stg_metric_signals.ts
-- lookback_s: 60
-- Interconnect bandwidth per node, signal and time bucket (bucket_s), summed over the node's GPUs /
-- devices: each series' mean within the bucket, times the series count, so one late or doubled scrape
-- does not look like a drop. Built incrementally: a rebuild reads only samples after the last build.
-- A node with no samples has no rows: missing data, never a zero.
-- column: cluster: the node
-- column: node: the node
-- column: signal: nvlink_bw, pcie_bw or ib_bw
-- column: ts: bucket start
-- column: value: summed bandwidth in the bucket (units of the signal)
-- column: series: GPUs/devices that reported in the bucket
SELECT cluster, node, signal, bucket AS ts, value, series
FROM (
    SELECT cluster, node, signal,
           time_bucket(to_seconds(getvariable('bucket_s')), ts) AS bucket,
           avg(value) * count(DISTINCT coalesce(gpu, device, metric)) AS value,
           count(DISTINCT coalesce(gpu, device, metric)) AS series
    FROM staging.stg_metric_signals
    WHERE signal IN ('nvlink_bw', 'pcie_bw', 'ib_bw') AND node IS NOT NULL AND value IS NOT NULL
      AND ts > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
    GROUP BY ALL
)
WHERE bucket > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
