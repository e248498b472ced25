-- Kueue Topology objects: their levels (node-label keys), highest to lowest.
-- column: cluster: the Topology
-- column: name: the Topology
-- column: levels: spec.levels[].nodeLabel
SELECT cluster, name, CAST(json_extract_string(object, '$.spec.levels[*].nodeLabel') AS VARCHAR[]) AS levels
FROM staging.stg_k8s_events
WHERE kind = 'Topology' AND api_version LIKE 'kueue.x-k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED')
QUALIFY row_number() OVER (PARTITION BY cluster, name ORDER BY observed_at DESC) = 1
