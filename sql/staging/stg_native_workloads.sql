-- Native scheduling.k8s.io Workloads (any version): who controls them, for job identity.
-- column: cluster: the Workload
-- column: namespace: the Workload
-- column: name: the Workload
-- column: api_version: scheduling.k8s.io/v1alpha1 ... v1beta1
-- column: controller_kind: spec.controllerRef
-- column: controller_name: spec.controllerRef
SELECT cluster, namespace, name, api_version,
       object->>'$.spec.controllerRef.kind' AS controller_kind,
       object->>'$.spec.controllerRef.name' AS controller_name
FROM staging.stg_k8s_events
WHERE kind = 'Workload' AND api_version LIKE 'scheduling.k8s.io/%' AND event_type IN ('ADDED', 'MODIFIED')
QUALIFY row_number() OVER (PARTITION BY cluster, namespace, name ORDER BY observed_at DESC) = 1
