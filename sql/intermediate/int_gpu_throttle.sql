-- Throttled GPUs per throughput dip (CONTRACT section 4, gpu_throttle): a synchronous job runs at the pace of its
-- slowest rank, so one throttled GPU is enough. During the dip (from a minute before it), a GPU of the job (its pods'
-- GPUs by the exporter's pod labels, else the GPUs of its nodes) is throttled in a minute when
--   its median SM clock is below throttle_clock_ratio x the median of the job's other GPUs in that minute (works with
--   dcgm-exporter's default counters alone), or
--   a clock-event reason bit says HW slowdown (0x8), SW thermal (0x20), HW thermal (0x40) or HW power brake (0x80), or
--   its thermal violation time rises (> 1 % of the time).
-- Power capping (the SW power cap bit 0x4, power violation time) is how a GPU normally runs at its power limit: it is
-- reported when the GPU is throttled by the rules above, never a throttle by itself. A GPU counts for the dip when
-- throttled for throughput_min_samples minutes or more (a one-scrape clock dip is not a minute's median).
-- column: cluster: the dip (intermediate.int_throughput_dips)
-- column: namespace: the dip (intermediate.int_throughput_dips)
-- column: job: the dip (intermediate.int_throughput_dips)
-- column: dip_started_at: the dip (intermediate.int_throughput_dips)
-- column: throttled_gpus: JSON list of {node, gpu, uuid, pod, sm_clock, peers_clock, clock_ratio, gpu_temp, gpu_power,
--   reasons, power_throttle, thermal_throttle, minutes, first_at}: median clock of its throttled minutes against the
--   median of its peers', the hottest temperature, the reasons seen (sw_power_cap, hw_slowdown, sw_thermal,
--   hw_thermal, hw_power_brake), the highest shares of time throttled
-- column: nodes: nodes of the throttled GPUs
-- column: first_at: first throttled minute
WITH d AS (
    SELECT d.cluster, d.namespace, d.job, d.started_at AS dip_started_at, d.started_at - INTERVAL 1 MINUTE AS win_start,
           coalesce(d.ended_at, d.last_dip_at) AS win_end, j.nodes
    FROM intermediate.int_throughput_dips d JOIN intermediate.int_jobs j USING (cluster, namespace, job)
),
by_pod AS (
    SELECT d.*, m.* EXCLUDE (cluster, namespace)
    FROM d
    JOIN intermediate.int_gpu_minutes m ON m.cluster = d.cluster AND m.ts BETWEEN d.win_start AND d.win_end
    JOIN (SELECT DISTINCT cluster, namespace, pod, job FROM intermediate.int_pod_jobs) p
      ON p.cluster = m.cluster AND p.namespace = m.namespace AND p.pod = m.pod AND p.job = d.job
     AND p.namespace = d.namespace
),
by_node AS (
    -- exporters without the Kubernetes pod mapping: the GPUs of the job's nodes
    SELECT d.*, m.* EXCLUDE (cluster, namespace)
    FROM d
    JOIN intermediate.int_gpu_minutes m ON m.cluster = d.cluster AND m.ts BETWEEN d.win_start AND d.win_end
     AND m.pod IS NULL AND list_contains(d.nodes, m.node)
),
g AS (
    SELECT * FROM by_pod UNION ALL SELECT * FROM by_node
),
peers AS (
    SELECT cluster, namespace, job, dip_started_at, ts,
           list({'k': node || '/' || gpu, 'c': sm_clock}) FILTER (WHERE sm_clock IS NOT NULL) AS clocks
    FROM g GROUP BY ALL
),
minutes AS (
    SELECT g.*,
           list_median([x.c FOR x IN p.clocks IF x.k <> g.node || '/' || g.gpu]) AS peers_clock
    FROM g JOIN peers p USING (cluster, namespace, job, dip_started_at, ts)
),
flagged AS (
    SELECT *,
           coalesce(sm_clock < getvariable('throttle_clock_ratio') * peers_clock, false) AS clock_low,
           coalesce((clock_reasons & (8 | 32 | 64 | 128)) <> 0, false) AS hw_bits,
           coalesce(thermal_throttle > 0.01, false) AS thermal
    FROM minutes
),
per_gpu AS (
    SELECT f.cluster, f.namespace, f.job, f.dip_started_at, f.node, f.gpu, max(f.pod) AS pod,
           median(f.sm_clock) FILTER (WHERE clock_low OR hw_bits OR thermal) AS sm_clock,
           median(f.peers_clock) FILTER (WHERE clock_low OR hw_bits OR thermal) AS peers_clock,
           max(f.gpu_temp) AS gpu_temp, avg(f.gpu_power) AS gpu_power,
           bit_or(f.clock_reasons) AS bits, max(f.power_throttle) AS power_throttle,
           max(f.thermal_throttle) AS thermal_throttle,
           count(*) FILTER (WHERE clock_low OR hw_bits OR thermal) AS minutes,
           min(f.ts) FILTER (WHERE clock_low OR hw_bits OR thermal) AS first_at
    FROM flagged f
    GROUP BY ALL
    HAVING count(*) FILTER (WHERE clock_low OR hw_bits OR thermal) >= getvariable('throughput_min_samples')
)
SELECT t.cluster, t.namespace, t.job, t.dip_started_at,
       to_json(list({'node': t.node, 'gpu': t.gpu, 'uuid': u.uuid, 'pod': t.pod, 'sm_clock': round(t.sm_clock),
                     'peers_clock': round(t.peers_clock), 'clock_ratio': round(t.sm_clock / nullif(t.peers_clock, 0), 3),
                     'gpu_temp': t.gpu_temp, 'gpu_power': round(t.gpu_power, 1),
                     'reasons': [r.name FOR r IN [{'bit': 4, 'name': 'sw_power_cap'}, {'bit': 8, 'name': 'hw_slowdown'},
                                                  {'bit': 32, 'name': 'sw_thermal'}, {'bit': 64, 'name': 'hw_thermal'},
                                                  {'bit': 128, 'name': 'hw_power_brake'}]
                                 IF (coalesce(t.bits, 0) & r.bit) <> 0],
                     'power_throttle': round(t.power_throttle, 3), 'thermal_throttle': round(t.thermal_throttle, 3),
                     'minutes': t.minutes, 'first_at': t.first_at}
                    ORDER BY t.first_at, t.node, t.gpu)) AS throttled_gpus,
       list_sort(list(DISTINCT t.node)) AS nodes, min(t.first_at) AS first_at
FROM per_gpu t
LEFT JOIN staging.stg_gpu_devices u ON u.cluster = t.cluster AND u.node = t.node AND u.gpu = t.gpu
GROUP BY t.cluster, t.namespace, t.job, t.dip_started_at
