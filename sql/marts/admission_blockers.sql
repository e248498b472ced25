-- Why each Kueue job is not admitted now, and which class a long wait gets: one row per job whose Workload has
-- no admission yet (Kueue v0.19 reasons with the UnadmittedWorkloadsObservability gate off or on, and the queue
-- objects' own state). A configuration cause (missing or inactive queue, no matching flavor, misconfiguration,
-- external admission gate) is not quota; CONTRACT section 4 has no class for it yet, so it is classed
-- admission_quota with proposed_class admission_config (docs/models.md).
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: workload: the Kueue Workload, its LocalQueue and ClusterQueue
-- column: local_queue: the Kueue Workload, its LocalQueue and ClusterQueue
-- column: cluster_queue: the Kueue Workload, its LocalQueue and ClusterQueue
-- column: cause: intermediate.int_admission cause (NULL: no reason seen yet)
-- column: cause_kind: quota, topology, configuration, none (not a problem: pending evaluation, never evaluated),
--   terminal (finished, deactivated, on hold)
-- column: root_cause: the class a wait past admission_wait_s gets (NULL: not a problem)
-- column: proposed_class: admission_config for configuration causes, else root_cause
-- column: gate: UnadmittedWorkloadsObservability on / off as the reasons show it
-- column: reason: the deciding reason, message and when it was seen
-- column: message: the deciding reason, message and when it was seen
-- column: reason_at: the deciding reason, message and when it was seen
-- column: created_at: Workload creation, seconds waited so far, and whether that is past admission_wait_s
-- column: wait_s: Workload creation, seconds waited so far, and whether that is past admission_wait_s
-- column: over_threshold: Workload creation, seconds waited so far, and whether that is past admission_wait_s
SELECT cluster, namespace, job, workload, local_queue, cluster_queue, cause, cause_kind, cause_class AS root_cause,
       CASE WHEN cause_kind = 'configuration' THEN 'admission_config' ELSE cause_class END AS proposed_class,
       gate, reason, message, reason_at, created_at, wait_s,
       wait_s > getvariable('admission_wait_s') AS over_threshold
FROM intermediate.int_admission
WHERE admitted_at IS NULL AND coalesce(cause_kind, '') <> 'terminal'
