-- Kueue LocalQueues: which ClusterQueue backs each, so a Workload not admitted yet (no
-- status.admission.clusterQueue) still has a ClusterQueue; and whether the queue admits at all.
-- column: cluster: cluster name
-- column: namespace: the LocalQueue's namespace
-- column: name: the LocalQueue
-- column: cluster_queue: spec.clusterQueue
-- column: stop_policy: spec.stopPolicy (None, Hold, HoldAndDrain; NULL when unset)
-- column: active_status: condition Active (True / False), its reason (Ready, Stopped, ClusterQueueIsInactive,
--   ClusterQueueDoesNotExist) and message
-- column: active_reason: condition Active
-- column: active_message: condition Active
-- column: deleted: the latest event was DELETED
WITH latest AS (
    SELECT *,
           [c FOR c IN coalesce(json_extract(object, '$.status.conditions[*]'), []::JSON[])
            IF (c->>'$.type') = 'Active'][1] AS active
    FROM staging.stg_k8s_events
    WHERE kind = 'LocalQueue' AND api_version LIKE 'kueue.x-k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
    QUALIFY row_number() OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)
                               ORDER BY observed_at DESC, TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST) = 1
)
SELECT cluster, namespace, name, object->>'$.spec.clusterQueue' AS cluster_queue,
       object->>'$.spec.stopPolicy' AS stop_policy,
       active->>'$.status' AS active_status, active->>'$.reason' AS active_reason,
       active->>'$.message' AS active_message,
       event_type = 'DELETED' AS deleted
FROM latest
QUALIFY row_number() OVER (PARTITION BY cluster, namespace, name ORDER BY deleted) = 1
