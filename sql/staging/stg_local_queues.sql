-- Kueue LocalQueues: which ClusterQueue backs each, so a Workload not admitted yet (no
-- status.admission.clusterQueue) still has a ClusterQueue.
-- column: cluster: cluster name
-- column: namespace: the LocalQueue's namespace
-- column: name: the LocalQueue
-- column: cluster_queue: spec.clusterQueue
SELECT cluster, namespace, name, object->>'$.spec.clusterQueue' AS cluster_queue
FROM staging.stg_k8s_events
WHERE kind = 'LocalQueue' AND api_version LIKE 'kueue.x-k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED')
QUALIFY row_number() OVER (PARTITION BY cluster, namespace, name ORDER BY observed_at DESC) = 1
