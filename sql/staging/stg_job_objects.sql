-- batch/v1 Jobs, JobSets (jobset.x-k8s.io) and the kinds teams submit (Kubeflow Trainer TrainJob, PyTorchJob,
-- MPIJob, LeaderWorkerSet, KubeRay RayCluster / RayJob): current state per object (latest watch event by uid), with
-- the failure the controller decided, how often a JobSet recreated its Jobs, the gang its spec asks for and the
-- submitted object it belongs to. A JobSet's child Job names its JobSet (label jobset.sigs.k8s.io/jobset-name, else
-- its controller owner), so a crash counts for the JobSet; a TrainJob's JobSet, an MPIJob's launcher Job, a RayJob's
-- RayCluster and submitter Job count for their owner (parent_job, up to two owner links: Job -> JobSet -> TrainJob).
-- column: cluster: the object
-- column: namespace: the object
-- column: name: the object
-- column: uid: the object
-- column: kind: Job, JobSet, TrainJob, PyTorchJob, MPIJob, LeaderWorkerSet, RayCluster, RayJob
-- column: parent_jobset: the JobSet a child Job belongs to (NULL for other Jobs and for JobSets)
-- column: parent_job: the submitted object this one counts for (its JobSet, TrainJob, MPIJob, RayJob), by controller
--   owner up to two links; NULL for a submitted object itself
-- column: parent_kind: that object's kind
-- column: spec_pods: the gang its spec asks for: a RayCluster's (or RayJob's rayClusterSpec's) head + minReplicas x
--   numOfHosts of each worker group; PyTorchJob / MPIJob runPolicy.schedulingPolicy.minAvailable, else the sum of
--   its replica specs' replicas (an MPIJob's launcher included); LeaderWorkerSet replicas x leaderWorkerTemplate.size;
--   TrainJob spec.trainer.numNodes; NULL for Jobs and JobSets
-- column: ray_worker_groups: a RayCluster's (RayJob's rayClusterSpec's) workerGroupSpecs as a list of {group, replicas,
--   min_replicas, max_replicas, hosts}; NULL for other kinds
-- column: owner_kind: controller ownerReference
-- column: owner_name: controller ownerReference
-- column: failed_pods: Job status.failed; JobSet sum of replicatedJobsStatus[].failed (failed child Jobs)
-- column: restarts: JobSet status.restarts (every recreate of all its Jobs); NULL for Jobs
-- column: backoff_limit: Job spec.backoffLimit
-- column: failed_reason: reason of condition Failed=True, else FailureTarget=True (BackoffLimitExceeded,
--   PodFailurePolicy, DeadlineExceeded, MaxFailedIndexesExceeded, FailedIndexes; JobSet FailedJobs,
--   ReachedMaxRestarts, FailJobSetFailurePolicyAction)
-- column: failed_message: its message (e.g. "Job has reached the specified backoff limit")
-- column: failed_at: its lastTransitionTime (FailureTarget's when earlier: the decision, before pods are gone)
-- column: completed_at: condition Complete / Completed / Succeeded True lastTransitionTime; a RayJob's status.endTime
--   once its jobDeploymentStatus is Complete (a failed RayJob: failed_reason its status.reason, else Failed)
-- column: restarting_at: JobSet condition RestartingJobSet=True lastTransitionTime (a restart under way)
-- column: deleted: the latest event was DELETED
-- column: created_at: metadata.creationTimestamp
-- column: last_seen_at: newest observation
WITH latest AS (
    SELECT *, max(observed_at) OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)) AS last_seen_at,
           coalesce(json_extract(object, '$.status.conditions[*]'), []::JSON[]) AS conds,
           CASE WHEN kind = 'RayJob' THEN object->>'$.status.jobDeploymentStatus' END AS ray_status
    FROM staging.stg_k8s_events
    WHERE event_type IN ('ADDED', 'MODIFIED', 'DELETED')
      AND ((kind = 'Job' AND api_version LIKE 'batch/%') OR kind = 'JobSet'
           OR (kind = 'TrainJob' AND api_version LIKE 'trainer.kubeflow.org/%')
           OR (kind IN ('PyTorchJob', 'MPIJob') AND api_version LIKE 'kubeflow.org/%')
           OR (kind = 'LeaderWorkerSet' AND api_version LIKE 'leaderworkerset.x-k8s.io/%')
           OR (kind IN ('RayCluster', 'RayJob') AND api_version LIKE 'ray.io/%'))
    QUALIFY row_number() OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)
                               ORDER BY observed_at DESC, (event_type = 'DELETED') DESC,
                                        TRY_CAST(resource_version AS BIGINT) DESC NULLS LAST) = 1
),
owners AS (
    SELECT l.cluster, l.uid, l.namespace, l.name, o->>'$.kind' AS owner_kind, o->>'$.name' AS owner_name
    FROM latest l, unnest(coalesce(json_extract(l.object, '$.metadata.ownerReferences[*]'), []::JSON[])) AS t(o)
    QUALIFY row_number() OVER (PARTITION BY l.cluster, l.uid, l.namespace, l.name
                               ORDER BY coalesce(o->>'$.controller', 'false') = 'true' DESC) = 1
),
cond AS (
    SELECT l.cluster, l.uid, l.namespace, l.name,
           [c FOR c IN l.conds IF (c->>'$.type') = 'Failed' AND (c->>'$.status') = 'True'][1] AS failed,
           [c FOR c IN l.conds IF (c->>'$.type') = 'FailureTarget' AND (c->>'$.status') = 'True'][1] AS target,
           [c FOR c IN l.conds IF (c->>'$.type') IN ('Complete', 'Completed', 'Succeeded')
                               AND (c->>'$.status') = 'True'][1]
               AS complete,
           [c FOR c IN l.conds IF (c->>'$.type') = 'RestartingJobSet' AND (c->>'$.status') = 'True'][1] AS restarting
    FROM latest l
),
ray AS (
    -- head + minReplicas x numOfHosts of each worker group (KubeRay's own gang size for Volcano / Kueue)
    SELECT l.cluster, l.uid, l.namespace, l.name,
           CAST(1 + coalesce(list_sum([coalesce(TRY_CAST(g->>'$.minReplicas' AS INTEGER), 0)
                                       * coalesce(TRY_CAST(g->>'$.numOfHosts' AS INTEGER), 1)
                                       FOR g IN json_extract(s, '$.workerGroupSpecs[*]')]), 0) AS INTEGER) AS pods,
           [{'group': g->>'$.groupName', 'replicas': TRY_CAST(g->>'$.replicas' AS INTEGER),
            'min_replicas': TRY_CAST(g->>'$.minReplicas' AS INTEGER),
            'max_replicas': TRY_CAST(g->>'$.maxReplicas' AS INTEGER),
            'hosts': coalesce(TRY_CAST(g->>'$.numOfHosts' AS INTEGER), 1)}
           FOR g IN json_extract(s, '$.workerGroupSpecs[*]')] AS groups
    FROM (SELECT *, CASE kind WHEN 'RayCluster' THEN json_extract(object, '$.spec')
                              ELSE json_extract(object, '$.spec.rayClusterSpec') END AS s
          FROM latest WHERE kind IN ('RayCluster', 'RayJob')) l
    WHERE s IS NOT NULL
),
replicas AS (
    SELECT l.cluster, l.uid, l.namespace, l.name,
           coalesce(TRY_CAST(l.object->>'$.spec.runPolicy.schedulingPolicy.minAvailable' AS INTEGER),
                    CAST(list_sum([coalesce(TRY_CAST(json_extract(r, '$."' || k || '".replicas') AS INTEGER), 1)
                                   FOR k IN json_keys(r)]) AS INTEGER)) AS pods
    FROM (SELECT *, CASE kind WHEN 'PyTorchJob' THEN json_extract(object, '$.spec.pytorchReplicaSpecs')
                              ELSE json_extract(object, '$.spec.mpiReplicaSpecs') END AS r
          FROM latest WHERE kind IN ('PyTorchJob', 'MPIJob')) l
    WHERE r IS NOT NULL
),
tops AS (
    -- Whom an object counts for: its controller owner when that is a submitted kind we know, and that one's.
    SELECT o.cluster, o.uid, o.namespace, o.name, o.owner_kind AS kind1, o.owner_name AS name1,
           o2.owner_kind AS kind2, o2.owner_name AS name2
    FROM owners o
    JOIN latest l ON l.cluster = o.cluster AND l.uid IS NOT DISTINCT FROM o.uid AND l.namespace = o.namespace
     AND l.name = o.name
    LEFT JOIN (SELECT ow.*, lo.kind FROM owners ow
               JOIN latest lo ON lo.cluster = ow.cluster AND lo.uid IS NOT DISTINCT FROM ow.uid
                AND lo.namespace = ow.namespace AND lo.name = ow.name
               WHERE ow.owner_kind IN ('TrainJob', 'RayJob', 'MPIJob', 'PyTorchJob', 'JobSet')) o2
      ON o2.cluster = o.cluster AND o2.namespace = o.namespace AND o2.kind = o.owner_kind AND o2.name = o.owner_name
    WHERE o.owner_kind IN ('TrainJob', 'RayJob', 'MPIJob', 'PyTorchJob', 'JobSet', 'LeaderWorkerSet')
      AND l.kind IN ('Job', 'JobSet', 'RayCluster')
)
SELECT
    l.cluster, l.namespace, l.name, l.uid, l.kind,
    CASE WHEN l.kind = 'Job' THEN coalesce(l.object->>'$.metadata.labels."jobset.sigs.k8s.io/jobset-name"',
                                           CASE WHEN o.owner_kind = 'JobSet' THEN o.owner_name END) END AS parent_jobset,
    coalesce(t.name2, t.name1, CASE WHEN l.kind = 'Job'
                                    THEN l.object->>'$.metadata.labels."jobset.sigs.k8s.io/jobset-name"' END)
        AS parent_job,
    coalesce(t.kind2, t.kind1, CASE WHEN l.kind = 'Job'
                                    AND (l.object->>'$.metadata.labels."jobset.sigs.k8s.io/jobset-name"') IS NOT NULL
                                    THEN 'JobSet' END) AS parent_kind,
    CASE l.kind WHEN 'LeaderWorkerSet'
                THEN coalesce(TRY_CAST(l.object->>'$.spec.replicas' AS INTEGER), 1)
                     * coalesce(TRY_CAST(l.object->>'$.spec.leaderWorkerTemplate.size' AS INTEGER), 1)
                WHEN 'TrainJob' THEN TRY_CAST(l.object->>'$.spec.trainer.numNodes' AS INTEGER)
                ELSE coalesce(r.pods, rp.pods) END AS spec_pods,
    r.groups AS ray_worker_groups,
    o.owner_kind, o.owner_name,
    CASE WHEN l.kind = 'Job' THEN TRY_CAST(l.object->>'$.status.failed' AS INTEGER)
         WHEN l.kind = 'JobSet' THEN CAST(list_sum([coalesce(TRY_CAST(r->>'$.failed' AS INTEGER), 0)
                             FOR r IN coalesce(json_extract(l.object, '$.status.replicatedJobsStatus[*]'), []::JSON[])])
                   AS INTEGER) END AS failed_pods,
    CASE WHEN l.kind = 'JobSet' THEN TRY_CAST(l.object->>'$.status.restarts' AS INTEGER) END AS restarts,
    TRY_CAST(l.object->>'$.spec.backoffLimit' AS INTEGER) AS backoff_limit,
    coalesce(c.failed->>'$.reason', c.target->>'$.reason', CASE WHEN l.ray_status = 'Failed'
             THEN coalesce(l.object->>'$.status.reason', 'Failed') END) AS failed_reason,
    coalesce(c.failed->>'$.message', c.target->>'$.message',
             CASE WHEN l.ray_status = 'Failed' THEN l.object->>'$.status.message' END) AS failed_message,
    coalesce(least(TRY_CAST(c.failed->>'$.lastTransitionTime' AS TIMESTAMPTZ),
                   TRY_CAST(c.target->>'$.lastTransitionTime' AS TIMESTAMPTZ)),
             CASE WHEN l.ray_status = 'Failed' THEN TRY_CAST(l.object->>'$.status.endTime' AS TIMESTAMPTZ) END)
        AS failed_at,
    coalesce(TRY_CAST(c.complete->>'$.lastTransitionTime' AS TIMESTAMPTZ),
             CASE WHEN l.ray_status = 'Complete' THEN TRY_CAST(l.object->>'$.status.endTime' AS TIMESTAMPTZ) END)
        AS completed_at,
    TRY_CAST(c.restarting->>'$.lastTransitionTime' AS TIMESTAMPTZ) AS restarting_at,
    l.event_type = 'DELETED' AS deleted,
    TRY_CAST(l.object->>'$.metadata.creationTimestamp' AS TIMESTAMPTZ) AS created_at,
    l.last_seen_at
FROM latest l
LEFT JOIN owners o ON o.cluster = l.cluster AND o.uid IS NOT DISTINCT FROM l.uid AND o.namespace = l.namespace
 AND o.name = l.name
LEFT JOIN cond c ON c.cluster = l.cluster AND c.uid IS NOT DISTINCT FROM l.uid AND c.namespace = l.namespace
 AND c.name = l.name
LEFT JOIN tops t ON t.cluster = l.cluster AND t.uid IS NOT DISTINCT FROM l.uid AND t.namespace = l.namespace
 AND t.name = l.name
LEFT JOIN ray r ON r.cluster = l.cluster AND r.uid IS NOT DISTINCT FROM l.uid AND r.namespace = l.namespace
 AND r.name = l.name
LEFT JOIN replicas rp ON rp.cluster = l.cluster AND rp.uid IS NOT DISTINCT FROM l.uid AND rp.namespace = l.namespace
 AND rp.name = l.name
