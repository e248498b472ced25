-- Evictions and preemptions per job: Kueue Workload conditions Evicted (reason Preempted) / Preempted,
-- Workload events Preempted / EvictedDueToPreempted, pods with DisruptionTarget for preemption, Preempted
-- events on pods (kube-scheduler, 1.37 gang preemption shows on the victim pods) and a native PodGroup's
-- DisruptionTarget PreemptionByScheduler.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: event_at: when it happened
-- column: source: workload_condition, workload_event, pod_condition, pod_event, pod_group_condition
-- column: reason: as written by Kueue / the scheduler
-- column: message: as written by Kueue / the scheduler
WITH wl AS (
    SELECT DISTINCT cluster, namespace, job, workload FROM intermediate.int_pod_jobs WHERE workload IS NOT NULL
    UNION
    SELECT cluster, namespace, job, workload FROM intermediate.int_jobs WHERE workload IS NOT NULL
)
SELECT w.cluster, w.namespace, w.job, c.transition_at AS event_at, 'workload_condition' AS source, c.reason, c.message
FROM staging.stg_workload_conditions c
JOIN wl w ON w.cluster = c.cluster AND w.namespace = c.namespace AND w.workload = c.workload
WHERE c.status = 'True' AND ((c.type = 'Evicted' AND c.reason ILIKE '%Preempt%') OR c.type = 'Preempted')
UNION ALL
SELECT w.cluster, w.namespace, w.job, e.first_at, 'workload_event', e.reason, e.message
FROM staging.stg_events e
JOIN wl w ON w.cluster = e.cluster AND w.namespace = e.object_namespace AND w.workload = e.object_name
WHERE e.object_kind = 'Workload' AND e.reason IN ('Preempted', 'EvictedDueToPreempted')
UNION ALL
SELECT p.cluster, p.namespace, p.job, coalesce(p.disruption_at, p.last_seen_at, p.created_at), 'pod_condition', p.disruption_reason, NULL
FROM intermediate.int_pod_jobs p
WHERE p.disruption_reason ILIKE '%Preempt%'
UNION ALL
SELECT p.cluster, p.namespace, p.job, e.first_at, 'pod_event', e.reason, e.message
FROM staging.stg_events e
JOIN (SELECT DISTINCT cluster, namespace, pod, job FROM intermediate.int_pod_jobs) p
  ON p.cluster = e.cluster AND p.namespace = e.object_namespace AND p.pod = e.object_name
WHERE e.object_kind = 'Pod' AND e.reason = 'Preempted'
UNION ALL
SELECT u.cluster, u.namespace, u.job, g.disruption_at, 'pod_group_condition', g.disruption_reason, NULL
FROM staging.stg_native_groups g
JOIN intermediate.int_gang_units u
  ON u.cluster = g.cluster AND u.namespace = g.namespace AND u.unit = g.name AND u.system = 'native'
 AND u.unit_kind IN ('podgroup', 'composite')
WHERE g.disruption_reason ILIKE '%Preempt%'
