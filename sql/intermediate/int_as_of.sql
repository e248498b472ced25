-- The "now" of the data per cluster: the newest watch event or sample landed. Models measure waits
-- against it (not the wall clock) so replayed history classifies the same as live data.
-- column: cluster: cluster name
-- column: as_of: newest observed_at, or end of the newest GPU-presence minute / throughput bucket
SELECT cluster, max(t) AS as_of
FROM (
    SELECT cluster, max(observed_at) AS t FROM staging.stg_k8s_events GROUP BY cluster
    UNION ALL
    SELECT cluster, max(ts) + INTERVAL 1 MINUTE FROM intermediate.int_gpu_presence GROUP BY cluster
    UNION ALL
    SELECT cluster, max(ts) + to_seconds(getvariable('bucket_s')) FROM intermediate.int_throughput_buckets GROUP BY cluster
)
GROUP BY cluster
