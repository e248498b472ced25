-- Pods bound to a node whose containers never start (CONTRACT section 4, startup_failure): one row per job. A pod
-- fails to start when, after binding, a container waits with a reason that will not clear by itself (InvalidImageName,
-- ErrImageNeverPull, a CreateContainerConfigError naming a missing Secret / ConfigMap or key: at once), or has not
-- run startup_timeout_s after binding: waiting ErrImagePull / ImagePullBackOff / CreateContainerError /
-- RunContainerError / ..., an init container failing, the kubelet's FailedMount / FailedAttachVolume /
-- FailedCreatePodSandBox / image pull Events, or no reason at all (a job is healthy only while it waits within its
-- thresholds). Kueue evicting the Workload with PodsReadyTimeout says the same. A slow image pull that completes within
-- the threshold is start-up time (int_gang.start_up_s), not a failure. Times: the pod's PodScheduled time, the first
-- observation of a reason or the Event's first occurrence.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: started_at: when the failure holds: the first immediate error, else binding + startup_timeout_s
-- column: ended_at: when every member of the job ran (NULL while they do not)
-- column: pods_stuck: pods bound whose containers did not start (in time)
-- column: gpus_held: GPUs those pods hold idle
-- column: first_pod: the pod that failed first, its container, image, waiting reason and the kubelet's message
-- column: container: the pod that failed first, its container, image, waiting reason and the kubelet's message
-- column: image: the pod that failed first, its container, image, waiting reason and the kubelet's message
-- column: reason: the pod that failed first, its container, image, waiting reason and the kubelet's message
-- column: message: the pod that failed first, its container, image, waiting reason and the kubelet's message
-- column: immediate: that reason cannot clear by itself (no need to wait for the threshold)
-- column: bound_at: when that pod was bound
-- column: stuck_s: seconds that pod waited after binding (to its start, deletion or the data's now)
-- column: pods: JSON list of up to 10 {pod, node, container, init, image, reason, message, bound_at, stuck_s}
-- column: events: JSON list of up to 10 kubelet / controller Events on those pods {reason, message, count, first_at,
--   last_at}
-- column: kueue_eviction: Kueue's PodsReadyTimeout eviction {reason, message, at, requeue_count} (NULL without)
WITH a AS (SELECT * FROM intermediate.int_as_of),
waits AS (
    -- Each container's waiting reasons and when gangscope first saw each (a waiting state has no time of its own).
    SELECT cluster, namespace, pod, pod_uid, container, init, image, reason,
           arg_min(message, first_seen_at) AS message, min(first_seen_at) AS seen_at
    FROM staging.stg_container_states
    WHERE (state = 'waiting' AND reason NOT IN ('ContainerCreating', 'PodInitializing'))
       OR (init AND state = 'terminated' AND exit_code <> 0)
       OR (init AND last_exit_code <> 0)
    GROUP BY ALL
),
imm AS (
    SELECT *, reason IN ('InvalidImageName', 'ErrImageNeverPull')
              OR (reason = 'CreateContainerConfigError'
                  AND (message ILIKE '%not found%' OR message ILIKE '%couldn''t find key%')) AS immediate
    FROM waits
),
pods AS (
    SELECT p.cluster, p.namespace, p.job, p.pod, p.pod_uid, p.node, p.gpus, p.bound_at, p.first_running_at, p.deleted,
           coalesce(p.first_running_at, CASE WHEN p.deleted THEN p.last_seen_at END, a.as_of) AS stuck_until
    FROM intermediate.int_pod_jobs p JOIN a USING (cluster)
    WHERE p.node IS NOT NULL AND p.bound_at IS NOT NULL
      -- never started; or started late, seen waiting before it (a pod first seen after a restart shows only its
      -- latest start: that is no late start)
      AND (p.first_running_at IS NULL
           OR (p.first_running_at > p.bound_at + to_seconds(getvariable('startup_timeout_s'))
               AND p.first_seen_at < p.first_running_at
               AND NOT EXISTS (SELECT 1 FROM staging.stg_container_states c
                               WHERE c.cluster = p.cluster AND c.namespace = p.namespace AND c.pod = p.pod
                                 AND c.pod_uid IS NOT DISTINCT FROM p.pod_uid AND NOT c.init
                                 AND (c.restart_count > 0 OR c.last_exit_code IS NOT NULL))))
),
latest_wait AS (
    -- The reason a pod shows last (or the first immediate one), per pod.
    SELECT p.cluster, p.namespace, p.pod, p.pod_uid, w.container, w.init, w.image, w.reason, w.message, w.seen_at,
           w.immediate
    FROM pods p
    JOIN imm w ON w.cluster = p.cluster AND w.namespace = p.namespace AND w.pod = p.pod
     AND w.pod_uid IS NOT DISTINCT FROM p.pod_uid
    QUALIFY row_number() OVER (PARTITION BY p.cluster, p.namespace, p.pod, p.pod_uid
                               ORDER BY w.immediate DESC, w.seen_at DESC) = 1
),
ev AS (
    SELECT p.cluster, p.namespace, p.job, p.pod, e.reason, e.message, e.count, e.first_at, e.last_at
    FROM pods p
    JOIN staging.stg_events e ON e.cluster = p.cluster AND e.object_namespace = p.namespace AND e.object_name = p.pod
     AND e.object_kind = 'Pod'
    WHERE e.reason IN ('FailedMount', 'FailedAttachVolume', 'FailedMapVolume', 'FailedCreatePodSandBox',
                       'FailedPostStartHook', 'FailedPreStopHook', 'InspectFailed', 'ErrImageNeverPull')
       OR (e.reason = 'Failed' AND (e.message LIKE 'Failed to pull image%' OR e.message LIKE 'Error: %'))
       OR (e.reason = 'BackOff' AND e.message LIKE 'Back-off pulling image%')
),
ev_last AS (
    -- Without a waiting reason (ContainerCreating), the kubelet's newest Event on the pod says why (FailedMount, ...).
    SELECT * FROM ev QUALIFY row_number() OVER (PARTITION BY cluster, namespace, pod ORDER BY last_at DESC) = 1
),
per_pod AS (
    SELECT p.*, w.container, w.init, w.image, coalesce(w.reason, el.reason) AS reason,
           coalesce(w.message, el.message) AS message, coalesce(w.immediate, false) AS immediate,
           epoch(p.stuck_until - p.bound_at) AS stuck_s,
           CASE WHEN w.immediate THEN greatest(p.bound_at, least(w.seen_at, (SELECT min(e.first_at) FROM ev e
                                                                           WHERE e.cluster = p.cluster
                                                                             AND e.namespace = p.namespace
                                                                             AND e.pod = p.pod)))
                WHEN epoch(p.stuck_until - p.bound_at) > getvariable('startup_timeout_s')
                THEN p.bound_at + to_seconds(getvariable('startup_timeout_s')) END AS failed_at
    FROM pods p
    LEFT JOIN latest_wait w ON w.cluster = p.cluster AND w.namespace = p.namespace AND w.pod = p.pod
     AND w.pod_uid IS NOT DISTINCT FROM p.pod_uid
    LEFT JOIN ev_last el ON el.cluster = p.cluster AND el.namespace = p.namespace AND el.pod = p.pod
),
kueue AS (
    SELECT j.cluster, j.namespace, j.job,
           {'reason': arg_min(c.reason, c.transition_at), 'message': arg_min(c.message, c.transition_at),
            'at': min(c.transition_at), 'requeue_count': any_value(w.requeue_count)} AS eviction,
           min(c.transition_at) AS at
    FROM staging.stg_workload_conditions c
    JOIN intermediate.int_jobs j ON j.cluster = c.cluster AND j.namespace = c.namespace AND j.workload = c.workload
    LEFT JOIN staging.stg_workloads w ON w.cluster = c.cluster AND w.namespace = c.namespace AND w.name = c.workload
    WHERE c.type = 'Evicted' AND c.status = 'True' AND c.reason = 'PodsReadyTimeout'
    GROUP BY j.cluster, j.namespace, j.job
),
per_job AS (
    SELECT cluster, namespace, job, min(failed_at) AS started_at,
           count(*) FILTER (WHERE failed_at IS NOT NULL) AS pods_stuck,
           CAST(sum(gpus) FILTER (WHERE failed_at IS NOT NULL AND NOT deleted) AS INTEGER) AS gpus_held,
           arg_min({'pod': pod, 'container': container, 'image': image, 'reason': reason, 'message': message,
                    'immediate': immediate, 'bound_at': bound_at, 'stuck_s': round(stuck_s)}, (failed_at, pod))
               FILTER (WHERE failed_at IS NOT NULL) AS first,  -- ties (pods failing at once): the first by name
           list({'pod': pod, 'node': node, 'container': container, 'init': init, 'image': image, 'reason': reason,
                 'message': message, 'bound_at': bound_at, 'stuck_s': round(stuck_s)} ORDER BY failed_at, pod)
               FILTER (WHERE failed_at IS NOT NULL) AS pods
    FROM per_pod
    GROUP BY ALL
),
ev_job AS (
    SELECT cluster, namespace, job,
           list({'pod': pod, 'reason': reason, 'message': message, 'count': count, 'first_at': first_at,
                 'last_at': last_at} ORDER BY first_at, pod, reason) AS events
    FROM ev GROUP BY ALL
)
SELECT j.cluster, j.namespace, j.job,
       least(pj.started_at, k.at) AS started_at,
       CASE WHEN j.state IN ('running', 'finished') AND j.all_running_at > least(pj.started_at, k.at)
            THEN j.all_running_at END AS ended_at,
       coalesce(pj.pods_stuck, 0) AS pods_stuck, coalesce(pj.gpus_held, 0) AS gpus_held,
       pj.first.pod AS first_pod, pj.first.container AS container, pj.first.image AS image, pj.first.reason AS reason,
       pj.first.message AS message, coalesce(pj.first.immediate, false) AS immediate, pj.first.bound_at AS bound_at,
       pj.first.stuck_s AS stuck_s,
       to_json(pj.pods[1:10]) AS pods, to_json(e.events[1:10]) AS events, to_json(k.eviction) AS kueue_eviction
FROM intermediate.int_jobs j
LEFT JOIN per_job pj USING (cluster, namespace, job)
LEFT JOIN ev_job e USING (cluster, namespace, job)
LEFT JOIN kueue k USING (cluster, namespace, job)
-- Kueue's eviction alone counts once a member was bound: pods never bound are gang_assembly's. A job none of whose
-- pods gangscope ever saw (first seen in an initial list during the backoff that follows the eviction: Kueue deleted
-- them) has only Kueue's word, which is no healthy wait.
WHERE pj.started_at IS NOT NULL
   OR (k.at IS NOT NULL AND (EXISTS (SELECT 1 FROM intermediate.int_pod_jobs p WHERE p.cluster = j.cluster
                                     AND p.namespace = j.namespace AND p.job = j.job AND p.bound_at IS NOT NULL)
                             OR NOT EXISTS (SELECT 1 FROM intermediate.int_pod_jobs p WHERE p.cluster = j.cluster
                                            AND p.namespace = j.namespace AND p.job = j.job)))
