-- FailedScheduling events parsed into one row per "<count> <reason>" item of the scheduler's
-- "0/N nodes are available: ..." message; gang messages without that prefix (Coscheduling permit
-- timeout, "pod group is unschedulable", Volcano) give one row with node_count NULL.
-- column: cluster: the pod the event is about
-- column: namespace: the pod the event is about
-- column: pod: the pod the event is about
-- column: first_at: first and last occurrence of the event
-- column: last_at: first and last occurrence of the event
-- column: total_nodes: N of "0/N nodes are available"
-- column: node_count: nodes rejected for this reason
-- column: reason: the reason text, e.g. "Insufficient nvidia.com/gpu"
-- column: category: insufficient_gpu, insufficient_resources, taint, selector_affinity, unschedulable_node,
--   gang, topology_spread, volume, other
-- column: message: the full message
WITH fs AS (
    SELECT cluster, object_namespace AS namespace, object_name AS pod, first_at, last_at, message,
           TRY_CAST(regexp_extract(message, '^0/(\d+) nodes are available', 1) AS INTEGER) AS total_nodes,
           regexp_extract(message, '^0/\d+ nodes are available:\s*(.*?)(?:\s*preemption:.*)?$', 1) AS body
    FROM staging.stg_events
    WHERE reason = 'FailedScheduling' AND object_kind = 'Pod'
),
items AS (
    SELECT fs.*, trim(item) AS item
    FROM fs, unnest(CASE WHEN total_nodes IS NULL THEN [message]
                         ELSE string_split(regexp_replace(body, '\.+$', ''), ', ') END) AS t(item)
),
parsed AS (
    SELECT *,
           TRY_CAST(regexp_extract(item, '^(\d+) ', 1) AS INTEGER) AS node_count,
           CASE WHEN total_nodes IS NULL THEN item ELSE regexp_replace(item, '^\d+ ', '') END AS reason
    FROM items
    WHERE total_nodes IS NULL OR regexp_matches(item, '^\d+ ')
)
SELECT cluster, namespace, pod, first_at, last_at, total_nodes,
       CASE WHEN total_nodes IS NULL THEN NULL ELSE node_count END AS node_count,
       reason,
       CASE
           WHEN reason ILIKE 'Insufficient nvidia.com/gpu%' THEN 'insufficient_gpu'
           WHEN reason ILIKE 'Insufficient %' OR reason ILIKE 'Too many pods%' THEN 'insufficient_resources'
           WHEN reason ILIKE '%taint%' THEN 'taint'
           WHEN reason ILIKE '%node affinity%' OR reason ILIKE '%selector%' OR reason ILIKE '%pod affinity%'
             OR reason ILIKE '%anti-affinity%' OR reason ILIKE '%requested node name%' THEN 'selector_affinity'
           WHEN reason ILIKE '%were unschedulable%' OR reason ILIKE '%unknown conditions%' THEN 'unschedulable_node'
           WHEN reason ILIKE '%topology spread%' THEN 'topology_spread'
           WHEN reason ILIKE '%volume%' OR reason ILIKE '%storage%' OR reason ILIKE '%pvc%' THEN 'volume'
           WHEN reason ILIKE '%pod group%' OR reason ILIKE '%gang%' OR reason ILIKE '%sibling%'
             OR reason ILIKE '%Coscheduling%' OR reason ILIKE '%rejection in%' OR reason ILIKE '%minMember%'
             OR reason ILIKE '%tasks in gang%' THEN 'gang'
           ELSE 'other'
       END AS category,
       message
FROM parsed
