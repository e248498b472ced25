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
                -- By type, never conditions[0]: 1.37 adds DisruptionTarget and list order is not guaranteed.
                CASE [c->>'$.status' FOR c IN coalesce(json_extract(object, '$.status.conditions[*]'), []::JSON[])
                      IF (c->>'$.type') IN ('PodGroupInitiallyScheduled', 'PodGroupScheduled',
                                            'CompositePodGroupInitiallyScheduled')][1]
                    WHEN 'True' THEN 'Scheduled' WHEN 'False' THEN 'Unschedulable' END) AS phase,
       min(observed_at) AS first_at
FROM staging.stg_k8s_events
WHERE kind IN ('PodGroup', 'CompositePodGroup') AND event_type IN ('ADDED', 'MODIFIED')
GROUP BY ALL
HAVING phase IS NOT NULL
