-- Node health: interconnect and GPU trouble per node, ranked by a trouble score (bandwidth drops seen by
-- jobs, link error samples, IB ports down, GPU faults). Nodes whose exporters are silent have no rows of
-- trouble: missing data is not a fault.
-- column: cluster: the node
-- column: node: the node
-- column: bandwidth_drops: job dips in which this node's bandwidth fell below bandwidth_ratio x baseline
-- column: link_error_samples: samples with NVLink / IB error counters rising
-- column: port_down_samples: samples with an IB port not ACTIVE
-- column: xid_faults: hardware XID faults (devices x codes); xid_codes: the codes
-- column: ecc_faults: devices with double-bit ECC / row-remap failures
-- column: missing_gpus: GPUs that stopped reporting while the node's others did
-- column: interconnect_score: bandwidth_drops * 3 + link error samples + port down samples
-- column: trouble_score: interconnect_score + 10 per GPU fault
-- column: last_seen: last sample of the node
WITH nodes AS (
    SELECT cluster, name AS node FROM staging.stg_nodes
    UNION SELECT DISTINCT cluster, node FROM intermediate.int_node_bandwidth
),
drops AS (
    SELECT i.cluster, d->>'$.node' AS node, count(*) AS bandwidth_drops
    FROM intermediate.int_interconnect i, unnest(CAST(i.bandwidth_drops AS JSON[])) AS t(d)
    GROUP BY ALL
),
ev AS (
    SELECT cluster, node,
           count(*) FILTER (WHERE signal IN ('nvlink_errors', 'ib_errors')) AS link_error_samples,
           count(*) FILTER (WHERE signal = 'ib_port_state') AS port_down_samples
    FROM intermediate.int_signal_events GROUP BY ALL
),
gf AS (
    SELECT cluster, node,
           count(*) FILTER (WHERE kind = 'xid') AS xid_faults,
           list_sort(list(DISTINCT code) FILTER (WHERE kind = 'xid')) AS xid_codes,
           count(*) FILTER (WHERE kind = 'ecc_dbe') AS ecc_faults,
           count(*) FILTER (WHERE kind = 'gpu_missing') AS missing_gpus
    FROM intermediate.int_gpu_faults GROUP BY ALL
),
seen AS (
    SELECT cluster, node, max(ts) AS last_seen FROM intermediate.int_gpu_presence GROUP BY ALL
)
SELECT n.cluster, n.node,
       coalesce(d.bandwidth_drops, 0) AS bandwidth_drops,
       coalesce(e.link_error_samples, 0) AS link_error_samples,
       coalesce(e.port_down_samples, 0) AS port_down_samples,
       coalesce(g.xid_faults, 0) AS xid_faults, coalesce(g.xid_codes, []) AS xid_codes,
       coalesce(g.ecc_faults, 0) AS ecc_faults, coalesce(g.missing_gpus, 0) AS missing_gpus,
       3 * coalesce(d.bandwidth_drops, 0) + coalesce(e.link_error_samples, 0) + coalesce(e.port_down_samples, 0)
           AS interconnect_score,
       3 * coalesce(d.bandwidth_drops, 0) + coalesce(e.link_error_samples, 0) + coalesce(e.port_down_samples, 0)
           + 10 * (coalesce(g.xid_faults, 0) + coalesce(g.ecc_faults, 0) + coalesce(g.missing_gpus, 0)) AS trouble_score,
       s.last_seen
FROM nodes n
LEFT JOIN drops d USING (cluster, node)
LEFT JOIN ev e USING (cluster, node)
LEFT JOIN gf g USING (cluster, node)
LEFT JOIN seen s USING (cluster, node)
