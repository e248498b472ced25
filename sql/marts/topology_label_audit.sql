-- Nodes missing a label of a Kueue Topology level: Topology-aware scheduling cannot place pods on them
-- at that level, and jobs that require a level no node carries are never admitted.
-- column: cluster: the node (NULL when no node at all carries the level)
-- column: node: the node (NULL when no node at all carries the level)
-- column: topology: the Kueue Topology
-- column: level: the node-label key (Topology level) that is missing
-- column: gpus: the node's allocatable GPUs
WITH levels AS (
    SELECT t.cluster, t.name AS topology, unnest(t.levels) AS level FROM staging.stg_topologies t
)
SELECT n.cluster, n.name AS node, l.topology, l.level, n.gpus
FROM staging.stg_nodes n
JOIN levels l ON l.cluster = n.cluster
WHERE NOT n.deleted AND json_extract_string(n.labels, '$."' || l.level || '"') IS NULL
ORDER BY n.cluster, l.topology, l.level, n.name
