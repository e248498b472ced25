-- Queue health per Kueue ClusterQueue (or LocalQueue when the ClusterQueue is unknown): how many jobs
-- wait, how long, and why.
-- column: cluster: cluster name
-- column: cluster_queue: ClusterQueue (NULL for jobs not yet admitted anywhere)
-- column: local_queue: LocalQueue
-- column: jobs: jobs seen under Kueue
-- column: pending: jobs not admitted yet
-- column: admitted: jobs admitted
-- column: wait_p50_s, wait_p95_s, wait_max_s: admission wait (created to admitted, or to now while pending)
-- column: blocked_quota: jobs whose last not-admitted reason was quota / topology
-- column: blocked_topology: jobs whose last not-admitted reason was quota / topology
-- column: blocked_configuration: jobs whose queue or Workload is misconfigured (int_admission cause_kind
--   configuration: missing or inactive queue, no matching flavor, ...)
-- column: over_threshold: jobs that waited longer than admission_wait_s
SELECT cluster, cluster_queue, local_queue,
       count(*) AS jobs,
       count(*) FILTER (WHERE admitted_at IS NULL) AS pending,
       count(*) FILTER (WHERE admitted_at IS NOT NULL) AS admitted,
       quantile_cont(wait_s, 0.5) AS wait_p50_s,
       quantile_cont(wait_s, 0.95) AS wait_p95_s,
       max(wait_s) AS wait_max_s,
       count(*) FILTER (WHERE blocked_by = 'quota') AS blocked_quota,
       count(*) FILTER (WHERE blocked_by = 'topology') AS blocked_topology,
       count(*) FILTER (WHERE blocked_by = 'configuration') AS blocked_configuration,
       count(*) FILTER (WHERE wait_s > getvariable('admission_wait_s')) AS over_threshold
FROM intermediate.int_admission
GROUP BY ALL
