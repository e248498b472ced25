-- Every pod (current and deleted) with its job identity in CONTRACT section 2 order: the controller
-- owner of its Kueue Workload; else its JobSet; else its coscheduling/Volcano PodGroup; else the
-- controller of its native scheduling.k8s.io Workload; else its own controller owner. Only pods of a job: linked to
-- a Kueue Workload, a JobSet or a gang, owned by a batch / training controller, or holding GPUs; node agents
-- (DaemonSet, static pods) and services without GPUs (exporters, controllers) are not jobs.
-- column: cluster: the Pod
-- column: namespace: the Pod
-- column: pod: the Pod
-- column: pod_uid: the Pod
-- column: job: the job (top-level owner name and kind)
-- column: job_kind: the job (top-level owner name and kind)
-- column: workload: Kueue Workload name (NULL without Kueue)
-- column: pod_group: gang object and system (coscheduling, volcano, native)
-- column: pod_group_system: gang object and system (coscheduling, volcano, native)
-- column: node: from staging.stg_pods
-- column: phase: from staging.stg_pods
-- column: deleted: from staging.stg_pods
-- column: created_at: from staging.stg_pods
-- column: first_seen_at: from staging.stg_pods
-- column: bound_at: from staging.stg_pods
-- column: bound_before_capture: from staging.stg_pods
-- column: first_running_at: from staging.stg_pods
-- column: running_before_capture: from staging.stg_pods
-- column: last_seen_at: from staging.stg_pods
-- column: gpus: from staging.stg_pods
-- column: disruption_reason: from staging.stg_pods
-- column: unscheduled_message: from staging.stg_pods
-- column: disruption_at: from staging.stg_pods
-- column: scheduling_gates: from staging.stg_pods
-- column: disruption_message: from staging.stg_pods
-- column: status_reason: from staging.stg_pods
-- column: status_message: from staging.stg_pods
-- column: deletion_requested_at: from staging.stg_pods
-- column: restart_policy: from staging.stg_pods
-- column: completion_index: from staging.stg_pods
WITH wl_by_owner AS (
    SELECT * FROM staging.stg_workloads
    WHERE owner_name IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY cluster, namespace, owner_name ORDER BY created_at DESC NULLS LAST) = 1
),
native AS (
    SELECT g.cluster, g.namespace, g.name AS pod_group, w.name AS native_workload, w.controller_kind, w.controller_name
    FROM staging.stg_pod_groups g
    JOIN staging.stg_native_workloads w
      ON w.cluster = g.cluster AND w.namespace = g.namespace AND w.name = g.native_workload
    WHERE g.system = 'native'
    QUALIFY row_number() OVER (PARTITION BY g.cluster, g.namespace, g.name ORDER BY w.api_version DESC) = 1
),
native_wl AS (
    SELECT * FROM staging.stg_native_workloads
    QUALIFY row_number() OVER (PARTITION BY cluster, namespace, name ORDER BY api_version DESC) = 1
),
joined AS (
    SELECT p.*,
           coalesce(wa.name, wj.name, wo.name) AS wl_name,
           coalesce(wa.owner_kind, wj.owner_kind, wo.owner_kind) AS wl_owner_kind,
           coalesce(wa.owner_name, wj.owner_name, wo.owner_name) AS wl_owner_name,
           coalesce(n.controller_kind, nw.controller_kind) AS native_kind,
           coalesce(n.controller_name, nw.controller_name) AS native_name
    FROM staging.stg_pods p
    LEFT JOIN staging.stg_workloads wa
      ON wa.cluster = p.cluster AND wa.namespace = p.namespace AND wa.name = p.kueue_workload
    LEFT JOIN wl_by_owner wj
      ON p.kueue_workload IS NULL AND wj.cluster = p.cluster AND wj.namespace = p.namespace
     AND wj.owner_name = p.jobset_name
    LEFT JOIN wl_by_owner wo
      ON p.kueue_workload IS NULL AND p.jobset_name IS NULL AND wo.cluster = p.cluster AND wo.namespace = p.namespace
     AND wo.owner_name = p.owner_name
    LEFT JOIN native n
      ON n.cluster = p.cluster AND n.namespace = p.namespace AND n.pod_group = p.pod_group AND p.pod_group_system = 'native'
    LEFT JOIN native_wl nw
      ON nw.cluster = p.cluster AND nw.namespace = p.namespace AND nw.name = p.native_workload
)
SELECT
    cluster, namespace, name AS pod, uid AS pod_uid,
    CASE
        WHEN wl_owner_name IS NOT NULL THEN wl_owner_name
        WHEN jobset_name IS NOT NULL THEN jobset_name
        WHEN pod_group_system IN ('coscheduling', 'volcano') THEN pod_group
        WHEN native_name IS NOT NULL THEN native_name
        WHEN owner_name IS NOT NULL THEN owner_name
        ELSE name
    END AS job,
    CASE
        WHEN wl_owner_name IS NOT NULL THEN wl_owner_kind
        WHEN jobset_name IS NOT NULL THEN 'JobSet'
        WHEN pod_group_system IN ('coscheduling', 'volcano') THEN 'PodGroup'
        WHEN native_name IS NOT NULL THEN native_kind
        WHEN owner_name IS NOT NULL THEN owner_kind
        ELSE 'Pod'
    END AS job_kind,
    wl_name AS workload,
    coalesce(pod_group, native_workload) AS pod_group,
    CASE WHEN pod_group_system IS NULL AND native_workload IS NOT NULL THEN 'native' ELSE pod_group_system END
        AS pod_group_system,
    node, phase, deleted, created_at, first_seen_at, bound_at, bound_before_capture, first_running_at,
    running_before_capture, last_seen_at, gpus, disruption_reason, unscheduled_message, disruption_at, scheduling_gates,
    disruption_message, status_reason, status_message, deletion_requested_at, restart_policy, completion_index
FROM joined
WHERE wl_name IS NOT NULL OR jobset_name IS NOT NULL OR pod_group IS NOT NULL OR native_workload IS NOT NULL
   OR native_name IS NOT NULL
   OR owner_kind IN ('Job', 'JobSet', 'TrainJob', 'PyTorchJob', 'MPIJob', 'TFJob', 'XGBoostJob', 'PaddleJob', 'JAXJob',
                     'RayCluster', 'RayJob', 'LeaderWorkerSet', 'Workload')
   OR (gpus > 0 AND coalesce(owner_kind, '') NOT IN ('DaemonSet', 'Node'))
