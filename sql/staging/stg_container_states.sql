-- Container states of every pod over time: one row per container (and init container) and distinct state the pod's
-- status showed (status.containerStatuses[] / initContainerStatuses[]), with when gangscope first and last saw it.
-- What start-up failures (waiting reasons), crashes (terminated / lastState.terminated with an exit code, restart
-- counts) and their times are read from. Times inside (startedAt, finishedAt) are the kubelet's own; a waiting state
-- carries none, so it is timed by first_seen_at (an upper bound when the pod was first seen in an initial list).
-- column: cluster: the Pod
-- column: namespace: the Pod
-- column: pod: the Pod
-- column: pod_uid: the Pod
-- column: node: spec.nodeName when this state was seen
-- column: container: container name
-- column: init: an init container
-- column: image: the container's image
-- column: state: waiting, running or terminated (state.*)
-- column: reason: state.waiting.reason or state.terminated.reason (ErrImagePull, CrashLoopBackOff, OOMKilled, ...)
-- column: message: state.waiting.message or state.terminated.message
-- column: exit_code: state.terminated.exitCode
-- column: started_at: state.running.startedAt or state.terminated.startedAt
-- column: finished_at: state.terminated.finishedAt
-- column: last_exit_code: lastState.terminated.exitCode (the previous run of a restarted container)
-- column: last_reason: lastState.terminated.reason
-- column: last_started_at: lastState.terminated.startedAt
-- column: last_finished_at: lastState.terminated.finishedAt
-- column: restart_count: restartCount
-- column: ready: ready
-- column: first_seen_at: first and last observation of this state
-- column: last_seen_at: first and last observation of this state
WITH ev AS (
    SELECT cluster, namespace, name AS pod, uid AS pod_uid, observed_at, object->>'$.spec.nodeName' AS node,
           coalesce(json_extract(object, '$.status.containerStatuses[*]'), []::JSON[]) AS containers,
           coalesce(json_extract(object, '$.status.initContainerStatuses[*]'), []::JSON[]) AS inits
    FROM staging.stg_k8s_events
    WHERE kind = 'Pod' AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
),
flat AS (
    SELECT cluster, namespace, pod, pod_uid, observed_at, node, false AS init, c
    FROM ev, unnest(containers) AS t(c)
    UNION ALL
    SELECT cluster, namespace, pod, pod_uid, observed_at, node, true AS init, c
    FROM ev, unnest(inits) AS t(c)
),
states AS (
    SELECT cluster, namespace, pod, pod_uid, observed_at, node, init,
           c->>'$.name' AS container,
           c->>'$.image' AS image,
           CASE WHEN json_exists(c, '$.state.terminated') THEN 'terminated'
                WHEN json_exists(c, '$.state.running') THEN 'running'
                WHEN json_exists(c, '$.state.waiting') THEN 'waiting' END AS state,
           coalesce(c->>'$.state.waiting.reason', c->>'$.state.terminated.reason') AS reason,
           coalesce(c->>'$.state.waiting.message', c->>'$.state.terminated.message') AS message,
           TRY_CAST(c->>'$.state.terminated.exitCode' AS INTEGER) AS exit_code,
           TRY_CAST(coalesce(c->>'$.state.running.startedAt', c->>'$.state.terminated.startedAt') AS TIMESTAMPTZ)
               AS started_at,
           TRY_CAST(c->>'$.state.terminated.finishedAt' AS TIMESTAMPTZ) AS finished_at,
           TRY_CAST(c->>'$.lastState.terminated.exitCode' AS INTEGER) AS last_exit_code,
           c->>'$.lastState.terminated.reason' AS last_reason,
           TRY_CAST(c->>'$.lastState.terminated.startedAt' AS TIMESTAMPTZ) AS last_started_at,
           TRY_CAST(c->>'$.lastState.terminated.finishedAt' AS TIMESTAMPTZ) AS last_finished_at,
           coalesce(TRY_CAST(c->>'$.restartCount' AS INTEGER), 0) AS restart_count,
           coalesce(TRY_CAST(c->>'$.ready' AS BOOLEAN), false) AS ready
    FROM flat
)
SELECT cluster, namespace, pod, pod_uid, node, container, init, image, state, reason, message, exit_code, started_at,
       finished_at, last_exit_code, last_reason, last_started_at, last_finished_at, restart_count, ready,
       min(observed_at) AS first_seen_at, max(observed_at) AS last_seen_at
FROM states
WHERE container IS NOT NULL
GROUP BY ALL
