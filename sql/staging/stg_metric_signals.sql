-- materialized: incremental
-- watermark: ts
-- lookback_s: 300
-- Metric samples of the canonical signals: one row per raw sample whose metric is in the signal
-- map (variable `signal_map`, from collectors/metrics/signals.py), with its node, GPU, device and
-- pod attributed by the join rules of CONTRACT section 2.
-- Units per signal (value column):
--   nvlink_bw      bytes/s   (DCGM BANDWIDTH_TOTAL/_L<n> are MB/s rates despite their counter type: x 1e6)
--   pcie_bw        bytes/s   (PROF_PCIE_*_BYTES are bytes/s gauges; deprecated DEV_PCIE_*_THROUGHPUT KB/s: x 1e3)
--   ib_bw          bytes/s   (rate of node_exporter's byte counters, rx and tx as separate rows)
--   nvlink_errors  errors/s  (rate of CRC/replay/recovery counters)
--   ib_errors      errors/s  (rate of symbol, link-downed, link-recovery, integrity, overrun, rcv-error counters)
--   ib_port_state  code      (4 = ACTIVE)
--   xid            code      (last XID seen, not a count; 0 = none)
--   ecc_dbe        > 0 is trouble (DBE errors/s, retired pages/s, uncorrectable remapped rows/s, remap failure 0/1)
--   gpu_util       percent 0..100
--   sm_active      ratio 0..1
--   throughput     items/s   (tokens, samples or steps per second; counters as a rate)
--   kueue_pending  workloads (one row per cluster_queue and status; device = cluster_queue)
--   kueue_admission_wait  rate of the histogram's _sum (s/s) and _count (1/s) rows: mean wait = sum / count
--   ray_pg_pending placement groups in state PENDING
-- Counters: per-second rate against the previous non-NULL sample of the same series (same cluster,
-- target, metric, labels) within `max_rate_gap_s`; a decrease is a reset (rate = value / dt); a
-- counter saturated at 4294967295 on both samples gives NULL (unknown, not zero); a series' first
-- sample has value NULL. DCGM sentinels and NaN are NULL. A missing series stays missing.
-- column: cluster: cluster name
-- column: ts: sample time
-- column: signal: canonical signal name (list above)
-- column: metric: metric name exactly as the exporter wrote it
-- column: node: Node name: raw node, else the hostname/node/kubernetes_node/nodename label, else instance host via staging.stg_node_addresses
-- column: gpu: the gpu label (GPU index), else gpu_uuid (NVLink link entities)
-- column: device: IB '<device>/<port>', NVLink 'nvlink<N>', Kueue cluster_queue; else NULL
-- column: namespace: pod namespace (namespace, else exported_namespace)
-- column: pod: pod name (pod, else exported_pod)
-- column: job_name: the job_name label (throughput samples without a pod)
-- column: value: the value in the signal's unit (see above); NULL when unknown
-- column: target: scrape target (URL, or instance for replayed files)
-- column: scrape_job: scrape job (dcgm, node, kueue, scheduler, ray, training, ...)
WITH signal_map AS (
    SELECT unnest(getvariable('signal_map'), recursive := true)
),
recent AS (
    -- From a margin before the watermark, so counters find their previous sample.
    SELECT cluster, ts, metric, labels, value, node, target, job, instance
    FROM raw.metric_samples
    WHERE ts > getvariable('watermark') - to_seconds(getvariable('max_rate_gap_s'))
),
series AS (
    SELECT DISTINCT metric, labels FROM recent
),
series_label AS (
    -- One row per series and label, the key lower-cased: label keys compare case-insensitively.
    SELECT metric, labels, lower(k) AS k, json_extract_string(labels, '$."' || k || '"') AS v
    FROM series, unnest(json_keys(labels)) AS t(k)
),
mapped AS (
    -- The best signal-map entry per series (lowest priority number).
    SELECT s.metric, s.labels, m.signal, m.kind, m.scale
    FROM series s
    JOIN signal_map m
      ON (m.match = 'exact' AND s.metric = m.metric)
      OR (m.match = 'suffix' AND ends_with(s.metric, m.metric))
      OR (m.match = 'regex' AND regexp_full_match(s.metric, m.metric))
    WHERE m.label IS NULL
       OR EXISTS (SELECT 1 FROM series_label l
                  WHERE l.metric = s.metric AND l.labels = s.labels
                    AND l.k = lower(m.label) AND lower(l.v) = lower(m.label_value))
    QUALIFY row_number() OVER (PARTITION BY s.metric, s.labels ORDER BY m.priority) = 1
),
attrs AS (
    SELECT mp.metric, mp.labels, mp.signal, mp.kind, mp.scale,
           max(l.v) FILTER (WHERE l.k = 'hostname') AS l_hostname,
           max(l.v) FILTER (WHERE l.k = 'node') AS l_node,
           max(l.v) FILTER (WHERE l.k = 'kubernetes_node') AS l_kubernetes_node,
           max(l.v) FILTER (WHERE l.k = 'nodename') AS l_nodename,
           max(l.v) FILTER (WHERE l.k = 'gpu') AS l_gpu,
           max(l.v) FILTER (WHERE l.k = 'gpu_uuid') AS l_gpu_uuid,
           max(l.v) FILTER (WHERE l.k = 'device') AS l_device,
           max(l.v) FILTER (WHERE l.k = 'port') AS l_port,
           max(l.v) FILTER (WHERE l.k = 'nvlink') AS l_nvlink,
           max(l.v) FILTER (WHERE l.k = 'cluster_queue') AS l_cluster_queue,
           max(l.v) FILTER (WHERE l.k = 'pod') AS l_pod,
           max(l.v) FILTER (WHERE l.k = 'namespace') AS l_namespace,
           max(l.v) FILTER (WHERE l.k = 'exported_pod') AS l_exported_pod,
           max(l.v) FILTER (WHERE l.k = 'exported_namespace') AS l_exported_namespace,
           max(l.v) FILTER (WHERE l.k = 'job_name') AS l_job_name,
           max(l.v) FILTER (WHERE l.k = 'instance') AS l_instance
    FROM mapped mp
    LEFT JOIN series_label l ON l.metric = mp.metric AND l.labels = mp.labels
    GROUP BY ALL
),
samples AS (
    SELECT r.cluster, r.ts, r.metric, r.labels, r.target, r.job, r.instance, r.node AS raw_node, a.*
           EXCLUDE (metric, labels),
           CASE WHEN isnan(r.value) THEN NULL
                WHEN r.value >= 9223372036854775792 THEN NULL                     -- DCGM INT64 blank/not found/...
                WHEN r.value BETWEEN 140737488355328.0 AND 140737488355331.0 THEN NULL  -- DCGM FP64 sentinels
                ELSE r.value END AS v
    FROM recent r
    JOIN attrs a ON a.metric = r.metric AND a.labels = r.labels
),
rated AS (
    SELECT *,
           lag(v IGNORE NULLS) OVER w AS prev_v,
           lag(CASE WHEN v IS NOT NULL THEN ts END IGNORE NULLS) OVER w AS prev_ts
    FROM samples
    WINDOW w AS (PARTITION BY cluster, target, metric, labels ORDER BY ts)
),
valued AS (
    SELECT *,
           CASE
               WHEN kind <> 'counter' THEN v * scale
               WHEN v IS NULL OR prev_v IS NULL THEN NULL
               WHEN dt_s <= 0 OR dt_s > getvariable('max_rate_gap_s') THEN NULL
               WHEN v = 4294967295 AND prev_v = 4294967295 THEN NULL  -- saturated 32-bit counter: unknown
               WHEN v < prev_v THEN v / dt_s * scale  -- reset
               ELSE (v - prev_v) / dt_s * scale
           END AS out_value,
           CASE WHEN coalesce(r_inst, '') LIKE '[%'
                THEN regexp_extract(r_inst, '^\[([^\]]+)\]', 1)
                ELSE regexp_replace(coalesce(r_inst, ''), ':[0-9]+$', '') END AS instance_host
    FROM (SELECT *, coalesce(nullif(instance, ''), l_instance) AS r_inst,
                 (epoch_us(ts) - epoch_us(prev_ts)) / 1e6 AS dt_s  -- exact: epoch() doubles lose microseconds
          FROM rated)
    WHERE ts > getvariable('watermark')
),
node_address AS (
    SELECT cluster, address, min(node) AS node
    FROM staging.stg_node_addresses
    GROUP BY cluster, address
)
SELECT
    s.cluster,
    s.ts,
    s.signal,
    s.metric,
    coalesce(nullif(s.raw_node, ''), s.l_hostname, s.l_node, s.l_kubernetes_node, s.l_nodename, na.node) AS node,
    coalesce(s.l_gpu, s.l_gpu_uuid) AS gpu,
    CASE
        WHEN s.l_nvlink IS NOT NULL THEN 'nvlink' || s.l_nvlink
        WHEN regexp_matches(s.metric, 'NVLINK.*_L[0-9]+(_|$)')
            THEN 'nvlink' || regexp_extract(s.metric, '_L([0-9]+)(_|$)', 1)
        WHEN s.l_port IS NOT NULL AND s.l_device IS NOT NULL THEN s.l_device || '/' || s.l_port
        WHEN s.l_cluster_queue IS NOT NULL THEN s.l_cluster_queue
    END AS device,
    CASE WHEN s.l_pod IS NOT NULL THEN s.l_namespace ELSE s.l_exported_namespace END AS namespace,
    coalesce(s.l_pod, s.l_exported_pod) AS pod,
    s.l_job_name AS job_name,
    s.out_value AS value,
    s.target,
    s.job AS scrape_job
FROM valued s
LEFT JOIN node_address na ON na.cluster = s.cluster AND na.address = s.instance_host
