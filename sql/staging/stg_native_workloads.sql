-- Native scheduling.k8s.io Workloads (any version), one row per object uid whatever API version served it:
-- who controls them (job identity) and the gang policy of each pod group template.
-- column: cluster: the Workload
-- column: namespace: the Workload
-- column: name: the Workload
-- column: uid: the Workload
-- column: api_version: scheduling.k8s.io/v1alpha1 ... v1beta1 (of the latest observation)
-- column: controller_kind: spec.controllerRef (names only), else the controller ownerReference
-- column: controller_name: spec.controllerRef (names only), else the controller ownerReference
-- column: groups: one entry per pod group template: 1.35 spec.podGroups[] / 1.36+ spec.podGroupTemplates[] and
--   the leaves under 1.37 spec.compositePodGroupTemplates[] ({name, policy gang|basic, min_count})
-- column: deleted: the latest event was DELETED
WITH latest AS (
    SELECT *,
           [o FOR o IN coalesce(json_extract(object, '$.metadata.ownerReferences[*]'), []::JSON[])
            IF (o->>'$.controller') = 'true'][1] AS owner
    FROM staging.stg_k8s_events
    WHERE kind = 'Workload' AND api_version LIKE 'scheduling.k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
    QUALIFY row_number() OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)
                               ORDER BY observed_at DESC, TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST) = 1
),
templates AS (
    SELECT cluster, uid, namespace, name,
           coalesce(json_extract(object, '$.spec.podGroups[*]'), []::JSON[])
           || coalesce(json_extract(object, '$.spec.podGroupTemplates[*]'), []::JSON[])
           || coalesce(json_extract(object, '$.spec.compositePodGroupTemplates[*].podGroupTemplates[*]'), []::JSON[])
           || coalesce(json_extract(object,
                  '$.spec.compositePodGroupTemplates[*].compositePodGroupTemplates[*].podGroupTemplates[*]'), []::JSON[])
           -- WorkloadMaxTreeDepth = 4: leaves sit under at most 3 composite levels.
           || coalesce(json_extract(object, '$.spec.compositePodGroupTemplates[*].compositePodGroupTemplates[*]'
                                            || '.compositePodGroupTemplates[*].podGroupTemplates[*]'), []::JSON[])
               AS t
    FROM latest
)
SELECT
    l.cluster, l.namespace, l.name, l.uid, l.api_version,
    coalesce(l.object->>'$.spec.controllerRef.kind', l.owner->>'$.kind') AS controller_kind,
    coalesce(l.object->>'$.spec.controllerRef.name', l.owner->>'$.name') AS controller_name,
    [{'name': g->>'$.name',
      'policy': CASE WHEN json_exists(coalesce(g->'$.policy', g->'$.schedulingPolicy'), '$.gang') THEN 'gang'
                     ELSE 'basic' END,
      'min_count': TRY_CAST(coalesce(g->>'$.policy.gang.minCount', g->>'$.schedulingPolicy.gang.minCount') AS INTEGER)}
     FOR g IN t.t] AS groups,
    l.event_type = 'DELETED' AS deleted
FROM latest l
JOIN templates t ON t.cluster = l.cluster AND t.namespace = l.namespace AND t.name = l.name
 AND t.uid IS NOT DISTINCT FROM l.uid
