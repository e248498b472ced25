-- Ray placement groups waiting in PENDING, per job and episode: a gang that has not assembled inside the Ray cluster
-- even when every pod of its RayCluster runs (Ray's own scheduling signal, signal ray_pg_pending:
-- ray_placement_groups{State="PENDING"} / ray_gcs_placement_group_count). A sample joins its job through its pod
-- (the head's metrics endpoint), else its job_name label in the same namespace. An episode runs from the first
-- sample with pending > 0 to the first sample at 0 after it (placed); a series that stops is not a 0.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: the job (RayJob / RayCluster) whose head reports the placement groups
-- column: pending_since: first sample of the episode with placement groups PENDING
-- column: placed_at: first sample back at 0 (NULL while still pending)
-- column: pending_s: from pending_since to placed_at, else to the data's now (int_as_of)
-- column: max_pending: most placement groups PENDING at once in the episode
-- column: timeout_s: the gang timeout (gang_timeout_s)
-- column: timed_out: pending longer than timeout_s
-- column: worker_groups: the job's worker groups as {group, running, pending, unschedulable, max_replicas, at_max,
--   failed_scheduling} (its RayCluster's workerGroupSpecs and its pods labelled ray.io/group)
-- column: next_step: which worker group cannot scale: its pods Pending with FailedScheduling, or maxReplicas reached
WITH s AS (
    SELECT m.cluster, coalesce(p.namespace, jn.namespace) AS namespace, coalesce(p.job, jn.job) AS job, m.ts,
           max(m.value) AS pending
    FROM staging.stg_metric_signals m
    LEFT JOIN intermediate.int_pod_jobs p ON p.cluster = m.cluster AND p.namespace = m.namespace AND p.pod = m.pod
    LEFT JOIN intermediate.int_jobs jn
      ON m.pod IS NULL AND jn.cluster = m.cluster AND jn.namespace = m.namespace AND jn.job = m.job_name
    WHERE m.signal = 'ray_pg_pending' AND m.value IS NOT NULL
    GROUP BY ALL
    HAVING coalesce(p.job, jn.job) IS NOT NULL
),
runs AS (
    SELECT *, sum(CASE WHEN (pending > 0) IS DISTINCT FROM prev THEN 1 ELSE 0 END)
                  OVER (PARTITION BY cluster, namespace, job ORDER BY ts) AS run
    FROM (SELECT *, lag(pending > 0) OVER (PARTITION BY cluster, namespace, job ORDER BY ts) AS prev FROM s)
),
episodes AS (
    SELECT cluster, namespace, job, run, bool_and(pending > 0) AS pending, min(ts) AS first_at,
           max(pending) AS max_pending
    FROM runs GROUP BY ALL
),
ep AS (
    SELECT e.cluster, e.namespace, e.job, e.first_at AS pending_since, e.max_pending,
           (SELECT min(x.first_at) FROM episodes x WHERE x.cluster = e.cluster AND x.namespace = e.namespace
              AND x.job = e.job AND x.run = e.run + 1) AS placed_at
    FROM episodes e WHERE e.pending
),
fs AS (
    SELECT f.cluster, f.namespace, f.pod, arg_min(f.reason, f.first_at) AS reason
    FROM staging.stg_failed_scheduling f GROUP BY ALL
),
pods AS (
    SELECT p.cluster, p.namespace, p.job, s.ray_cluster, s.ray_group,
           count(*) FILTER (WHERE p.phase = 'Running') AS running,
           count(*) FILTER (WHERE p.phase = 'Pending') AS pending,
           count(*) FILTER (WHERE p.phase = 'Pending' AND f.reason IS NOT NULL) AS unschedulable,
           min(f.reason) AS failed_scheduling
    FROM intermediate.int_pod_jobs p
    JOIN staging.stg_pods s ON s.cluster = p.cluster AND s.namespace = p.namespace AND s.name = p.pod
     AND s.uid IS NOT DISTINCT FROM p.pod_uid
    LEFT JOIN fs f ON f.cluster = p.cluster AND f.namespace = p.namespace AND f.pod = p.pod
    WHERE NOT p.deleted AND s.ray_cluster IS NOT NULL AND s.ray_group IS NOT NULL
      AND s.ray_group <> 'headgroup'
    GROUP BY ALL
),
spec AS (
    SELECT o.cluster, o.namespace, o.name AS ray_cluster, g.group AS ray_group, g.max_replicas * g.hosts AS max_pods
    FROM staging.stg_job_objects o, unnest(o.ray_worker_groups) AS t(g)
    WHERE o.kind = 'RayCluster' AND NOT o.deleted
),
groups AS (
    SELECT p.cluster, p.namespace, p.job,
           list({'group': p.ray_group, 'running': p.running, 'pending': p.pending, 'unschedulable': p.unschedulable,
                 'max_replicas': s.max_pods, 'at_max': p.running + p.pending >= s.max_pods,
                 'failed_scheduling': p.failed_scheduling} ORDER BY p.ray_group) AS worker_groups
    FROM pods p
    LEFT JOIN spec s ON s.cluster = p.cluster AND s.namespace = p.namespace AND s.ray_cluster = p.ray_cluster
     AND s.ray_group = p.ray_group
    GROUP BY ALL
)
SELECT e.cluster, e.namespace, e.job, e.pending_since, e.placed_at,
       epoch(coalesce(e.placed_at, a.as_of) - e.pending_since) AS pending_s, e.max_pending,
       getvariable('gang_timeout_s') AS timeout_s,
       epoch(coalesce(e.placed_at, a.as_of) - e.pending_since) > getvariable('gang_timeout_s') AS timed_out,
       g.worker_groups,
       coalesce(
           (SELECT format('worker group {} cannot scale: {} pod(s) Pending with FailedScheduling ({})', w.group,
                          w.unschedulable, w.failed_scheduling)
            FROM (SELECT unnest(g.worker_groups) AS w) WHERE w.unschedulable > 0 ORDER BY w.group LIMIT 1),
           (SELECT format('worker group {} is at maxReplicas ({} pods): raise maxReplicas or shrink the placement '
                          || 'group''s bundles', w.group, w.max_replicas)
            FROM (SELECT unnest(g.worker_groups) AS w) WHERE w.at_max ORDER BY w.group LIMIT 1),
           'no worker group is scaling up: check the Ray autoscaler and the bundles'' resources against the worker '
           || 'groups'' pods') AS next_step
FROM ep e
JOIN intermediate.int_as_of a USING (cluster)
LEFT JOIN groups g USING (cluster, namespace, job)
