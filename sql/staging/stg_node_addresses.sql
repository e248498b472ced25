-- Node addresses: one row per Node name and per status.addresses[].address, so samples whose
-- only node hint is the host part of `instance` can be joined to a Node (CONTRACT section 2).
-- column: cluster: cluster name
-- column: node: Node name
-- column: address: the Node name itself, or one of its status.addresses (IP, hostname)
WITH latest AS (
    SELECT cluster, name, object
    FROM staging.stg_k8s_events
    WHERE kind = 'Node' AND event_type IN ('ADDED', 'MODIFIED')
    QUALIFY row_number() OVER (PARTITION BY cluster, name ORDER BY observed_at DESC) = 1
)
SELECT DISTINCT cluster, node, address
FROM (
    SELECT cluster, name AS node, name AS address FROM latest
    UNION ALL
    SELECT l.cluster, l.name, json_extract_string(a, '$.address')
    FROM latest l, unnest(coalesce(json_extract(l.object, '$.status.addresses[*]'), []::JSON[])) AS t(a)
)
WHERE address IS NOT NULL AND address <> ''
