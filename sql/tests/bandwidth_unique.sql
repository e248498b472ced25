-- intermediate.int_node_bandwidth: one row per node, signal and bucket, even after incremental rebuilds
SELECT cluster, node, signal, ts, count(*) AS n FROM intermediate.int_node_bandwidth GROUP BY ALL HAVING count(*) > 1
