-- Interconnect evidence per throughput dip: on the job's nodes, during the dip (from two buckets before
-- it), NVLink / PCIe / InfiniBand bandwidth whose median fell below bandwidth_ratio x that node's own
-- baseline for this job (its median over the job's steady window) and by clearly more than the job's
-- throughput did (below bandwidth_vs_throughput x the dip's mean throughput ratio: traffic that falls only
-- as much as the work is a consequence of the slowdown, not its cause), link error counters rising, or
-- an IB port leaving ACTIVE.
-- Nodes without samples contribute nothing: a silent exporter is missing data, not a fault.
-- column: cluster: the dip (intermediate.int_throughput_dips)
-- column: namespace: the dip (intermediate.int_throughput_dips)
-- column: job: the dip (intermediate.int_throughput_dips)
-- column: dip_started_at: the dip (intermediate.int_throughput_dips)
-- column: bandwidth_drops: JSON list of {node, signal, baseline, dip_median, min_value, ratio, at}
-- column: link_errors: JSON list of {node, signal, device, max_rate, at}
-- column: ports_down: JSON list of {node, device, state, at}
-- column: signal_nodes: nodes with any of the above
-- column: first_signal_at: earliest of them
WITH d AS (
    SELECT d.*, j.nodes, j.all_running_at, j.run_started_at
    FROM intermediate.int_throughput_dips d JOIN intermediate.int_jobs j USING (cluster, namespace, job)
),
dn AS (
    SELECT d.cluster, d.namespace, d.job, d.started_at AS dip_started_at,
           d.started_at - 2 * to_seconds(getvariable('bucket_s')) AS win_start,
           coalesce(d.ended_at, d.last_dip_at) AS win_end, d.mean_ratio,
           coalesce(d.all_running_at, d.run_started_at) AS origin, u.node
    FROM d, unnest(d.nodes) AS u(node)
),
bw_base AS (
    SELECT dn.cluster, dn.namespace, dn.job, dn.dip_started_at, dn.node, b.signal, dn.mean_ratio,
           median(b.value) FILTER (WHERE b.ts BETWEEN dn.win_start AND dn.win_end) AS dip_median,
           coalesce(median(b.value) FILTER (WHERE b.ts >= dn.origin + to_seconds(getvariable('baseline_start_s'))
                                            AND b.ts < dn.origin + to_seconds(getvariable('baseline_end_s'))),
                    median(b.value) FILTER (WHERE b.ts >= dn.origin AND b.ts < dn.win_start)) AS baseline,
           min(b.value) FILTER (WHERE b.ts BETWEEN dn.win_start AND dn.win_end) AS min_value,
           arg_min(b.ts, (b.value, b.ts)) FILTER (WHERE b.ts BETWEEN dn.win_start AND dn.win_end) AS min_at
    FROM dn JOIN intermediate.int_node_bandwidth b ON b.cluster = dn.cluster AND b.node = dn.node
    GROUP BY ALL
),
bw AS (
    SELECT cluster, namespace, job, dip_started_at,
           list({'node': node, 'signal': signal, 'baseline': round(baseline, 3), 'dip_median': round(dip_median, 3),
                 'min_value': round(min_value, 3), 'ratio': round(dip_median / baseline, 3), 'at': min_at}
                ORDER BY node, signal) AS drops,
           list(node) AS nodes, min(min_at) AS first_at
    FROM bw_base
    WHERE baseline > 0 AND dip_median < getvariable('bandwidth_ratio') * baseline
      AND dip_median / baseline < getvariable('bandwidth_vs_throughput') * mean_ratio
    GROUP BY ALL
),
ev AS (
    SELECT dn.cluster, dn.namespace, dn.job, dn.dip_started_at, dn.node, e.signal, coalesce(e.device, e.gpu) AS device,
           max(e.value) AS v, min(e.ts) AS seen_at
    FROM dn JOIN intermediate.int_signal_events e
      ON e.cluster = dn.cluster AND e.node = dn.node AND e.ts BETWEEN dn.win_start AND dn.win_end
    WHERE e.signal IN ('nvlink_errors', 'ib_errors', 'ib_port_state')
    GROUP BY ALL
),
errs AS (
    SELECT cluster, namespace, job, dip_started_at,
           list({'node': node, 'signal': signal, 'device': device, 'max_rate': round(v, 3), 'at': seen_at}
                ORDER BY node, signal, device) FILTER (WHERE signal <> 'ib_port_state') AS link_errors,
           list({'node': node, 'device': device, 'state': TRY_CAST(v AS INTEGER), 'at': seen_at}
                ORDER BY node, device) FILTER (WHERE signal = 'ib_port_state') AS ports_down,
           list(node) AS nodes, min(seen_at) AS first_at
    FROM ev GROUP BY ALL
)
SELECT d.cluster, d.namespace, d.job, d.started_at AS dip_started_at,
       to_json(coalesce(bw.drops, [])) AS bandwidth_drops,
       to_json(coalesce(e.link_errors, [])) AS link_errors,
       to_json(coalesce(e.ports_down, [])) AS ports_down,
       list_sort(list_distinct(list_concat(coalesce(bw.nodes, []), coalesce(e.nodes, [])))) AS signal_nodes,
       least(bw.first_at, e.first_at) AS first_signal_at
FROM intermediate.int_throughput_dips d
LEFT JOIN bw ON bw.cluster = d.cluster AND bw.namespace = d.namespace AND bw.job = d.job AND bw.dip_started_at = d.started_at
LEFT JOIN errs e ON e.cluster = d.cluster AND e.namespace = d.namespace AND e.job = d.job AND e.dip_started_at = d.started_at
