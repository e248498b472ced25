-- Kueue Workloads (v1beta1 and v1beta2): current state per Workload.
-- column: cluster: the Workload
-- column: namespace: the Workload
-- column: name: the Workload
-- column: uid: the Workload
-- column: api_version: kueue.x-k8s.io/v1beta1 or v1beta2
-- column: owner_kind: controller ownerReference (the job, CONTRACT section 2 identity); a Kueue plain-pod group's
--   Workload, owned by its pods with none as controller and named after the group: PodGroup and the Workload's name
-- column: owner_name: controller ownerReference (the job, CONTRACT section 2 identity)
-- column: queue_name: spec.queueName (LocalQueue)
-- column: cluster_queue: status.admission.clusterQueue
-- column: pod_count: sum of spec.podSets[].count
-- column: gpus: GPUs the Workload asks for: sum of podSets[].count x its containers' nvidia.com/gpu requests
-- column: required_topology: topologyRequest (or the pod template annotation) of the first podSet that has one
-- column: preferred_topology: topologyRequest (or the pod template annotation) of the first podSet that has one
-- column: slice_topology: podSetSliceRequiredTopology
-- column: pod_group: gang PodGroup its pod template names (coscheduling label, Volcano annotation, native
--   schedulingGroup), so a PodGroup with no pods yet attaches to this Workload's job
-- column: requeue_count: status.requeueState.count
-- column: created_at: metadata.creationTimestamp
-- column: last_seen_at: newest observation
-- column: deleted: the latest event was DELETED
WITH latest AS (
    SELECT *, max(observed_at) OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)) AS last_seen_at
    FROM staging.stg_k8s_events
    WHERE kind = 'Workload' AND api_version LIKE 'kueue.x-k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
    QUALIFY row_number() OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)
                               ORDER BY observed_at DESC, TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST) = 1
),
owners AS (
    SELECT l.cluster, l.namespace, l.name,
           CASE WHEN (o->>'$.kind') = 'Pod' AND coalesce(o->>'$.controller', 'false') <> 'true' THEN 'PodGroup'
                ELSE o->>'$.kind' END AS owner_kind,
           CASE WHEN (o->>'$.kind') = 'Pod' AND coalesce(o->>'$.controller', 'false') <> 'true' THEN l.name
                ELSE o->>'$.name' END AS owner_name
    FROM latest l, unnest(coalesce(json_extract(l.object, '$.metadata.ownerReferences[*]'), []::JSON[])) AS t(o)
    QUALIFY row_number() OVER (PARTITION BY l.cluster, l.namespace, l.name
                               ORDER BY coalesce(o->>'$.controller', 'false') = 'true' DESC) = 1
),
podsets AS (
    SELECT l.cluster, l.namespace, l.name,
           CAST(sum(coalesce(TRY_CAST(p->>'$.count' AS INTEGER), 1)) AS INTEGER) AS pod_count,
           CAST(sum(coalesce(TRY_CAST(p->>'$.count' AS INTEGER), 1) * coalesce(list_sum(list_transform(
               CAST(coalesce(json_extract(p, '$.template.spec.containers'), '[]') AS JSON[]),
               c -> TRY_CAST(json_extract_string(c, '$.resources.requests."nvidia.com/gpu"') AS DOUBLE))), 0))
               AS INTEGER) AS gpus,
           min(coalesce(p->>'$.topologyRequest.required',
                        p->>'$.template.metadata.annotations."kueue.x-k8s.io/podset-required-topology"'))
               AS required_topology,
           min(coalesce(p->>'$.topologyRequest.preferred',
                        p->>'$.template.metadata.annotations."kueue.x-k8s.io/podset-preferred-topology"'))
               AS preferred_topology,
           min(coalesce(p->>'$.topologyRequest.podSetSliceRequiredTopology',
                        p->>'$.template.metadata.annotations."kueue.x-k8s.io/podset-slice-required-topology"'))
               AS slice_topology,
           min(coalesce(p->>'$.template.metadata.labels."scheduling.x-k8s.io/pod-group"',
                        p->>'$.template.metadata.annotations."scheduling.k8s.io/group-name"',
                        p->>'$.template.metadata.annotations."scheduling.volcano.sh/group-name"',
                        p->>'$.template.spec.schedulingGroup.podGroupName')) AS pod_group
    FROM latest l, unnest(coalesce(json_extract(l.object, '$.spec.podSets[*]'), []::JSON[])) AS t(p)
    GROUP BY ALL
)
SELECT
    l.cluster, l.namespace, l.name, l.uid, l.api_version,
    o.owner_kind, o.owner_name,
    l.object->>'$.spec.queueName' AS queue_name,
    l.object->>'$.status.admission.clusterQueue' AS cluster_queue,
    p.pod_count, p.gpus, p.required_topology, p.preferred_topology, p.slice_topology, p.pod_group,
    coalesce(TRY_CAST(l.object->>'$.status.requeueState.count' AS INTEGER), 0) AS requeue_count,
    TRY_CAST(l.object->>'$.metadata.creationTimestamp' AS TIMESTAMPTZ) AS created_at,
    l.last_seen_at,
    l.event_type = 'DELETED' AS deleted
FROM latest l
LEFT JOIN owners o USING (cluster, namespace, name)
LEFT JOIN podsets p USING (cluster, namespace, name)
