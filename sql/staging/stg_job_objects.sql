-- batch/v1 Jobs and JobSets (jobset.x-k8s.io): current state per object (latest watch event by uid), with the
-- failure the controller decided and how often a JobSet recreated its Jobs. A JobSet's child Job names its JobSet
-- (label jobset.sigs.k8s.io/jobset-name, else its controller owner), so a crash counts for the JobSet.
-- column: cluster: the object
-- column: namespace: the object
-- column: name: the object
-- column: uid: the object
-- column: kind: Job or JobSet
-- column: parent_jobset: the JobSet a child Job belongs to (NULL for other Jobs and for JobSets)
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
-- column: completed_at: condition Complete / Completed True lastTransitionTime
-- column: restarting_at: JobSet condition RestartingJobSet=True lastTransitionTime (a restart under way)
-- column: deleted: the latest event was DELETED
-- column: created_at: metadata.creationTimestamp
-- column: last_seen_at: newest observation
WITH latest AS (
    SELECT *, max(observed_at) OVER (PARTITION BY cluster, coalesce(uid, namespace || '/' || name)) AS last_seen_at,
           coalesce(json_extract(object, '$.status.conditions[*]'), []::JSON[]) AS conds
    FROM staging.stg_k8s_events
    WHERE kind IN ('Job', 'JobSet') AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
      AND (kind = 'JobSet' OR api_version LIKE 'batch/%')
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
           [c FOR c IN l.conds IF (c->>'$.type') IN ('Complete', 'Completed') AND (c->>'$.status') = 'True'][1]
               AS complete,
           [c FOR c IN l.conds IF (c->>'$.type') = 'RestartingJobSet' AND (c->>'$.status') = 'True'][1] AS restarting
    FROM latest l
)
SELECT
    l.cluster, l.namespace, l.name, l.uid, l.kind,
    CASE WHEN l.kind = 'Job' THEN coalesce(l.object->>'$.metadata.labels."jobset.sigs.k8s.io/jobset-name"',
                                           CASE WHEN o.owner_kind = 'JobSet' THEN o.owner_name END) END AS parent_jobset,
    o.owner_kind, o.owner_name,
    CASE WHEN l.kind = 'Job' THEN TRY_CAST(l.object->>'$.status.failed' AS INTEGER)
         ELSE CAST(list_sum([coalesce(TRY_CAST(r->>'$.failed' AS INTEGER), 0)
                             FOR r IN coalesce(json_extract(l.object, '$.status.replicatedJobsStatus[*]'), []::JSON[])])
                   AS INTEGER) END AS failed_pods,
    CASE WHEN l.kind = 'JobSet' THEN TRY_CAST(l.object->>'$.status.restarts' AS INTEGER) END AS restarts,
    TRY_CAST(l.object->>'$.spec.backoffLimit' AS INTEGER) AS backoff_limit,
    coalesce(c.failed->>'$.reason', c.target->>'$.reason') AS failed_reason,
    coalesce(c.failed->>'$.message', c.target->>'$.message') AS failed_message,
    least(TRY_CAST(c.failed->>'$.lastTransitionTime' AS TIMESTAMPTZ),
          TRY_CAST(c.target->>'$.lastTransitionTime' AS TIMESTAMPTZ)) AS failed_at,
    TRY_CAST(c.complete->>'$.lastTransitionTime' AS TIMESTAMPTZ) AS completed_at,
    TRY_CAST(c.restarting->>'$.lastTransitionTime' AS TIMESTAMPTZ) AS restarting_at,
    l.event_type = 'DELETED' AS deleted,
    TRY_CAST(l.object->>'$.metadata.creationTimestamp' AS TIMESTAMPTZ) AS created_at,
    l.last_seen_at
FROM latest l
LEFT JOIN owners o ON o.cluster = l.cluster AND o.uid IS NOT DISTINCT FROM l.uid AND o.namespace = l.namespace
 AND o.name = l.name
LEFT JOIN cond c ON c.cluster = l.cluster AND c.uid IS NOT DISTINCT FROM l.uid AND c.namespace = l.namespace
 AND c.name = l.name
