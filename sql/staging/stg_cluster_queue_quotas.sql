-- Kueue ClusterQueue quotas: one row per ClusterQueue, flavor and resource with its nominal quota, borrowing
-- limit, cohort and current usage, so a job short of quota can be told whether its cohort could lend it.
-- column: cluster: cluster name
-- column: cluster_queue: the ClusterQueue
-- column: cohort: spec.cohortName (v1beta2) or spec.cohort (v1beta1); NULL when it borrows from no one
-- column: flavor: resourceGroups[].flavors[].name
-- column: resource: resourceGroups[].flavors[].resources[].name
-- column: nominal_quota: nominalQuota as a number (NULL for a quantity with a unit suffix, e.g. 256Gi)
-- column: borrowing_limit: borrowingLimit (NULL: unlimited within the cohort)
-- column: used: status.flavorsUsage total for the flavor and resource (NULL when the status does not say)
WITH cq AS (
    SELECT cluster, name, object
    FROM raw.k8s_objects
    WHERE kind = 'ClusterQueue' AND api_version LIKE 'kueue.x-k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED')
    QUALIFY row_number() OVER (PARTITION BY cluster, name ORDER BY observed_at DESC) = 1
),
quota AS (
    SELECT cq.cluster, cq.name, coalesce(cq.object->>'$.spec.cohortName', cq.object->>'$.spec.cohort') AS cohort,
           f->>'$.name' AS flavor, r->>'$.name' AS resource,
           TRY_CAST(r->>'$.nominalQuota' AS DOUBLE) AS nominal_quota,
           TRY_CAST(r->>'$.borrowingLimit' AS DOUBLE) AS borrowing_limit
    FROM cq,
         unnest(CAST(coalesce(cq.object->'$.spec.resourceGroups', '[]') AS JSON[])) AS g(grp),
         unnest(CAST(coalesce(grp->'$.flavors', '[]') AS JSON[])) AS fl(f),
         unnest(CAST(coalesce(f->'$.resources', '[]') AS JSON[])) AS rs(r)
),
usage AS (
    SELECT cq.cluster, cq.name, u->>'$.name' AS flavor, r->>'$.name' AS resource,
           TRY_CAST(r->>'$.total' AS DOUBLE) AS used
    FROM cq,
         unnest(CAST(coalesce(cq.object->'$.status.flavorsUsage', '[]') AS JSON[])) AS fu(u),
         unnest(CAST(coalesce(u->'$.resources', '[]') AS JSON[])) AS rs(r)
)
SELECT q.cluster, q.name AS cluster_queue, q.cohort, q.flavor, q.resource, q.nominal_quota, q.borrowing_limit, u.used
FROM quota q
LEFT JOIN usage u USING (cluster, name, flavor, resource)
