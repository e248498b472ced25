-- GPUs free per node now (at the data's as_of): allocatable GPUs minus those requested by live pods bound to
-- the node that have not finished, with the node's labels and taints. Next steps use it to name the largest
-- free topology domain and the nodes that come closest to taking an unschedulable pod.
-- column: cluster: the Node
-- column: node: the Node
-- column: gpus: allocatable GPUs
-- column: used_gpus: GPUs requested by live, unfinished pods bound to it
-- column: free_gpus: gpus - used_gpus (never below 0)
-- column: schedulable: not cordoned (spec.unschedulable) and Ready is not False
-- column: taints: spec.taints (JSON array)
-- column: labels: metadata.labels (JSON object)
WITH used AS (
    SELECT cluster, node, sum(coalesce(gpus, 0)) AS used_gpus
    FROM intermediate.int_pod_jobs
    WHERE node IS NOT NULL AND NOT deleted AND coalesce(phase, '') NOT IN ('Succeeded', 'Failed')
    GROUP BY ALL
)
SELECT n.cluster, n.name AS node, n.gpus, coalesce(u.used_gpus, 0) AS used_gpus,
       greatest(n.gpus - coalesce(u.used_gpus, 0), 0) AS free_gpus,
       NOT coalesce(n.unschedulable, false) AND coalesce(n.ready, 'True') <> 'False' AS schedulable,
       n.taints, n.labels
FROM staging.stg_nodes n
LEFT JOIN used u ON u.cluster = n.cluster AND u.node = n.name
WHERE NOT n.deleted
