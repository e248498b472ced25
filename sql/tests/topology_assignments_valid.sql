-- staging.stg_topology_assignments: one value per level, a positive pod count, unique domain index
SELECT cluster, namespace, workload, podset, domain_index, 'shape' AS problem FROM staging.stg_topology_assignments
WHERE len("values") <> len(levels) OR pod_count IS NULL OR pod_count < 1
UNION ALL
SELECT cluster, namespace, workload, podset, domain_index, 'duplicate' FROM staging.stg_topology_assignments
GROUP BY ALL HAVING count(*) > 1
