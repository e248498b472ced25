-- Kueue ClusterQueues: whether each admits at all. An inactive ClusterQueue (Active=False, e.g. FlavorNotFound,
-- AdmissionCheckInactive) or a stopped one (spec.stopPolicy Hold / HoldAndDrain) admits nothing: a configuration
-- cause, not quota.
-- column: cluster: cluster name
-- column: name: the ClusterQueue
-- column: cohort: spec.cohortName (v1beta2) / spec.cohort (v1beta1)
-- column: stop_policy: spec.stopPolicy (None, Hold, HoldAndDrain; NULL when unset)
-- column: active_status: condition Active (True / False), its reason (Ready, Stopped, Terminating, FlavorNotFound,
--   TopologyNotFound, AdmissionCheckNotFound, AdmissionCheckInactive, ...) and message
-- column: active_reason: condition Active
-- column: active_message: condition Active
-- column: deleted: the latest event was DELETED
WITH latest AS (
    SELECT *,
           [c FOR c IN coalesce(json_extract(object, '$.status.conditions[*]'), []::JSON[])
            IF (c->>'$.type') = 'Active'][1] AS active
    FROM staging.stg_k8s_events
    WHERE kind = 'ClusterQueue' AND api_version LIKE 'kueue.x-k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
    QUALIFY row_number() OVER (PARTITION BY cluster, coalesce(uid, name)
                               ORDER BY observed_at DESC, TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST) = 1
)
SELECT cluster, name, coalesce(object->>'$.spec.cohortName', object->>'$.spec.cohort') AS cohort,
       object->>'$.spec.stopPolicy' AS stop_policy,
       active->>'$.status' AS active_status, active->>'$.reason' AS active_reason,
       active->>'$.message' AS active_message,
       event_type = 'DELETED' AS deleted
FROM latest
QUALIFY row_number() OVER (PARTITION BY cluster, name ORDER BY deleted) = 1
