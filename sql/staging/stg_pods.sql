-- Pods: current state per pod (latest watch event by uid), with the labels, annotations and
-- fields that tie a pod to its job, gang and Kueue Workload, and when it was bound and first ran.
-- Times come from the pod's own evidence (PodScheduled lastTransitionTime, status.startTime,
-- containerStatuses[].state.*.startedAt), else from the first observation in that state. A state the
-- pod was already in when first seen, with no time of its own, happened before capture began: its
-- *_before_capture flag says so and its time is only an upper bound (the first observation).
-- column: cluster: cluster name stamped by the collector
-- column: namespace: the Pod
-- column: name: the Pod
-- column: uid: the Pod
-- column: node: spec.nodeName (NULL while unscheduled)
-- column: phase: status.phase of the latest event
-- column: deleted: the latest event was DELETED
-- column: created_at: metadata.creationTimestamp
-- column: first_seen_at: first observation of this pod by gangscope
-- column: bound_at: bound to a node: PodScheduled=True lastTransitionTime, else status.startTime, else the first
--   observation with spec.nodeName
-- column: bound_before_capture: already bound when first seen and no time of its own (bound_at is an upper bound)
-- column: first_running_at: containers first started (earliest containerStatuses startedAt, else Ready=True
--   lastTransitionTime, else the first observation of phase Running)
-- column: running_before_capture: already running when first seen and no time of its own
-- column: last_seen_at: newest observation of this pod
-- column: owner_kind: controller ownerReference
-- column: owner_name: controller ownerReference
-- column: jobset_name: label jobset.sigs.k8s.io/jobset-name
-- column: pod_group: coscheduling label / Volcano annotation, or native schedulingGroup
-- column: pod_group_system: coscheduling label / Volcano annotation, or native schedulingGroup
-- column: native_workload: spec.workloadRef.name (scheduling.k8s.io v1alpha1, k8s 1.35)
-- column: native_group: spec.workloadRef.podGroup and .podGroupReplicaKey (1.35): the gang is (Workload, podGroup,
--   replica key), each replica its own gang
-- column: native_replica_key: spec.workloadRef.podGroup and .podGroupReplicaKey (1.35)
-- column: kueue_workload: annotation kueue.x-k8s.io/workload
-- column: kueue_podset: Kueue pod labels
-- column: local_queue: Kueue pod labels
-- column: cluster_queue: Kueue pod labels
-- column: scheduling_gates: names of spec.schedulingGates
-- column: gpus: nvidia.com/gpu requested over all containers
-- column: disruption_reason: reason of condition DisruptionTarget=True (e.g. PreemptionByScheduler)
-- column: unscheduled_message: message of condition PodScheduled=False
-- column: disruption_at: lastTransitionTime of condition DisruptionTarget=True
-- column: node_selector: spec.nodeSelector (JSON object)
-- column: required_node_terms: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
--   .nodeSelectorTerms (JSON array; a node must match one term)
-- column: tolerations: spec.tolerations (JSON array)
-- column: disruption_message: message of condition DisruptionTarget=True (e.g. "Taint manager: deleting due to NoExecute
--   taint")
-- column: status_reason: status.reason: why the pod stopped (Evicted by the kubelet, Terminated by a node shutdown,
--   NodeLost, NodeShutdown, UnexpectedAdmissionError)
-- column: status_message: status.message (e.g. "The node was low on resource: memory. ...")
-- column: deletion_requested_at: when graceful deletion was requested (earliest metadata.deletionTimestamp seen minus
--   deletionGracePeriodSeconds): a container that exits after it is stopped, not crashed
-- column: restart_policy: spec.restartPolicy (Always, OnFailure, Never)
-- column: completion_index: the rank: label or annotation batch.kubernetes.io/job-completion-index (Indexed Jobs),
--   else JobSet's jobset.sigs.k8s.io/job-index
-- column: lws_name: label leaderworkerset.sigs.k8s.io/name (a LeaderWorkerSet's leader and worker pods)
-- column: ray_cluster: label ray.io/cluster (a RayCluster's head and worker pods)
-- column: ray_group: label ray.io/group (its worker group; headgroup for the head)
-- column: ray_origin_kind: labels ray.io/originated-from-crd / -cr-name (the RayJob / RayService behind a RayCluster)
-- column: ray_origin_name: labels ray.io/originated-from-crd / -cr-name
-- column: kubeflow_job: label training.kubeflow.org/job-name (PyTorchJob, MPIJob, ... pods, an MPIJob's launcher)
-- column: kubeflow_operator: label training.kubeflow.org/operator-name (mpi-operator, pytorchjob-controller, ...)
-- column: kueue_pod_group: Kueue plain-pod group: label kueue.x-k8s.io/pod-group-name
-- column: kueue_pod_group_total: its annotation kueue.x-k8s.io/pod-group-total-count (the group's size)
WITH ev AS (
    -- What each event says that the times below read, parsed once into a struct (e): an extraction per field
    -- parses the whole object again, and DuckDB keeps every parse of a vector of rows until it is done with it.
    SELECT *, coalesce(e.status.conditions, []) AS conds, coalesce(e.status.containerStatuses, []) AS containers
    FROM (SELECT *, coalesce(uid, namespace || '/' || name) AS key,
                 from_json(object, '{"metadata": {"deletionTimestamp": "VARCHAR",
                                               "deletionGracePeriodSeconds": "VARCHAR"},
                     "spec": {"nodeName": "VARCHAR"},
                     "status": {"phase": "VARCHAR", "startTime": "VARCHAR",
                                "conditions": [{"type": "VARCHAR", "status": "VARCHAR", "reason": "VARCHAR",
                                                "message": "VARCHAR", "lastTransitionTime": "VARCHAR"}],
                                "containerStatuses": [{"state": {"running": {"startedAt": "VARCHAR"},
                                                                 "terminated": {"startedAt": "VARCHAR"}},
                                                       "lastState": {"terminated": {"startedAt": "VARCHAR"}}}]}}') AS e
          FROM staging.stg_k8s_events
          WHERE kind = 'Pod' AND event_type IN ('ADDED', 'MODIFIED', 'DELETED'))
),
times AS (
    -- Per event: the times the object itself carries, and what state it shows.
    SELECT cluster, key, observed_at,
           e.spec.nodeName IS NOT NULL AS bound,
           e.status.phase = 'Running' AS running,
           coalesce(list_min([TRY_CAST(c.lastTransitionTime AS TIMESTAMPTZ) FOR c IN conds
                              IF c.type = 'PodScheduled' AND c.status = 'True']),
                    TRY_CAST(e.status.startTime AS TIMESTAMPTZ)) AS own_bound_at,
           -- deletionTimestamp is when the grace period ends: the request came deletionGracePeriodSeconds before it.
           TRY_CAST(e.metadata.deletionTimestamp AS TIMESTAMPTZ)
               - to_seconds(coalesce(TRY_CAST(e.metadata.deletionGracePeriodSeconds AS BIGINT), 0))
               AS deletion_ts,
           coalesce(list_min(flatten([[TRY_CAST(s.state.running.startedAt AS TIMESTAMPTZ),
                                       TRY_CAST(s.state.terminated.startedAt AS TIMESTAMPTZ),
                                       TRY_CAST(s.lastState.terminated.startedAt AS TIMESTAMPTZ)]
                                      FOR s IN containers])),
                    list_min([TRY_CAST(c.lastTransitionTime AS TIMESTAMPTZ) FOR c IN conds
                              IF c.type = 'Ready' AND c.status = 'True'])) AS own_running_at
    FROM ev
),
hist AS (
    SELECT cluster, key,
           min(observed_at) AS first_seen_at,
           max(observed_at) AS last_seen_at,
           min(own_bound_at) AS own_bound_at,
           min(observed_at) FILTER (WHERE bound) AS seen_bound_at,
           min(own_running_at) AS own_running_at,
           min(observed_at) FILTER (WHERE running) AS seen_running_at,
           min(deletion_ts) AS deletion_requested_at
    FROM times GROUP BY cluster, key
),
latest AS (
    -- The fields of the latest event read below, parsed once into a struct (f), labels and annotations as maps: ~35
    -- extractions, each parsing the object again, held over 512 MB for ~1,300 pods (issue 37).
    SELECT * EXCLUDE (e),
           from_json(object, '{"metadata": {"creationTimestamp": "VARCHAR", "labels": "MAP(VARCHAR, VARCHAR)",
                                            "annotations": "MAP(VARCHAR, VARCHAR)"},
                               "spec": {"nodeName": "VARCHAR", "restartPolicy": "VARCHAR",
                                        "schedulingGroup": {"podGroupName": "VARCHAR"},
                                        "workloadRef": {"name": "VARCHAR", "podGroup": "VARCHAR",
                                                        "podGroupReplicaKey": "VARCHAR"}},
                               "status": {"phase": "VARCHAR", "reason": "VARCHAR", "message": "VARCHAR"}}') AS f
    FROM (SELECT * FROM ev
          QUALIFY row_number() OVER (PARTITION BY cluster, key
                                     ORDER BY observed_at DESC, (event_type = 'DELETED') DESC,
                                              TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST) = 1)
),
owners AS (
    SELECT l.cluster, l.key, o->>'$.kind' AS owner_kind, o->>'$.name' AS owner_name
    FROM latest l, unnest(coalesce(json_extract(l.object, '$.metadata.ownerReferences[*]'), []::JSON[])) AS t(o)
    QUALIFY row_number() OVER (PARTITION BY l.cluster, l.key
                               ORDER BY coalesce(o->>'$.controller', 'false') = 'true' DESC) = 1
),
gpus AS (
    SELECT l.cluster, l.key,
           sum(coalesce(TRY_CAST(c.resources.requests."nvidia.com/gpu" AS INTEGER),
                        TRY_CAST(c.resources.limits."nvidia.com/gpu" AS INTEGER), 0)) AS gpus
    FROM latest l,
         unnest(coalesce(from_json(l.object->'$.spec.containers', '[{"resources": {"requests": {"nvidia.com/gpu":
             "VARCHAR"}, "limits": {"nvidia.com/gpu": "VARCHAR"}}}]'), [])) AS t(c)
    GROUP BY l.cluster, l.key
),
conds AS (
    SELECT l.cluster, l.key,
           max(c.reason) FILTER (WHERE c.type = 'DisruptionTarget' AND c.status = 'True') AS disruption_reason,
           max(c.message) FILTER (WHERE c.type = 'PodScheduled' AND c.status = 'False') AS unscheduled_message,
           max(c.message) FILTER (WHERE c.type = 'DisruptionTarget' AND c.status = 'True') AS disruption_message,
           min(TRY_CAST(c.lastTransitionTime AS TIMESTAMPTZ))
               FILTER (WHERE c.type = 'DisruptionTarget' AND c.status = 'True') AS disruption_at
    FROM latest l, unnest(l.conds) AS t(c)
    GROUP BY l.cluster, l.key
)
SELECT
    l.cluster,
    l.namespace,
    l.name,
    l.uid,
    l.f.spec.nodeName AS node,
    l.f.status.phase AS phase,
    l.event_type = 'DELETED' AS deleted,
    TRY_CAST(l.f.metadata.creationTimestamp AS TIMESTAMPTZ) AS created_at,
    h.first_seen_at,
    -- Bound no later than its containers started.
    least(coalesce(h.own_bound_at, h.seen_bound_at), h.own_running_at) AS bound_at,
    h.own_bound_at IS NULL AND h.own_running_at IS NULL AND h.seen_bound_at = h.first_seen_at AS bound_before_capture,
    coalesce(h.own_running_at, h.seen_running_at) AS first_running_at,
    h.own_running_at IS NULL AND h.seen_running_at = h.first_seen_at AS running_before_capture,
    h.last_seen_at,
    o.owner_kind,
    o.owner_name,
    l.f.metadata.labels['jobset.sigs.k8s.io/jobset-name'] AS jobset_name,
    coalesce(l.f.metadata.labels['scheduling.x-k8s.io/pod-group'],
             l.f.metadata.labels['pod-group.scheduling.x-k8s.io'],
             l.f.metadata.annotations['scheduling.k8s.io/group-name'],
             l.f.metadata.annotations['scheduling.volcano.sh/group-name'],
             l.f.spec.schedulingGroup.podGroupName) AS pod_group,
    CASE
        WHEN (l.f.metadata.labels['scheduling.x-k8s.io/pod-group']) IS NOT NULL
          OR (l.f.metadata.labels['pod-group.scheduling.x-k8s.io']) IS NOT NULL THEN 'coscheduling'
        WHEN (l.f.metadata.annotations['scheduling.k8s.io/group-name']) IS NOT NULL
          OR (l.f.metadata.annotations['scheduling.volcano.sh/group-name']) IS NOT NULL THEN 'volcano'
        WHEN (l.f.spec.schedulingGroup.podGroupName) IS NOT NULL THEN 'native'
    END AS pod_group_system,
    l.f.spec.workloadRef.name AS native_workload,
    l.f.spec.workloadRef.podGroup AS native_group,
    l.f.spec.workloadRef.podGroupReplicaKey AS native_replica_key,
    l.f.metadata.annotations['kueue.x-k8s.io/workload'] AS kueue_workload,
    l.f.metadata.labels['kueue.x-k8s.io/podset'] AS kueue_podset,
    coalesce(l.f.metadata.labels['kueue.x-k8s.io/local-queue-name'],
             l.f.metadata.labels['kueue.x-k8s.io/queue-name']) AS local_queue,
    l.f.metadata.labels['kueue.x-k8s.io/cluster-queue-name'] AS cluster_queue,
    coalesce(CAST(json_extract_string(l.object, '$.spec.schedulingGates[*].name') AS VARCHAR[]), [])
        AS scheduling_gates,
    coalesce(g.gpus, 0) AS gpus,
    c.disruption_reason,
    c.unscheduled_message,
    c.disruption_at,
    coalesce(json_extract(l.object, '$.spec.nodeSelector'), '{}'::JSON) AS node_selector,
    coalesce(json_extract(l.object, '$.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms'), '[]'::JSON) AS required_node_terms,
    coalesce(json_extract(l.object, '$.spec.tolerations'), '[]'::JSON) AS tolerations,
    c.disruption_message,
    l.f.status.reason AS status_reason,
    l.f.status.message AS status_message,
    h.deletion_requested_at,
    l.f.spec.restartPolicy AS restart_policy,
    coalesce(l.f.metadata.labels['batch.kubernetes.io/job-completion-index'],
             l.f.metadata.annotations['batch.kubernetes.io/job-completion-index'],
             l.f.metadata.labels['jobset.sigs.k8s.io/job-index']) AS completion_index,
    l.f.metadata.labels['leaderworkerset.sigs.k8s.io/name'] AS lws_name,
    l.f.metadata.labels['ray.io/cluster'] AS ray_cluster,
    l.f.metadata.labels['ray.io/group'] AS ray_group,
    l.f.metadata.labels['ray.io/originated-from-crd'] AS ray_origin_kind,
    l.f.metadata.labels['ray.io/originated-from-cr-name'] AS ray_origin_name,
    l.f.metadata.labels['training.kubeflow.org/job-name'] AS kubeflow_job,
    l.f.metadata.labels['training.kubeflow.org/operator-name'] AS kubeflow_operator,
    l.f.metadata.labels['kueue.x-k8s.io/pod-group-name'] AS kueue_pod_group,
    TRY_CAST(l.f.metadata.annotations['kueue.x-k8s.io/pod-group-total-count'] AS INTEGER)
        AS kueue_pod_group_total
FROM latest l
JOIN hist h USING (cluster, key)
LEFT JOIN owners o USING (cluster, key)
LEFT JOIN gpus g USING (cluster, key)
LEFT JOIN conds c USING (cluster, key)
