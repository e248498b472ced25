-- materialized: incremental
-- watermark: ts
-- lookback_s: 60
-- late_from: raw.scrapes.first_sample_at
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
WITH node_address AS (
    SELECT cluster, address, min(node) AS node
    FROM staging.stg_node_addresses
    GROUP BY cluster, address
),
series_attrs AS MATERIALIZED (
    -- How this stays fast (issue #6, #37): the signal map is matched and labels are parsed once per series
    -- id, when it first appears (staging.stg_metric_series, kept incrementally), never per sample or per
    -- build; samples reach their series by the integer id. Only ids of the days in the window, only mapped
    -- ones; a node found by address is looked up now (the node may be known only since).
    SELECT s.series, s.rate_key, s.kind, s.scale, s.cluster, s.target, s.scrape_job, s.metric, s.signal,
           coalesce(s.label_node, na.node) AS node, s.gpu, s.device, s.namespace, s.pod, s.job_name
    FROM staging.stg_metric_series s
    LEFT JOIN node_address na ON na.cluster = s.cluster AND na.address = s.instance_host
    WHERE s.signal IS NOT NULL
      AND s.day >= CAST(timezone('UTC', getvariable('watermark') - to_seconds(getvariable('max_rate_gap_s'))) AS DATE)
),
clean AS NOT MATERIALIZED (
    -- The samples of mapped series from the window on, and before it each counter's samples back to max_rate_gap_s
    -- (a rate needs the one before). A scrape landed twice (a collector that restarted and re-sent, a file
    -- replayed twice) is one sample: DISTINCT on the narrow points, only those of mapped series, costs about
    -- nothing (a window over the joined rows took a third of this model). DCGM sentinels, NaN and ±Inf become NULL.
    -- NOT MATERIALIZED: read twice (samples, history), DuckDB would otherwise keep every sample of a full build
    -- (at 512 nodes x 30 min its full build spilled 462 MB, 318 MB without; issue 37).
    SELECT p.series, p.ts,
           CASE WHEN isnan(p.value) OR isinf(p.value) THEN NULL
                WHEN p.value >= 9223372036854775792 THEN NULL                     -- DCGM INT64 blank/not found/...
                WHEN p.value BETWEEN 140737488355328.0 AND 140737488355331.0 THEN NULL  -- DCGM FP64 sentinels
                ELSE p.value END AS v
    FROM (SELECT DISTINCT ts, series, value
          FROM raw.metric_points
          WHERE ts > getvariable('watermark') - to_seconds(getvariable('max_rate_gap_s'))
            -- insane times (docs/records.md) are not data: one must not move the data's "now"
            AND ts >= TIMESTAMPTZ '2000-01-01 00:00:00+00' AND ts <= now() + INTERVAL 1 DAY
            AND series IN (SELECT series FROM series_attrs)
            AND (ts > getvariable('watermark') OR series IN (SELECT series FROM series_attrs WHERE kind = 'counter'))
         ) p
),
samples AS (
    SELECT i.series, i.rate_key, i.kind, i.scale, c.ts, c.v
    FROM clean c JOIN series_attrs i USING (series)
    WHERE c.ts > getvariable('watermark')
),
history AS (
    -- Before the window only each counter's last sample with a value counts: its first rate in the window is taken
    -- against it. One row per counter, not every sample of the margin through the window below (at 1,280 nodes that
    -- margin is ten times the new minute; issue 37).
    SELECT i.rate_key, max(c.ts) AS ts, arg_max(c.v, c.ts) AS v
    FROM clean c JOIN series_attrs i USING (series)
    WHERE c.ts <= getvariable('watermark') AND i.kind = 'counter' AND c.v IS NOT NULL
    GROUP BY i.rate_key
),
valued AS (
    -- Gauges and codes pass straight through, and so do counter samples without a value (rate NULL);
    -- counters become rates against the series' previous sample with a value.
    SELECT series, ts, v * scale AS value
    FROM samples
    WHERE kind <> 'counter' OR v IS NULL
    UNION ALL
    SELECT series, ts,
           CASE
               WHEN prev_v IS NULL THEN NULL
               WHEN dt_s <= 0 OR dt_s > getvariable('max_rate_gap_s') THEN NULL
               WHEN v = 4294967295 AND prev_v = 4294967295 THEN NULL  -- saturated 32-bit counter: unknown
               WHEN v < prev_v THEN v / dt_s * scale  -- reset
               ELSE (v - prev_v) / dt_s * scale
           END
    FROM (SELECT *, (epoch_us(ts) - epoch_us(prev_ts)) / 1e6 AS dt_s  -- exact: epoch() doubles lose microseconds
          FROM (SELECT *, lag(v) OVER w AS prev_v, lag(ts) OVER w AS prev_ts
                FROM (SELECT series, rate_key, scale, ts, v FROM samples WHERE kind = 'counter' AND v IS NOT NULL
                      UNION ALL
                      SELECT NULL, rate_key, NULL, ts, v FROM history)
                WINDOW w AS (PARTITION BY rate_key ORDER BY ts)))
    WHERE series IS NOT NULL  -- the history rows only lend their value
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
    sa.scrape_job
FROM valued v
JOIN series_attrs sa USING (series)
