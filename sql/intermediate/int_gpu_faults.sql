-- GPU faults per device: a hardware XID (any code but 13, 31, 43, 45, and not the same code appearing on
-- xid_spread_devices or more devices within 5 minutes, which points at the workload: one device repeating
-- an error is hardware, many devices at once is the job), a double-bit ECC / row-remap failure, or the GPU
-- disappearing (its series stop for gpu_missing_s while the node's other GPUs keep reporting).
-- column: cluster: the device
-- column: node: the device
-- column: gpu: the device
-- column: kind: xid, ecc_dbe, gpu_missing
-- column: code: XID code (NULL otherwise)
-- column: started_at: first sample of the fault; last_at: last sample (or the GPU's last sample when missing)
-- column: samples: samples that showed it
-- column: namespace: the pod the GPU was allocated to, when the exporter said
-- column: pod: the pod the GPU was allocated to, when the exporter said
WITH xid AS (
    SELECT cluster, node, gpu, TRY_CAST(value AS BIGINT) AS code, min(ts) AS started_at, max(ts) AS last_at,
           count(*) AS samples, max(namespace) AS namespace, max(pod) AS pod
    FROM intermediate.int_signal_events WHERE signal = 'xid'
    GROUP BY ALL
),
spread AS (
    SELECT a.cluster, a.node, a.gpu, a.code, count(DISTINCT b.node || '/' || coalesce(b.gpu, '')) AS devices
    FROM xid a JOIN xid b ON b.cluster = a.cluster AND b.code = a.code
     AND b.started_at BETWEEN a.started_at - INTERVAL 5 MINUTE AND a.started_at + INTERVAL 5 MINUTE
    GROUP BY ALL
),
ecc AS (
    SELECT cluster, node, gpu, NULL::BIGINT AS code, min(ts) AS started_at, max(ts) AS last_at, count(*) AS samples,
           max(namespace) AS namespace, max(pod) AS pod
    FROM intermediate.int_signal_events WHERE signal = 'ecc_dbe'
    GROUP BY ALL
),
gpu_last AS (
    SELECT cluster, node, gpu, max(ts) AS last_at, arg_max(namespace, ts) AS namespace, arg_max(pod, ts) AS pod,
           count(*) AS minutes
    FROM intermediate.int_gpu_presence GROUP BY ALL
),
node_last AS (
    SELECT cluster, node, max(ts) AS last_at FROM intermediate.int_gpu_presence GROUP BY ALL
),
missing AS (
    SELECT g.cluster, g.node, g.gpu, NULL::BIGINT AS code, g.last_at + INTERVAL 1 MINUTE AS started_at,
           n.last_at AS last_at, g.minutes AS samples, g.namespace, g.pod
    FROM gpu_last g JOIN node_last n USING (cluster, node)
    WHERE epoch(n.last_at - g.last_at) >= getvariable('gpu_missing_s')
)
SELECT x.cluster, x.node, x.gpu, 'xid' AS kind, x.code, x.started_at, x.last_at, x.samples, x.namespace, x.pod
FROM xid x JOIN spread s ON s.cluster = x.cluster AND s.node = x.node AND s.gpu IS NOT DISTINCT FROM x.gpu AND s.code = x.code
WHERE x.code NOT IN (13, 31, 43, 45) AND s.devices < getvariable('xid_spread_devices')
UNION ALL
SELECT cluster, node, gpu, 'ecc_dbe', code, started_at, last_at, samples, namespace, pod FROM ecc
UNION ALL
SELECT cluster, node, gpu, 'gpu_missing', code, started_at, last_at, samples, namespace, pod FROM missing
