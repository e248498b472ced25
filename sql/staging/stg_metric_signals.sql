-- materialized: incremental
-- watermark: ts
-- lookback_s: 300
-- Metric samples of the canonical signals: one row per raw sample whose metric is in the signal
-- map (variable `signal_map`, from pipeline/signals.py), with its node, GPU, device and
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
--   (any series labelled replica_role="follower" is dropped: a Kueue HA follower's copy; leader / standalone count)
--   kueue_admission_wait  rate of the histogram's _sum (s/s) and _count (1/s) rows: mean wait = sum / count
--   ray_pg_pending placement groups in state PENDING
--   sm_clock       MHz (DCGM_FI_DEV_SM_CLOCK)
--   gpu_temp       C; gpu_power W
--   clock_reasons  bit mask (clock-event / throttle reasons, field 112)
--   clock_events   events per exporter window (DCGM_EXP_CLOCK_EVENTS_COUNT; device = the clock_event label)
--   throttle_time  share of time throttled, 0..1 (violation / per-reason ns counters as a rate x 1e-9)
-- Counters: per-second rate against the previous non-NULL sample of the same series (same cluster,
-- target, metric, labels) within `max_rate_gap_s`; a decrease is a reset (rate = value / dt); a
-- counter saturated at 4294967295 on both samples gives NULL (unknown, not zero); a series' first
-- sample has value NULL. DCGM sentinels, NaN and ±Inf are NULL; samples at insane times (docs/records.md) are left out. A missing series stays missing.
-- column: cluster: cluster name
-- column: ts: sample time
-- column: signal: canonical signal name (list above)
-- column: metric: metric name exactly as the exporter wrote it
-- column: node: Node name: raw node, else the hostname/node/kubernetes_node/nodename label, else instance host via staging.stg_node_addresses
-- column: gpu: the gpu label (GPU index), else gpu_uuid (NVLink link entities)
-- column: device: IB '<device>/<port>', NVLink 'nvlink<N>', Kueue cluster_queue, dcgm-exporter clock_event; else NULL
-- column: namespace: pod namespace (namespace, else exported_namespace)
-- column: pod: pod name (pod, else exported_pod)
-- column: job_name: the job_name label (throughput samples without a pod)
-- column: value: the value in the signal's unit (see above); NULL when unknown
-- column: target: scrape target (URL, or instance for replayed files)
-- column: scrape_job: scrape job (dcgm, node, kueue, scheduler, ray, training, ...)
WITH signal_map AS (
    -- How this stays fast (issue #6): samples are matched to the map by metric name alone (a semi join
    -- against the few names present), labels are parsed once per series (~10^4), not per sample (~10^7),
    -- samples reach their series by an integer id, and only counter samples go through the window that
    -- computes rates.
    SELECT unnest(getvariable('signal_map'), recursive := true)
),
recent_series AS (
    -- raw.metric_series holds a series once per UTC day (its id is day-scoped): the days in the window.
    SELECT series, cluster, target, job, instance, node, metric, labels
    FROM raw.metric_series
    WHERE day >= CAST(timezone('UTC', getvariable('watermark') - to_seconds(getvariable('max_rate_gap_s'))) AS DATE)
),
name_map AS (
    -- Every map entry that matches each metric name present (a few dozen names, a few dozen rules).
    SELECT n.metric, m.signal, m.kind, m.scale, m.label, m.label_value, m.priority
    FROM (SELECT DISTINCT metric FROM recent_series) n
    JOIN signal_map m
      ON (m.match = 'exact' AND n.metric = m.metric)
      OR (m.match = 'suffix' AND ends_with(n.metric, m.metric))
      OR (m.match = 'regex' AND regexp_full_match(n.metric, m.metric))
),
series AS (
    -- One row per series of a mapped metric (whatever its day or id), with what the samples carry
    -- outside the labels.
    SELECT DISTINCT cluster, target, job, instance, node, metric, labels
    FROM recent_series
    WHERE metric IN (SELECT metric FROM name_map)
),
series_label AS (
    -- One row per series and label, the key lower-cased: label keys compare case-insensitively.
    SELECT metric, labels, lower(k) AS k, json_extract_string(labels, '$."' || k || '"') AS v
    FROM (SELECT DISTINCT metric, labels FROM series), unnest(json_keys(labels)) AS t(k)
),
mapped AS (
    -- The best signal-map entry per (metric, labels) (lowest priority number).
    SELECT s.metric, s.labels, m.signal, m.kind, m.scale
    FROM (SELECT DISTINCT metric, labels FROM series) s
    JOIN name_map m ON m.metric = s.metric
    WHERE (m.label IS NULL
           OR EXISTS (SELECT 1 FROM series_label l
                      WHERE l.metric = s.metric AND l.labels = s.labels
                        AND l.k = lower(m.label) AND lower(l.v) = lower(m.label_value)))
      -- Kueue in HA: followers export gauges too (replica_role, since v0.16); only leader / standalone count,
      -- else queue depth doubles.
      AND NOT EXISTS (SELECT 1 FROM series_label l
                      WHERE l.metric = s.metric AND l.labels = s.labels
                        AND l.k = 'replica_role' AND lower(l.v) = 'follower')
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
           max(l.v) FILTER (WHERE l.k = 'clock_event') AS l_clock_event,
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
node_address AS (
    SELECT cluster, address, min(node) AS node
    FROM staging.stg_node_addresses
    GROUP BY cluster, address
),
series_attrs AS MATERIALIZED (
    -- Everything a sample's output row needs but its time and value, resolved once per series. `sid`
    -- keys the join back; `rate_key` (cluster, target, metric, labels) partitions the counter window:
    -- integers, not the labels text. Materialized: both keys must be the same in both uses.
    SELECT row_number() OVER () AS sid,
           dense_rank() OVER (ORDER BY x.cluster, x.target, x.metric, x.labels) AS rate_key,
           x.cluster, x.target, x.job, x.instance, x.raw_node, x.metric, x.labels, x.signal, x.kind, x.scale,
           coalesce(nullif(x.raw_node, ''), x.l_hostname, x.l_node, x.l_kubernetes_node, x.l_nodename, na.node)
               AS node,
           coalesce(x.l_gpu, x.l_gpu_uuid) AS gpu,
           CASE
               WHEN x.l_nvlink IS NOT NULL THEN 'nvlink' || x.l_nvlink
               WHEN regexp_matches(x.metric, 'NVLINK.*_L[0-9]+(_|$)')
                   THEN 'nvlink' || regexp_extract(x.metric, '_L([0-9]+)(_|$)', 1)
               WHEN x.l_port IS NOT NULL AND x.l_device IS NOT NULL THEN x.l_device || '/' || x.l_port
               WHEN x.l_cluster_queue IS NOT NULL THEN x.l_cluster_queue
               WHEN x.l_clock_event IS NOT NULL THEN x.l_clock_event
           END AS device,
           CASE WHEN x.l_pod IS NOT NULL THEN x.l_namespace ELSE x.l_exported_namespace END AS namespace,
           coalesce(x.l_pod, x.l_exported_pod) AS pod,
           x.l_job_name AS job_name
    FROM (SELECT *,
                 CASE WHEN coalesce(r_inst, '') LIKE '[%'
                      THEN regexp_extract(r_inst, '^\[([^\]]+)\]', 1)
                      ELSE regexp_replace(coalesce(r_inst, ''), ':[0-9]+$', '') END AS instance_host
          FROM (SELECT s.cluster, s.target, s.job, s.instance, s.node AS raw_node, s.metric, s.labels,
                       a.* EXCLUDE (metric, labels), coalesce(nullif(s.instance, ''), a.l_instance) AS r_inst
                FROM series s JOIN attrs a ON a.metric = s.metric AND a.labels = s.labels)) x
    LEFT JOIN node_address na ON na.cluster = x.cluster AND na.address = x.instance_host
),
ids AS (
    -- Each landed series id (one per series and day) to its series.
    SELECT r.series, sa.sid, sa.rate_key, sa.kind, sa.scale
    FROM recent_series r
    JOIN series_attrs sa
      ON sa.metric = r.metric AND sa.labels = r.labels AND sa.cluster IS NOT DISTINCT FROM r.cluster
     AND sa.target IS NOT DISTINCT FROM r.target AND sa.job IS NOT DISTINCT FROM r.job
     AND sa.instance IS NOT DISTINCT FROM r.instance AND sa.raw_node IS NOT DISTINCT FROM r.node
),
samples AS (
    SELECT i.sid, i.rate_key, i.kind, i.scale, p.ts,
           CASE WHEN isnan(p.value) OR isinf(p.value) THEN NULL
                WHEN p.value >= 9223372036854775792 THEN NULL                     -- DCGM INT64 blank/not found/...
                WHEN p.value BETWEEN 140737488355328.0 AND 140737488355331.0 THEN NULL  -- DCGM FP64 sentinels
                ELSE p.value END AS v
    -- From a margin before the watermark, so counters find their previous sample. A scrape landed twice
    -- (a collector that restarted and re-sent, a file replayed twice) is one sample: DISTINCT on the
    -- narrow points, only those of mapped series, costs about nothing (a window over the joined rows
    -- took a third of this model).
    FROM (SELECT DISTINCT ts, series, value
          FROM raw.metric_points
          WHERE ts > getvariable('watermark') - to_seconds(getvariable('max_rate_gap_s'))
            -- insane times (docs/records.md) are not data: one must not move the data's "now"
            AND ts >= TIMESTAMPTZ '2000-01-01 00:00:00+00' AND ts <= now() + INTERVAL 1 DAY
            AND series IN (SELECT series FROM ids)) p
    JOIN ids i USING (series)
),
valued AS (
    -- Gauges and codes pass straight through, and so do counter samples without a value (rate NULL);
    -- counters become rates against the series' previous sample with a value.
    SELECT sid, ts, v * scale AS value
    FROM samples
    WHERE (kind <> 'counter' OR v IS NULL) AND ts > getvariable('watermark')
    UNION ALL
    SELECT sid, ts,
           CASE
               WHEN prev_v IS NULL THEN NULL
               WHEN dt_s <= 0 OR dt_s > getvariable('max_rate_gap_s') THEN NULL
               WHEN v = 4294967295 AND prev_v = 4294967295 THEN NULL  -- saturated 32-bit counter: unknown
               WHEN v < prev_v THEN v / dt_s * scale  -- reset
               ELSE (v - prev_v) / dt_s * scale
           END
    FROM (SELECT *, (epoch_us(ts) - epoch_us(prev_ts)) / 1e6 AS dt_s  -- exact: epoch() doubles lose microseconds
          FROM (SELECT *, lag(v) OVER w AS prev_v, lag(ts) OVER w AS prev_ts
                FROM samples
                WHERE kind = 'counter' AND v IS NOT NULL
                WINDOW w AS (PARTITION BY rate_key ORDER BY ts)))
    WHERE ts > getvariable('watermark')
)
SELECT
    sa.cluster,
    v.ts,
    sa.signal,
    sa.metric,
    sa.node,
    sa.gpu,
    sa.device,
    sa.namespace,
    sa.pod,
    sa.job_name,
    v.value,
    sa.target,
    sa.job AS scrape_job
FROM valued v
JOIN series_attrs sa USING (sid)
