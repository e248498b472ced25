-- Nodes that stopped serving a job's pods (CONTRACT section 4, node_failure): one row per job, node and way it
-- happened. A node is lost under a job when
--   not_ready      its Ready condition went False / Unknown (the node lifecycle controller's not-ready / unreachable
--                  taints) while the job's pods were bound there, and the job lost them (the taint manager deleted
--                  them, the kubelet or PodGC ended them, or they were deleted or failed after it) or it stayed so
--                  for node_lost_s (pods on it serve nothing: by default the taint manager evicts them after 300 s);
--   drain          the job's pods there were evicted through the Eviction API (DisruptionTarget EvictionByEvictionAPI:
--                  kubectl drain, autoscalers), the node cordoned when it happened (no cordon: lower confidence);
--                  for a pod gone before gangscope watched, the kubelet's Killing Event on a node cordoned then, the
--                  pod named by its Job's SuccessfulCreate Event;
--   node_ended     the kubelet or the pod garbage collector ended them: DisruptionTarget TerminationByKubelet /
--                  DeletionByPodGC, pod status.reason Evicted (node pressure), Terminated / NodeShutdown (node shutdown),
--                  NodeLost;
--   gpus_unhealthy its allocatable nvidia.com/gpu fell below its capacity and below what the job's pods hold there
--                  (the device plugin marks GPUs unhealthy), with the node's health conditions (e.g. NVSentinel);
--   kueue          Kueue evicted the job's Workload for it (Evicted NodeFailures, topology-aware scheduling).
-- A node cordoned while the job keeps running there is not a loss; a node lost with none of the job's pods is not
-- the job's. Times are the node's and pods' own (Ready lastTransitionTime, taint timeAdded, DisruptionTarget).
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: node: the node (NULL for a Kueue eviction that names none of the job's nodes)
-- column: how: not_ready, drain, node_ended, gpus_unhealthy, kueue
-- column: lost_at: when the node stopped serving the pods (Ready transition, eviction, GPU drop)
-- column: recovered_at: when the node served again (Ready again, uncordoned, GPUs back); NULL while not
-- column: ready: Ready status during the loss (False, Unknown), NULL for other ways
-- column: reason: Ready reason, DisruptionTarget reason, pod status.reason, or Kueue's Evicted reason
-- column: message: its message
-- column: cordoned: the node was cordoned during the loss
-- column: gpus_allocatable: allocatable / capacity GPUs during a GPU drop, and what the job's pods hold there
-- column: gpus_capacity: allocatable / capacity GPUs during a GPU drop, and what the job's pods hold there
-- column: gpus_held: allocatable / capacity GPUs during a GPU drop, and what the job's pods hold there
-- column: health_conditions: the node's health conditions during the loss (JSON list)
-- column: pods: the job's pods it took: JSON list of {pod, phase, reason, message, at, deleted}
WITH a AS (SELECT * FROM intermediate.int_as_of),
pods AS (
    SELECT cluster, namespace, job, pod, node, gpus, phase, deleted, bound_at, last_seen_at, disruption_reason,
           disruption_message, disruption_at, status_reason, status_message, deletion_requested_at,
           -- when the pod stopped being the job's member on that node (deleted, deletion requested, disrupted)
           least(CASE WHEN deleted THEN last_seen_at END, deletion_requested_at, disruption_at) AS gone_at
    FROM intermediate.int_pod_jobs
    WHERE node IS NOT NULL
),
states AS (
    SELECT *, ready IN ('False', 'Unknown') AS down,
           sum(CASE WHEN ready IN ('False', 'Unknown') THEN 0 ELSE 1 END)
               OVER (PARTITION BY cluster, node ORDER BY first_seen_at ROWS UNBOUNDED PRECEDING) AS grp
    FROM staging.stg_node_states
    WHERE NOT deleted
),
ups AS (
    -- The first state of each group is the one that brought the node back (Ready again).
    SELECT cluster, node, grp, min(coalesce(ready_changed_at, first_seen_at)) AS up_at
    FROM states WHERE NOT down GROUP BY ALL
),
episodes AS (
    -- One not-Ready episode per run of down states: from the node's own transition time, to Ready again.
    SELECT s.cluster, s.node, s.grp,
           min(coalesce(s.ready_changed_at, s.not_ready_taint_at, s.first_seen_at)) AS lost_at,
           arg_min(s.ready, s.first_seen_at) AS ready, arg_min(s.ready_reason, s.first_seen_at) AS reason,
           arg_min(s.ready_message, s.first_seen_at) AS message, bool_or(s.unschedulable) AS cordoned,
           any_value(u.up_at) AS recovered_at
    FROM states s
    LEFT JOIN ups u ON u.cluster = s.cluster AND u.node = s.node AND u.grp = s.grp + 1
    WHERE s.down
    GROUP BY s.cluster, s.node, s.grp
),
not_ready AS (
    SELECT p.cluster, p.namespace, p.job, e.node, 'not_ready' AS how, e.lost_at, e.recovered_at, e.ready, e.reason,
           e.message, e.cordoned,
           list({'pod': p.pod, 'phase': p.phase, 'reason': coalesce(p.disruption_reason, p.status_reason),
                 'message': p.disruption_message, 'at': p.gone_at, 'deleted': p.deleted} ORDER BY p.pod)
               FILTER (WHERE p.gone_at >= e.lost_at OR p.phase = 'Failed'
                          OR p.disruption_reason IN ('DeletionByTaintManager', 'DeletionByPodGC',
                                                     'TerminationByKubelet')) AS lost_pods,
           count(*) AS pods_there
    FROM episodes e
    JOIN pods p ON p.cluster = e.cluster AND p.node = e.node
     -- on the node when it was lost: bound before, not gone before
     AND p.bound_at <= e.lost_at + INTERVAL 1 MINUTE AND coalesce(p.gone_at, 'infinity'::TIMESTAMPTZ) >= e.lost_at
    JOIN a ON a.cluster = e.cluster
    GROUP BY p.cluster, p.namespace, p.job, e.node, e.lost_at, e.recovered_at, e.ready, e.reason, e.message,
             e.cordoned, a.as_of
    HAVING len(lost_pods) > 0
        OR epoch(coalesce(e.recovered_at, a.as_of) - e.lost_at) >= getvariable('node_lost_s')
),
cordon_states AS (
    SELECT *, sum(CASE WHEN unschedulable THEN 0 ELSE 1 END)
                  OVER (PARTITION BY cluster, node ORDER BY first_seen_at ROWS UNBOUNDED PRECEDING) AS cgrp
    FROM staging.stg_node_states WHERE NOT deleted
),
cordons AS (
    -- Cordoned spans: from the unschedulable taint's timeAdded to the next schedulable state.
    SELECT c.cluster, c.node, min(coalesce(c.cordoned_at, c.first_seen_at)) AS from_at,
           coalesce(min(n.first_seen_at), 'infinity'::TIMESTAMPTZ) AS until_at
    FROM cordon_states c
    LEFT JOIN cordon_states n ON n.cluster = c.cluster AND n.node = c.node AND n.cgrp = c.cgrp + 1
     AND NOT n.unschedulable
    WHERE c.unschedulable
    GROUP BY c.cluster, c.node, c.cgrp
),
evicted AS (
    -- Pods ended on the node by an eviction, the kubelet or the pod garbage collector, outside a not-Ready episode
    -- of that node (those are counted there).
    SELECT p.*,
           CASE WHEN p.disruption_reason = 'EvictionByEvictionAPI' THEN 'drain' ELSE 'node_ended' END AS how,
           coalesce(p.disruption_at, p.deletion_requested_at, p.last_seen_at) AS ended_at,
           EXISTS (SELECT 1 FROM cordons c WHERE c.cluster = p.cluster AND c.node = p.node
                   AND c.from_at <= coalesce(p.disruption_at, p.last_seen_at) + INTERVAL 1 MINUTE
                   AND c.until_at >= coalesce(p.disruption_at, p.last_seen_at) - INTERVAL 1 MINUTE) AS cordoned
    FROM pods p
    WHERE (p.disruption_reason IN ('EvictionByEvictionAPI', 'TerminationByKubelet', 'DeletionByPodGC')
           OR p.status_reason IN ('Evicted', 'Terminated', 'NodeShutdown', 'NodeLost'))
      AND NOT EXISTS (SELECT 1 FROM not_ready n WHERE n.cluster = p.cluster AND n.namespace = p.namespace
                      AND n.job = p.job AND n.node = p.node)
),
created AS (
    -- The Job controller's record of each pod it made ("Created pod: <name>"), which outlives the pod: a pod gone
    -- before gangscope watched still names its job (a JobSet's child Job speaks for its JobSet).
    SELECT DISTINCT e.cluster, e.object_namespace AS namespace, coalesce(o.parent_job, e.object_name) AS job,
           regexp_extract(e.message, '^Created pod: (.+)$', 1) AS pod
    FROM staging.stg_events e
    LEFT JOIN staging.stg_job_objects o
      ON o.cluster = e.cluster AND o.namespace = e.object_namespace AND o.name = e.object_name
    WHERE e.reason = 'SuccessfulCreate' AND e.object_kind = 'Job' AND e.message LIKE 'Created pod: %'
),
killed_unseen AS (
    -- A pod gangscope never saw, its containers stopped by the kubelet (Killing) on a node cordoned at that moment:
    -- a drain met in the middle of life, known from the Events that outlive the pod.
    SELECT c.cluster, c.namespace, c.job, e.host AS node, 'drain' AS how, e.first_at AS ended_at,
           'Killing' AS reason, e.message, true AS cordoned, c.pod, NULL::VARCHAR AS phase, true AS deleted
    FROM staging.stg_events e
    JOIN created c ON c.cluster = e.cluster AND c.namespace = e.object_namespace AND c.pod = e.object_name
    WHERE e.object_kind = 'Pod' AND e.reason = 'Killing' AND e.host IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM staging.stg_pods p
                      WHERE p.cluster = e.cluster AND p.namespace = e.object_namespace AND p.name = e.object_name)
      AND EXISTS (SELECT 1 FROM cordons k WHERE k.cluster = e.cluster AND k.node = e.host
                  AND k.from_at <= e.first_at + INTERVAL 1 MINUTE AND k.until_at >= e.first_at - INTERVAL 1 MINUTE)
),
ended_pods AS (
    SELECT cluster, namespace, job, node, how, ended_at, coalesce(disruption_reason, status_reason) AS reason,
           coalesce(disruption_message, status_message) AS message, cordoned, pod, phase, deleted
    FROM evicted
    UNION ALL
    SELECT * FROM killed_unseen
),
ended_g AS (
    SELECT cluster, namespace, job, node, how, min(ended_at) AS lost_at,
           arg_min(reason, ended_at) AS reason, arg_min(message, ended_at) AS message,
           bool_or(cordoned) AS cordoned,
           list({'pod': pod, 'phase': phase, 'reason': reason, 'message': message, 'at': ended_at,
                 'deleted': deleted} ORDER BY pod) AS lost_pods
    FROM ended_pods
    GROUP BY cluster, namespace, job, node, how
),
ended AS (
    -- A drained node is back at its next schedulable state (uncordoned).
    SELECT e.*, min(s.first_seen_at) AS recovered_at
    FROM ended_g e
    LEFT JOIN staging.stg_node_states s
      ON s.cluster = e.cluster AND s.node = e.node AND NOT s.unschedulable AND NOT s.deleted
     AND s.first_seen_at > e.lost_at
    GROUP BY ALL
),
held AS (
    SELECT cluster, namespace, job, node, sum(gpus) AS gpus, min(bound_at) AS bound_at,
           max(coalesce(gone_at, 'infinity'::TIMESTAMPTZ)) AS gone_at
    FROM pods GROUP BY ALL
),
gpu_drop_g AS (
    SELECT h.cluster, h.namespace, h.job, h.node, 'gpus_unhealthy' AS how,
           min(coalesce(list_min([TRY_CAST(x->>'$.at' AS TIMESTAMPTZ)
                                  FOR x IN coalesce(json_extract(s.health_conditions, '$[*]'), []::JSON[])]),
                        s.first_seen_at)) AS lost_at,
           min(s.first_seen_at) AS first_seen_at,
           min(s.gpus_allocatable) AS gpus_allocatable, max(s.gpus_capacity) AS gpus_capacity,
           CAST(any_value(h.gpus) AS INTEGER) AS gpus_held,
           arg_min(s.health_conditions, s.first_seen_at) AS health_conditions,
           bool_or(s.unschedulable) AS cordoned
    FROM staging.stg_node_states s
    JOIN held h ON h.cluster = s.cluster AND h.node = s.node
     AND s.last_seen_at >= h.bound_at AND s.first_seen_at <= h.gone_at
    WHERE NOT s.deleted AND s.gpus_allocatable < s.gpus_capacity AND s.gpus_allocatable < h.gpus
    GROUP BY ALL
),
gpu_drop AS (
    -- back when allocatable returns to capacity
    SELECT g.*, min(r.first_seen_at) AS recovered_at
    FROM gpu_drop_g g
    LEFT JOIN staging.stg_node_states r
      ON r.cluster = g.cluster AND r.node = g.node AND r.gpus_allocatable >= r.gpus_capacity
     AND r.first_seen_at > g.first_seen_at
    GROUP BY ALL
),
kueue AS (
    SELECT j.cluster, j.namespace, j.job, NULL::VARCHAR AS node, 'kueue' AS how, min(c.transition_at) AS lost_at,
           arg_min(c.reason, c.transition_at) AS reason, arg_min(c.message, c.transition_at) AS message
    FROM staging.stg_workload_conditions c
    JOIN intermediate.int_jobs j ON j.cluster = c.cluster AND j.namespace = c.namespace AND j.workload = c.workload
    WHERE c.type = 'Evicted' AND c.status = 'True' AND c.reason = 'NodeFailures'
    GROUP BY ALL
)
SELECT cluster, namespace, job, node, how, lost_at, recovered_at, ready, reason, message, cordoned,
       NULL::INTEGER AS gpus_allocatable, NULL::INTEGER AS gpus_capacity, NULL::INTEGER AS gpus_held,
       NULL::JSON AS health_conditions, to_json(lost_pods) AS pods
FROM not_ready
UNION ALL
SELECT cluster, namespace, job, node, how, lost_at, recovered_at, NULL, reason, message, cordoned,
       NULL, NULL, NULL, NULL, to_json(lost_pods)
FROM ended
UNION ALL
SELECT cluster, namespace, job, node, how, lost_at, recovered_at, NULL, NULL, NULL, cordoned,
       gpus_allocatable, gpus_capacity, gpus_held, health_conditions, NULL
FROM gpu_drop
UNION ALL
SELECT cluster, namespace, job, node, how, lost_at, NULL, NULL, reason, message, NULL, NULL, NULL, NULL, NULL, NULL
FROM kueue
