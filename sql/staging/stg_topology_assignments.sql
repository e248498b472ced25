-- Kueue topologyAssignment of every admitted podSet, decoded to one row per domain, the same for
-- v1beta1 (levels + domains[]) and v1beta2 (levels + slices[] with universal/individual values
-- and pod counts: value = prefix + roots[i] + suffix).
-- column: cluster: the Workload (latest version)
-- column: namespace: the Workload (latest version)
-- column: workload: the Workload (latest version)
-- column: podset: podSetAssignments[].name
-- column: domain_index: 0-based domain order within the assignment
-- column: levels: node-label keys, highest to lowest
-- column: "values": the domain's value per level
-- column: pod_count: pods assigned to the domain
WITH latest AS (
    SELECT cluster, namespace, name, object FROM staging.stg_k8s_events
    WHERE kind = 'Workload' AND api_version LIKE 'kueue.x-k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED')
    QUALIFY row_number() OVER (PARTITION BY cluster, namespace, name ORDER BY observed_at DESC) = 1
),
psa AS (
    SELECT l.cluster, l.namespace, l.name AS workload, p->>'$.name' AS podset,
           json_extract(p, '$.topologyAssignment') AS ta,
           CAST(json_extract_string(p, '$.topologyAssignment.levels[*]') AS VARCHAR[]) AS levels
    FROM latest l, unnest(coalesce(json_extract(l.object, '$.status.admission.podSetAssignments[*]'), []::JSON[])) AS t(p)
    WHERE json_extract(p, '$.topologyAssignment') IS NOT NULL
),
v1beta1 AS (
    SELECT cluster, namespace, workload, podset, levels, d.i - 1 AS domain_index,
           CAST(json_extract_string(d.dom, '$.values[*]') AS VARCHAR[]) AS "values",
           TRY_CAST(d.dom->>'$.count' AS INTEGER) AS pod_count
    FROM psa, unnest(json_extract(ta, '$.domains[*]')) WITH ORDINALITY AS d(dom, i)
    WHERE json_extract(ta, '$.domains') IS NOT NULL
),
slices AS (
    SELECT cluster, namespace, workload, podset, levels, s.i AS slice_no, s.sl,
           TRY_CAST(s.sl->>'$.domainCount' AS INTEGER) AS domain_count
    FROM psa, unnest(json_extract(ta, '$.slices[*]')) WITH ORDINALITY AS s(sl, i)
    WHERE json_extract(ta, '$.slices') IS NOT NULL
),
slice_domains AS (
    SELECT s.*, r.d,
           coalesce(TRY_CAST(s.sl->>'$.podCounts.universal' AS INTEGER),
                    TRY_CAST(s.sl->>('$.podCounts.individual[' || r.d || ']') AS INTEGER)) AS pod_count
    FROM slices s, range(s.domain_count) AS r(d)
),
slice_values AS (
    SELECT sd.cluster, sd.namespace, sd.workload, sd.podset, sd.levels, sd.slice_no, sd.d, sd.pod_count,
           list(coalesce(sd.sl->>('$.valuesPerLevel[' || lv.l || '].universal'),
                         coalesce(sd.sl->>('$.valuesPerLevel[' || lv.l || '].individual.prefix'), '')
                         || coalesce(sd.sl->>('$.valuesPerLevel[' || lv.l || '].individual.roots[' || sd.d || ']'), '')
                         || coalesce(sd.sl->>('$.valuesPerLevel[' || lv.l || '].individual.suffix'), ''))
                ORDER BY lv.l) AS "values"
    FROM slice_domains sd, range(len(sd.levels)) AS lv(l)
    GROUP BY ALL
),
v1beta2 AS (
    SELECT cluster, namespace, workload, podset, levels,
           CAST(row_number() OVER (PARTITION BY cluster, namespace, workload, podset ORDER BY slice_no, d) - 1
                AS BIGINT) AS domain_index,
           "values", pod_count
    FROM slice_values
)
SELECT cluster, namespace, workload, podset, CAST(domain_index AS BIGINT) AS domain_index, levels, "values", pod_count
FROM v1beta1
UNION ALL
SELECT cluster, namespace, workload, podset, domain_index, levels, "values", pod_count FROM v1beta2
