-- materialized: incremental
-- watermark: ts
-- watermark_from: staging.stg_metric_signals.ts
-- lookback_s: 60
-- The few samples that can mean a fault, kept out of the bulk of the signals: link error counters
-- rising (nvlink_errors / ib_errors rates above 0), an IB port not ACTIVE (state id 4), an XID code,
-- a double-bit ECC / row-remap failure count. Incremental like int_node_bandwidth.
-- column: cluster: the sample
-- column: ts: the sample
-- column: signal: the sample
-- column: metric: the sample
-- column: node: the sample
-- column: gpu: the sample
-- column: device: the sample
-- column: namespace: the sample
-- column: pod: the sample
-- column: value: the sample
SELECT cluster, ts, signal, metric, node, gpu, device, namespace, pod, value
FROM staging.stg_metric_signals
WHERE ts > coalesce(getvariable('watermark'), '-infinity'::TIMESTAMPTZ)
  AND value IS NOT NULL
  AND ((signal IN ('nvlink_errors', 'ib_errors') AND value > 0)
       OR (signal = 'ib_port_state' AND value <> 4)
       OR (signal IN ('xid', 'ecc_dbe') AND value > 0))
