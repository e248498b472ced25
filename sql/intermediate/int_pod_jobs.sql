-- Every pod (current and deleted) with its job identity in CONTRACT section 2 order, extended to the kinds teams
-- submit (docs/job-kinds.md): the controller owner of its Kueue Workload (a Kueue plain-pod group's Workload is owned
-- by its pods: the group it is named after, stg_workloads); else its LeaderWorkerSet, RayJob / RayCluster,
-- Kubeflow job (their pod labels); else its JobSet; else its Kueue pod group; else its coscheduling/Volcano PodGroup;
-- else the controller of its native scheduling.k8s.io Workload; else its own controller owner. That object then
-- counts for the submitted object above it (stg_job_objects.parent_job: a TrainJob's JobSet, a RayJob's RayCluster
-- and submitter Job, an MPIJob's launcher Job), so a child object is never a job of its own. Only pods of a job: linked to
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
-- column: gang_member: counts toward the gang (false for a RayJob's submitter pod)
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
parents AS (
    SELECT cluster, namespace, kind, name, arg_max(parent_kind, last_seen_at) AS parent_kind,
           arg_max(parent_job, last_seen_at) AS parent_job
    FROM staging.stg_job_objects WHERE parent_job IS NOT NULL
    GROUP BY ALL
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
      ON wa.cluster = p.cluster AND wa.namespace = p.namespace
     AND wa.name = coalesce(p.kueue_workload, p.kueue_pod_group)
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
),
candidate AS (
    SELECT *,
        CASE
            WHEN wl_owner_name IS NOT NULL THEN wl_owner_name
            WHEN lws_name IS NOT NULL THEN lws_name
            WHEN ray_origin_kind = 'RayJob' AND ray_origin_name IS NOT NULL THEN ray_origin_name
            WHEN ray_cluster IS NOT NULL THEN ray_cluster
            -- a Kubeflow job's own pods; an MPIJob launcher's pod is its Job's, which counts for the MPIJob
            WHEN kubeflow_job IS NOT NULL AND owner_kind = 'Job' AND owner_name IS NOT NULL THEN owner_name
            WHEN kubeflow_job IS NOT NULL THEN kubeflow_job
            WHEN jobset_name IS NOT NULL THEN jobset_name
            WHEN kueue_pod_group IS NOT NULL THEN kueue_pod_group
            WHEN pod_group_system IN ('coscheduling', 'volcano') THEN pod_group
            WHEN native_name IS NOT NULL THEN native_name
            WHEN owner_name IS NOT NULL THEN owner_name
            ELSE name
        END AS cand_job,
        CASE
            WHEN wl_owner_name IS NOT NULL THEN wl_owner_kind
            WHEN lws_name IS NOT NULL THEN 'LeaderWorkerSet'
            WHEN ray_origin_kind = 'RayJob' AND ray_origin_name IS NOT NULL THEN 'RayJob'
            WHEN ray_cluster IS NOT NULL THEN 'RayCluster'
            WHEN kubeflow_job IS NOT NULL AND owner_kind = 'Job' AND owner_name IS NOT NULL THEN 'Job'
            WHEN kubeflow_job IS NOT NULL
                THEN coalesce(CASE WHEN owner_kind IN ('PyTorchJob', 'MPIJob', 'TFJob', 'XGBoostJob', 'PaddleJob',
                                                       'JAXJob') THEN owner_kind END,
                              CASE kubeflow_operator WHEN 'mpi-operator' THEN 'MPIJob'
                                                     WHEN 'pytorchjob-controller' THEN 'PyTorchJob' END, owner_kind)
            WHEN jobset_name IS NOT NULL THEN 'JobSet'
            WHEN kueue_pod_group IS NOT NULL THEN 'PodGroup'
            WHEN pod_group_system IN ('coscheduling', 'volcano') THEN 'PodGroup'
            WHEN native_name IS NOT NULL THEN native_kind
            WHEN owner_name IS NOT NULL THEN owner_kind
            ELSE 'Pod'
        END AS cand_kind
    FROM joined
),
resolved AS (
    SELECT c.*, coalesce(u.parent_job, CASE WHEN c.cand_kind = 'Job' AND c.kubeflow_job IS NOT NULL
                                            THEN c.kubeflow_job END, c.cand_job) AS job,
           coalesce(u.parent_kind, CASE WHEN c.cand_kind = 'Job' AND c.kubeflow_job IS NOT NULL THEN 'MPIJob' END,
                    c.cand_kind) AS job_kind
    FROM candidate c
    LEFT JOIN parents u
      ON u.cluster = c.cluster AND u.namespace = c.namespace AND u.kind = c.cand_kind AND u.name = c.cand_job
)
SELECT
    cluster, namespace, name AS pod, uid AS pod_uid,
    job,
    job_kind,
    wl_name AS workload,
    coalesce(pod_group, native_workload) AS pod_group,
    CASE WHEN pod_group_system IS NULL AND native_workload IS NOT NULL THEN 'native' ELSE pod_group_system END
        AS pod_group_system,
    node, phase, deleted, created_at, first_seen_at, bound_at, bound_before_capture, first_running_at,
    running_before_capture, last_seen_at, gpus, disruption_reason, unscheduled_message, disruption_at, scheduling_gates,
    disruption_message, status_reason, status_message, deletion_requested_at, restart_policy, completion_index,
    -- a RayJob's submitter (its Job's pod, outside the RayCluster) is part of the job, not of its gang
    NOT (job_kind = 'RayJob' AND ray_cluster IS NULL) AS gang_member
FROM resolved
WHERE wl_name IS NOT NULL OR jobset_name IS NOT NULL OR pod_group IS NOT NULL OR native_workload IS NOT NULL
   OR native_name IS NOT NULL OR lws_name IS NOT NULL OR ray_cluster IS NOT NULL OR kubeflow_job IS NOT NULL
   OR kueue_pod_group IS NOT NULL
   OR owner_kind IN ('Job', 'JobSet', 'TrainJob', 'PyTorchJob', 'MPIJob', 'TFJob', 'XGBoostJob', 'PaddleJob', 'JAXJob',
                     'RayCluster', 'RayJob', 'LeaderWorkerSet', 'Workload')
   OR (gpus > 0 AND coalesce(owner_kind, '') NOT IN ('DaemonSet', 'Node'))
