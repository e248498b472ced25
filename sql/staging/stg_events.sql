-- Events of both shapes (core/v1 Event and events.k8s.io/v1 Event) in one table, one row per Event object
-- (latest version), with the object it is about and its first/last occurrence.
-- column: cluster: the Event's namespace
-- column: namespace: the Event's namespace
-- column: uid: Event uid (or namespace/name)
-- column: api_version: v1 or events.k8s.io/v1
-- column: object_kind: involvedObject (v1) / regarding (events.k8s.io)
-- column: object_name: involvedObject (v1) / regarding (events.k8s.io)
-- column: object_namespace: involvedObject (v1) / regarding (events.k8s.io)
-- column: type: Normal / Warning
-- column: reason: e.g. FailedScheduling, Preempted, Pending, EvictedDueToPreempted
-- column: message: message (v1) / note (events.k8s.io)
-- column: first_at: first and last occurrence
-- column: last_at: first and last occurrence
-- column: count: occurrences (count / series.count / deprecatedCount)
-- column: host: the node that reported it (source.host / reportingInstance of the kubelet; NULL for controllers)
WITH latest AS (
    SELECT * FROM staging.stg_k8s_events
    WHERE kind = 'Event' AND event_type IN ('ADDED', 'MODIFIED')
    QUALIFY row_number() OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)
                               ORDER BY observed_at DESC) = 1
)
SELECT
    cluster,
    namespace,
    coalesce(uid, namespace || '/' || name) AS uid,
    api_version,
    coalesce(object->>'$.involvedObject.kind', object->>'$.regarding.kind') AS object_kind,
    coalesce(object->>'$.involvedObject.name', object->>'$.regarding.name') AS object_name,
    coalesce(object->>'$.involvedObject.namespace', object->>'$.regarding.namespace', namespace) AS object_namespace,
    object->>'$.type' AS type,
    object->>'$.reason' AS reason,
    coalesce(object->>'$.message', object->>'$.note') AS message,
    coalesce(TRY_CAST(object->>'$.firstTimestamp' AS TIMESTAMPTZ),
             TRY_CAST(object->>'$.deprecatedFirstTimestamp' AS TIMESTAMPTZ),
             TRY_CAST(object->>'$.eventTime' AS TIMESTAMPTZ),
             TRY_CAST(object->>'$.lastTimestamp' AS TIMESTAMPTZ),
             observed_at) AS first_at,
    coalesce(TRY_CAST(object->>'$.series.lastObservedTime' AS TIMESTAMPTZ),
             TRY_CAST(object->>'$.lastTimestamp' AS TIMESTAMPTZ),
             TRY_CAST(object->>'$.deprecatedLastTimestamp' AS TIMESTAMPTZ),
             TRY_CAST(object->>'$.eventTime' AS TIMESTAMPTZ),
             observed_at) AS last_at,
    coalesce(TRY_CAST(object->>'$.series.count' AS INTEGER), TRY_CAST(object->>'$.count' AS INTEGER),
             TRY_CAST(object->>'$.deprecatedCount' AS INTEGER), 1) AS count,
    CASE WHEN coalesce(object->>'$.source.component', object->>'$.reportingController',
                       object->>'$.reportingComponent') = 'kubelet'
         THEN coalesce(object->>'$.source.host', object->>'$.reportingInstance',
                       object->>'$.deprecatedSource.host') END AS host
FROM latest
