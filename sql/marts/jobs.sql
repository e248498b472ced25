-- One row per job with its current state and primary root cause: the class of its findings that comes
-- first in the precedence list (CONTRACT section 4); severity is that finding's.
-- column: cluster: identity (CONTRACT section 2)
-- column: namespace: identity (CONTRACT section 2)
-- column: job: identity (CONTRACT section 2)
-- column: job_kind: identity (CONTRACT section 2)
-- column: workload: Kueue and gang objects (NULL if none)
-- column: pod_group: Kueue and gang objects (NULL if none)
-- column: gang_system: Kueue and gang objects (NULL if none)
-- column: cluster_queue: Kueue and gang objects (NULL if none)
-- column: local_queue: Kueue and gang objects (NULL if none)
-- column: state: queued, assembling, running, finished
-- column: root_cause: primary root cause (healthy when none)
-- column: severity: critical, warning, info
-- column: summary: the primary finding's sentence
-- column: findings: number of findings (incidents) of the job, healthy rows excluded
-- column: gang_size: size
-- column: pods: size
-- column: pods_running: size
-- column: gpus: size
-- column: nodes: nodes of its live pods
-- column: created_at: creation and gang completion
-- column: all_running_at: creation and gang completion
-- column: first_seen: observation range
-- column: last_seen: observation range
WITH ranked AS (
    SELECT f.*, list_position(getvariable('root_causes'), f.root_cause) AS precedence
    FROM marts.findings f
),
primary_f AS (
    SELECT cluster, namespace, job,
           arg_min(root_cause, precedence * 1e10 - epoch(started_at)) AS root_cause,
           arg_min(severity, precedence * 1e10 - epoch(started_at)) AS severity,
           arg_min(summary, precedence * 1e10 - epoch(started_at)) AS summary,
           count(*) FILTER (WHERE root_cause <> 'healthy') AS findings
    FROM ranked GROUP BY ALL
)
SELECT j.cluster, j.namespace, j.job, j.job_kind, j.workload, j.pod_group, j.gang_system, j.cluster_queue,
       j.local_queue, j.state, coalesce(p.root_cause, 'healthy') AS root_cause, coalesce(p.severity, 'info') AS severity,
       p.summary, coalesce(p.findings, 0) AS findings, j.gang_size, j.pods, j.pods_running, j.gpus, j.nodes,
       j.created_at, j.all_running_at, j.first_seen, j.last_seen
FROM intermediate.int_jobs j
LEFT JOIN primary_f p USING (cluster, namespace, job)
