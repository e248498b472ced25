-- Nodes: current state per Node (latest watch event).
-- column: cluster: the Node
-- column: name: the Node
-- column: labels: metadata.labels (JSON object)
-- column: gpus: status.allocatable nvidia.com/gpu (else capacity)
-- column: taints: spec.taints (JSON array)
-- column: unschedulable: spec.unschedulable
-- column: ready: condition Ready status ('True'/'False'/'Unknown')
-- column: deleted: the latest event was DELETED
-- column: created_at: metadata.creationTimestamp
-- column: last_seen_at: newest observation
WITH latest AS (
    SELECT *, max(observed_at) OVER (PARTITION BY cluster, name) AS last_seen_at
    FROM staging.stg_k8s_events
    WHERE kind = 'Node' AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
    QUALIFY row_number() OVER (PARTITION BY cluster, name
                               ORDER BY observed_at DESC, TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST) = 1
)
SELECT
    cluster,
    name,
    coalesce(json_extract(object, '$.metadata.labels'), '{}'::JSON) AS labels,
    coalesce(TRY_CAST(object->>'$.status.allocatable."nvidia.com/gpu"' AS INTEGER),
             TRY_CAST(object->>'$.status.capacity."nvidia.com/gpu"' AS INTEGER), 0) AS gpus,
    coalesce(json_extract(object, '$.spec.taints'), '[]'::JSON) AS taints,
    coalesce(TRY_CAST(object->>'$.spec.unschedulable' AS BOOLEAN), false) AS unschedulable,
    (SELECT max(c->>'$.status') FROM unnest(coalesce(json_extract(object, '$.status.conditions[*]'), []::JSON[])) AS t(c)
      WHERE (c->>'$.type') = 'Ready') AS ready,
    event_type = 'DELETED' AS deleted,
    TRY_CAST(object->>'$.metadata.creationTimestamp' AS TIMESTAMPTZ) AS created_at,
    last_seen_at
FROM latest
