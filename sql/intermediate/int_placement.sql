-- Actual placement per job against the topology level it asked for (Kueue required/preferred, native
-- topology key); without a request, the level just above kubernetes.io/hostname in the Kueue Topology.
-- A job is misplaced when its live pods span more domains at that level than its size needs (the
-- fewest of the largest domains that hold its GPUs, or its nodes when it requests no GPUs).
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: level: node-label key judged; requested: whether the job asked for it
-- column: domains: distinct domains (label values) its nodes sit in; nodes without the label count one each
-- column: needed_domains: how few domains could hold it
-- column: assigned_domains: distinct domains at that level in Kueue's topologyAssignment (NULL without one)
-- column: misplaced: domains > needed_domains
-- column: domain_values: the domain values
WITH topo AS (
    SELECT cluster,
           min(CASE WHEN len(levels) >= 2 AND levels[len(levels)] = 'kubernetes.io/hostname' THEN levels[len(levels) - 1]
                    WHEN levels[len(levels)] <> 'kubernetes.io/hostname' THEN levels[len(levels)] END) AS default_level
    FROM staging.stg_topologies GROUP BY cluster
),
j AS (
    SELECT j.cluster, j.namespace, j.job, j.gpus, j.nodes,
           coalesce(j.required_topology, j.preferred_topology, t.default_level) AS level,
           coalesce(j.required_topology, j.preferred_topology) IS NOT NULL AS requested,
           j.workload
    FROM intermediate.int_jobs j LEFT JOIN topo t USING (cluster)
    WHERE len(j.nodes) > 0
),
job_nodes AS (
    SELECT cluster, namespace, job, level, unnest(nodes) AS node FROM j WHERE level IS NOT NULL
),
node_dom AS (
    SELECT jn.cluster, jn.namespace, jn.job, jn.level, jn.node,
           json_extract_string(n.labels, '$."' || jn.level || '"') AS domain
    FROM job_nodes jn
    LEFT JOIN staging.stg_nodes n ON n.cluster = jn.cluster AND n.name = jn.node
),
span AS (
    SELECT cluster, namespace, job,
           count(DISTINCT coalesce(domain, 'node:' || node)) AS domains,
           list_sort(list(DISTINCT coalesce(domain, 'node:' || node))) AS domain_values
    FROM node_dom GROUP BY ALL
),
capacity AS (
    SELECT j.cluster, j.namespace, j.job,
           max(d.gpus) AS max_domain_gpus, max(d.nodes) AS max_domain_nodes
    FROM j
    JOIN (
        SELECT n.cluster, lv.level, json_extract_string(n.labels, '$."' || lv.level || '"') AS domain,
               sum(n.gpus) AS gpus, count(*) AS nodes
        FROM staging.stg_nodes n
        JOIN (SELECT DISTINCT cluster, level FROM j WHERE level IS NOT NULL) lv USING (cluster)
        WHERE NOT n.deleted
        GROUP BY ALL
    ) d ON d.cluster = j.cluster AND d.level = j.level AND d.domain IS NOT NULL
    GROUP BY ALL
),
assigned AS (
    SELECT a.cluster, a.namespace, j.job,
           count(DISTINCT a."values"[list_position(a.levels, j.level)]) AS assigned_domains
    FROM staging.stg_topology_assignments a
    JOIN j ON j.cluster = a.cluster AND j.namespace = a.namespace AND j.workload = a.workload
    WHERE list_position(a.levels, j.level) IS NOT NULL
    GROUP BY ALL
)
SELECT
    j.cluster, j.namespace, j.job, j.level, j.requested,
    s.domains,
    greatest(1, CASE WHEN j.gpus > 0 AND c.max_domain_gpus > 0 THEN ceil(j.gpus / c.max_domain_gpus)
                     WHEN c.max_domain_nodes > 0 THEN ceil(len(j.nodes) / c.max_domain_nodes)
                     ELSE 1 END)::INTEGER AS needed_domains,
    a.assigned_domains,
    s.domains > greatest(1, CASE WHEN j.gpus > 0 AND c.max_domain_gpus > 0 THEN ceil(j.gpus / c.max_domain_gpus)
                                 WHEN c.max_domain_nodes > 0 THEN ceil(len(j.nodes) / c.max_domain_nodes)
                                 ELSE 1 END) AS misplaced,
    s.domain_values
FROM j
JOIN span s USING (cluster, namespace, job)
LEFT JOIN capacity c USING (cluster, namespace, job)
LEFT JOIN assigned a USING (cluster, namespace, job)
