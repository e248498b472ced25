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
    -- Buckets are time_bucket(width, ts)'s (origin 2000-01-03 00:00 UTC; data after it) computed on integer
    -- microseconds: several times faster than time_bucket on TIMESTAMPTZ (the time-zone library).
    SELECT cluster, node, signal, make_timestamptz(us - (us - 946857600000000) % width_us) AS bucket,
           avg(value) * count(DISTINCT coalesce(gpu, device, metric)) AS value,
           count(DISTINCT coalesce(gpu, device, metric)) AS series
    FROM (SELECT *, epoch_us(ts) AS us, (getvariable('bucket_s') * 1000000)::BIGINT AS width_us
          FROM staging.stg_metric_signals)
    WHERE signal IN ('nvlink_bw', 'pcie_bw', 'ib_bw') AND node IS NOT NULL AND value IS NOT NULL
      AND ts > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
    GROUP BY ALL
)
WHERE bucket > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
