-- Phase history of gang objects: the first time each PodGroup was seen in each phase (coscheduling,
-- Volcano) or with each native scheduled-condition status.
-- column: cluster: the PodGroup
-- column: namespace: the PodGroup
-- column: name: the PodGroup
-- column: system: the PodGroup
-- column: phase: status.phase, or Scheduled / Unschedulable for native conditions
-- column: first_at: first observation in that phase
SELECT cluster, namespace, name,
       CASE WHEN api_version LIKE 'scheduling.x-k8s.io/%' THEN 'coscheduling'
            WHEN api_version LIKE 'scheduling.volcano.sh/%' THEN 'volcano' ELSE 'native' END AS system,
       coalesce(object->>'$.status.phase',
                CASE json_extract_string(object, '$.status.conditions[0].status')
                    WHEN 'True' THEN 'Scheduled' WHEN 'False' THEN 'Unschedulable' END) AS phase,
       min(observed_at) AS first_at
FROM staging.stg_k8s_events
WHERE kind = 'PodGroup' AND event_type IN ('ADDED', 'MODIFIED')
GROUP BY ALL
HAVING phase IS NOT NULL
