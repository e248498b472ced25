-- materialized: incremental
-- watermark: ts
-- watermark_from: staging.stg_metric_signals.ts
-- lookback_s: 120
-- Each GPU's clocks, temperature, power, utilisation and throttle signals per minute: what a throttled GPU is told
-- from its peers by (intermediate.int_gpu_throttle) and what a hung job's GPUs did (int_training_stalls). A minute's
-- median hides a one-scrape clock dip. The exporter's clock_event counts fold into the reason bits. Incremental.
-- column: cluster: the GPU
-- column: node: the GPU
-- column: gpu: the GPU
-- column: ts: minute bucket
-- column: namespace: the pod the GPU was allocated to in that minute (dcgm-exporter pod labels)
-- column: pod: the pod the GPU was allocated to in that minute (dcgm-exporter pod labels)
-- column: sm_clock: median SM clock, MHz
-- column: gpu_temp: highest GPU temperature, C
-- column: gpu_power: mean board power, W
-- column: gpu_util: mean utilisation, percent
-- column: clock_reasons: OR of the clock-event reason bits seen (field 112, and DCGM_EXP_CLOCK_EVENTS_COUNT's
--   clock_event labels with a count above 0: power_cap 0x4, hw_slowdown 0x8, sw_thermal 0x20, hw_thermal 0x40,
--   hw_power_brake 0x80)
-- column: power_throttle: highest share of time throttled for power (power violation, SW power cap ns), 0..1
-- column: thermal_throttle: highest share of time throttled for heat (thermal violation, thermal slowdown ns), 0..1
SELECT cluster, node, gpu, bucket AS ts, max(namespace) AS namespace, max(pod) AS pod,
       median(value) FILTER (WHERE signal = 'sm_clock') AS sm_clock,
       max(value) FILTER (WHERE signal = 'gpu_temp') AS gpu_temp,
       avg(value) FILTER (WHERE signal = 'gpu_power') AS gpu_power,
       avg(value) FILTER (WHERE signal = 'gpu_util') AS gpu_util,
       bit_or(CASE WHEN signal = 'clock_reasons' THEN TRY_CAST(value AS BIGINT)
                   WHEN signal = 'clock_events' AND value > 0
                   THEN CASE lower(device) WHEN 'power_cap' THEN 4 WHEN 'hw_slowdown' THEN 8 WHEN 'sw_thermal' THEN 32
                                           WHEN 'hw_thermal' THEN 64 WHEN 'hw_power_brake' THEN 128 ELSE 0 END
              END) AS clock_reasons,
       max(value) FILTER (WHERE signal = 'throttle_time'
                            AND (metric LIKE '%POWER_VIOLATION' OR metric LIKE '%SW_POWER_CAP_NS')) AS power_throttle,
       max(value) FILTER (WHERE signal = 'throttle_time'
                            AND (metric LIKE '%THERMAL_VIOLATION' OR metric LIKE '%THERM_SLOWDOWN_NS')) AS thermal_throttle
FROM (
    -- Buckets are time_bucket(width, ts)'s (origin 2000-01-03 00:00 UTC; data after it) computed on integer
    -- microseconds: several times faster than time_bucket on TIMESTAMPTZ (the time-zone library).
    SELECT *, make_timestamptz(epoch_us(ts) - (epoch_us(ts) - 946857600000000) % 60000000) AS bucket
    FROM staging.stg_metric_signals
    WHERE signal IN ('sm_clock', 'gpu_temp', 'gpu_power', 'gpu_util', 'clock_reasons', 'clock_events', 'throttle_time')
      AND gpu IS NOT NULL AND node IS NOT NULL AND value IS NOT NULL
      AND ts > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
)
WHERE bucket > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
GROUP BY cluster, node, gpu, bucket
