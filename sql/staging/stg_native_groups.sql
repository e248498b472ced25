-- Native scheduling.k8s.io gang objects (1.36 v1alpha2 PodGroup; 1.37 v1beta1 / v1alpha3 PodGroup and
-- v1alpha3 CompositePodGroup), current state, one row per object uid whatever API version served it (1.37
-- serves one stored PodGroup as both v1beta1 and v1alpha3). Conditions are read by type, never by position.
-- column: cluster: the object
-- column: namespace: the object
-- column: name: the object
-- column: uid: the object (the key)
-- column: kind: PodGroup or CompositePodGroup
-- column: api_versions: every scheduling.k8s.io version the object was seen in (sorted)
-- column: parent: spec.parentCompositePodGroupName (NULL: root of its hierarchy)
-- column: native_workload: spec.workloadRef.workloadName (1.37) / spec.podGroupTemplateRef.workload.workloadName (1.36)
-- column: template: spec.workloadRef.templateName (1.37) / podGroupTemplateRef.workload.podGroupTemplateName (1.36)
-- column: policy: gang or basic (spec.schedulingPolicy); basic (the 1.37 Job default) schedules pod by pod
-- column: min_count: PodGroup spec.schedulingPolicy.gang.minCount (pods; NULL for basic)
-- column: min_group_count: CompositePodGroup spec.schedulingPolicy.gang.minGroupCount (child groups)
-- column: owner_kind: controller ownerReference (the Job that created the group, in 1.37)
-- column: owner_name: controller ownerReference (the Job that created the group, in 1.37)
-- column: scheduled_status: True / False of PodGroupInitiallyScheduled (1.37), PodGroupScheduled (1.36) or
--   CompositePodGroupInitiallyScheduled; NULL without one (1.37 CompositePodGroups carry no status: not Pending)
-- column: scheduled_reason: of that condition (Scheduled, Unschedulable, SchedulerError, Invalid)
-- column: scheduled_message: of that condition
-- column: scheduled_at: lastTransitionTime of that condition when True (True never returns to False)
-- column: disruption_reason: DisruptionTarget=True reason (PreemptionByScheduler), and when
-- column: disruption_at: DisruptionTarget=True reason (PreemptionByScheduler), and when
-- column: created_at: metadata.creationTimestamp
-- column: last_seen_at: newest observation
-- column: deleted: the latest event was DELETED
WITH ev AS (
    SELECT *, coalesce(uid, namespace || '/' || name) AS key
    FROM staging.stg_k8s_events
    WHERE kind IN ('PodGroup', 'CompositePodGroup') AND api_version LIKE 'scheduling.k8s.io/%'
      AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
),
hist AS (
    SELECT cluster, key, list_sort(list(DISTINCT split_part(api_version, '/', 2))) AS api_versions,
           max(observed_at) AS last_seen_at
    FROM ev GROUP BY cluster, key
),
latest AS (
    SELECT *,
           coalesce(json_extract(object, '$.status.conditions[*]'), []::JSON[]) AS conds,
           [o FOR o IN coalesce(json_extract(object, '$.metadata.ownerReferences[*]'), []::JSON[])
            IF (o->>'$.controller') = 'true'][1] AS owner
    FROM ev
    QUALIFY row_number() OVER (PARTITION BY cluster, key
                               ORDER BY observed_at DESC, TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST,
                                        (event_type = 'DELETED') DESC) = 1
),
picked AS (
    SELECT *,
           [c FOR c IN conds IF (c->>'$.type') IN ('PodGroupInitiallyScheduled', 'PodGroupScheduled',
                                                   'CompositePodGroupInitiallyScheduled')][1] AS sched,
           [c FOR c IN conds IF (c->>'$.type') = 'DisruptionTarget' AND (c->>'$.status') = 'True'][1] AS disr
    FROM latest
)
SELECT
    l.cluster, l.namespace, l.name, l.key AS uid, l.kind, h.api_versions,
    l.object->>'$.spec.parentCompositePodGroupName' AS parent,
    coalesce(l.object->>'$.spec.workloadRef.workloadName',
             l.object->>'$.spec.podGroupTemplateRef.workload.workloadName') AS native_workload,
    coalesce(l.object->>'$.spec.workloadRef.templateName',
             l.object->>'$.spec.podGroupTemplateRef.workload.podGroupTemplateName') AS template,
    CASE WHEN json_exists(l.object, '$.spec.schedulingPolicy.gang') THEN 'gang'
         WHEN json_exists(l.object, '$.spec.schedulingPolicy.basic') THEN 'basic' END AS policy,
    CASE WHEN l.kind = 'PodGroup' THEN TRY_CAST(l.object->>'$.spec.schedulingPolicy.gang.minCount' AS INTEGER) END
        AS min_count,
    CASE WHEN l.kind = 'CompositePodGroup'
         THEN TRY_CAST(l.object->>'$.spec.schedulingPolicy.gang.minGroupCount' AS INTEGER) END AS min_group_count,
    l.owner->>'$.kind' AS owner_kind,
    l.owner->>'$.name' AS owner_name,
    l.sched->>'$.status' AS scheduled_status,
    l.sched->>'$.reason' AS scheduled_reason,
    l.sched->>'$.message' AS scheduled_message,
    CASE WHEN (l.sched->>'$.status') = 'True' THEN TRY_CAST(l.sched->>'$.lastTransitionTime' AS TIMESTAMPTZ) END
        AS scheduled_at,
    l.disr->>'$.reason' AS disruption_reason,
    TRY_CAST(l.disr->>'$.lastTransitionTime' AS TIMESTAMPTZ) AS disruption_at,
    TRY_CAST(l.object->>'$.metadata.creationTimestamp' AS TIMESTAMPTZ) AS created_at,
    h.last_seen_at,
    l.event_type = 'DELETED' AS deleted
FROM picked l
JOIN hist h USING (cluster, key)
