-- Gang objects of the three systems in one shape, current state per object: scheduler-plugins
-- coscheduling PodGroup (scheduling.x-k8s.io), Volcano PodGroup (scheduling.volcano.sh), native
-- scheduling.k8s.io PodGroup (1.36 v1alpha2 / 1.37 v1beta1, v1alpha3) and the 1.35 v1alpha1
-- Workload whose podGroups carry the gang policy.
-- column: cluster: the PodGroup (or native v1alpha1 Workload)
-- column: namespace: the PodGroup (or native v1alpha1 Workload)
-- column: name: the PodGroup (or native v1alpha1 Workload)
-- column: system: coscheduling, volcano, native
-- column: min_member: spec.minMember / schedulingPolicy.gang.minCount
-- column: schedule_timeout_s: spec.scheduleTimeoutSeconds (coscheduling only)
-- column: phase: status.phase; for native groups Scheduled / Unschedulable from the conditions (NULL without one)
-- column: scheduled_reason: native PodGroupScheduled / PodGroupInitiallyScheduled, Volcano Unschedulable
-- column: scheduled_message: native PodGroupScheduled / PodGroupInitiallyScheduled, Volcano Unschedulable
-- column: scheduled_at: when the group was scheduled, from its own conditions (native PodGroupScheduled /
--   PodGroupInitiallyScheduled True, Volcano Scheduled True lastTransitionTime); NULL without one
-- column: native_workload: the scheduling.k8s.io Workload the native PodGroup belongs to
-- column: owner_kind: controller ownerReference (else the first), e.g. the Job that created the PodGroup
-- column: owner_name: controller ownerReference (else the first), e.g. the Job that created the PodGroup
-- column: topology_key: native schedulingConstraints.topology[0].key
-- column: created_at: metadata.creationTimestamp
-- column: last_seen_at: newest observation
-- column: deleted: the latest event was DELETED
WITH latest AS (
    -- One row per object uid: a 1.37 server serves the same PodGroup as v1beta1 and v1alpha3.
    SELECT *, max(observed_at) OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)) AS last_seen_at,
           [o FOR o IN coalesce(json_extract(object, '$.metadata.ownerReferences[*]'), []::JSON[])
            IF (o->>'$.controller') = 'true'][1] AS owner
    FROM staging.stg_k8s_events
    WHERE event_type IN ('ADDED', 'MODIFIED', 'DELETED')
      AND ((kind = 'PodGroup' AND (api_version LIKE 'scheduling.x-k8s.io/%' OR api_version LIKE 'scheduling.volcano.sh/%'
                                   OR api_version LIKE 'scheduling.k8s.io/%'))
           OR (kind = 'Workload' AND api_version = 'scheduling.k8s.io/v1alpha1'))
    QUALIFY row_number() OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)
                               ORDER BY observed_at DESC, TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST) = 1
),
cond AS (
    SELECT l.cluster, l.api_version, l.namespace, l.name,
           arg_max(c->>'$.status', coalesce(c->>'$.lastTransitionTime', '')) AS cstatus,
           arg_max(c->>'$.reason', coalesce(c->>'$.lastTransitionTime', '')) AS creason,
           arg_max(c->>'$.message', coalesce(c->>'$.lastTransitionTime', '')) AS cmessage,
           min(TRY_CAST(c->>'$.lastTransitionTime' AS TIMESTAMPTZ))
               FILTER (WHERE (c->>'$.type') <> 'Unschedulable' AND (c->>'$.status') = 'True') AS scheduled_at
    FROM latest l, unnest(coalesce(json_extract(l.object, '$.status.conditions[*]'), []::JSON[])) AS t(c)
    -- By type, never by position: a 1.37 PodGroup may also carry DisruptionTarget.
    WHERE (c->>'$.type') IN ('PodGroupScheduled', 'PodGroupInitiallyScheduled', 'Unschedulable', 'Scheduled')
    GROUP BY ALL
)
SELECT
    l.cluster, l.namespace, l.name,
    CASE WHEN l.api_version LIKE 'scheduling.x-k8s.io/%' THEN 'coscheduling'
         WHEN l.api_version LIKE 'scheduling.volcano.sh/%' THEN 'volcano'
         ELSE 'native' END AS system,
    coalesce(TRY_CAST(l.object->>'$.spec.minMember' AS INTEGER),
             TRY_CAST(l.object->>'$.spec.schedulingPolicy.gang.minCount' AS INTEGER),
             TRY_CAST(l.object->>'$.spec.podGroups[0].policy.gang.minCount' AS INTEGER)) AS min_member,
    TRY_CAST(l.object->>'$.spec.scheduleTimeoutSeconds' AS INTEGER) AS schedule_timeout_s,
    CASE
        WHEN l.api_version LIKE 'scheduling.k8s.io/%' THEN
            -- No condition is no news (a 1.35 Workload has no status; the scheduler has not written one yet).
            CASE WHEN c.cstatus = 'True' THEN 'Scheduled' WHEN c.cstatus = 'False' THEN 'Unschedulable' END
        ELSE l.object->>'$.status.phase'
    END AS phase,
    c.creason AS scheduled_reason,
    c.cmessage AS scheduled_message,
    c.scheduled_at,
    CASE WHEN l.kind = 'Workload' THEN l.name
         ELSE coalesce(l.object->>'$.spec.workloadRef.workloadName',
                       l.object->>'$.spec.podGroupTemplateRef.workload.workloadName') END AS native_workload,
    coalesce(l.owner->>'$.kind', l.object->>'$.metadata.ownerReferences[0].kind') AS owner_kind,
    coalesce(l.owner->>'$.name', l.object->>'$.metadata.ownerReferences[0].name') AS owner_name,
    l.object->>'$.spec.schedulingConstraints.topology[0].key' AS topology_key,
    TRY_CAST(l.object->>'$.metadata.creationTimestamp' AS TIMESTAMPTZ) AS created_at,
    l.last_seen_at,
    l.event_type = 'DELETED' AS deleted
FROM latest l
LEFT JOIN cond c USING (cluster, api_version, namespace, name)
