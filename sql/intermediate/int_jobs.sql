-- One row per job (cluster, namespace, job): its Kueue Workload, gang object, size, pods, nodes and the
-- times all gang members were bound and first ran (from the pods' own timestamps, stg_pods). Jobs come from
-- pods, from Kueue Workloads whose pods do not exist yet (suspended while queued) and from gang objects
-- without pods; a gang object belongs to the job its pods link it to (never by name equality).
-- column: cluster: identity (CONTRACT section 2)
-- column: namespace: identity (CONTRACT section 2)
-- column: job: identity (CONTRACT section 2)
-- column: job_kind: identity (CONTRACT section 2)
-- column: workload: Kueue Workload (NULL without Kueue)
-- column: cluster_queue: ClusterQueue that admitted it, else the one behind its LocalQueue (NULL without Kueue)
-- column: local_queue: LocalQueue (NULL without Kueue)
-- column: pod_group: gang object and its system (NULL without a gang)
-- column: gang_system: gang object and its system (NULL without a gang)
-- column: gang_size: PodGroup minMember / native minCount (for a job of several gang units, int_gang_units, the
--   sum of its root gang units' needed_pods: a composite counts its minGroupCount smallest children), else the gang
--   its object's spec asks for (stg_job_objects.spec_pods: Ray head + worker minReplicas, MPIJob launcher + workers,
--   LWS size x replicas), else a Kueue pod group's pod-group-total-count, else the Workload's pod count, else the
--   pods seen
-- column: schedule_timeout_s: coscheduling scheduleTimeoutSeconds (NULL elsewhere)
-- column: pods: live (not deleted) pods, and those Running now
-- column: pods_running: live (not deleted) pods, and those Running now
-- column: pods_bound: live pods bound to a node
-- column: gpus: GPUs requested by live pods
-- column: nodes: distinct nodes of live pods
-- column: created_at: earliest creation of the Workload, gang object or pods
-- column: run_started_at: earliest creation of the live pods (start of the current run)
-- column: all_bound_at: when the gang_size-th live pod was bound to a node (NULL until enough are); for a job of
--   several gang units (int_gang_units), when the last of its root gang units assembled
-- column: bound_before_capture: some of those gang_size pods were already bound when first seen, with no time of
--   their own: all_bound_at is only an upper bound
-- column: all_running_at: when the gang_size-th live pod first ran (NULL until the gang is complete)
-- column: running_before_capture: likewise for all_running_at
-- column: first_seen: observation range
-- column: last_seen: observation range
-- column: required_topology: Kueue topology request (or native topology key)
-- column: preferred_topology: Kueue topology request (or native topology key)
-- column: deleted_at: when the last of the job's objects (pods, Workload, gang object) was deleted; NULL while
--   any lives. For objects deleted while gangscope was not watching, the end of the list that found them gone
-- column: state: queued, assembling, running, finished (every pod done, or every pod gone with nothing left to
--   wait for, or the controller declared it done: Kueue Workload Finished, Job / JobSet failed or complete, with
--   no pod running), deleted (pods, Workload and gang object all deleted)
WITH wl AS (
    SELECT w.cluster, w.namespace, coalesce(w.owner_name, w.name) AS job, coalesce(w.owner_kind, 'Workload') AS job_kind,
           w.name AS workload, coalesce(w.cluster_queue, lq.cluster_queue) AS cluster_queue, w.queue_name, w.pod_count,
           w.required_topology, w.preferred_topology, w.pod_group, w.created_at, w.last_seen_at,
           CASE WHEN w.deleted THEN w.last_seen_at END AS deleted_at
    FROM staging.stg_workloads w
    LEFT JOIN staging.stg_local_queues lq ON lq.cluster = w.cluster AND lq.namespace = w.namespace AND lq.name = w.queue_name
    QUALIFY row_number() OVER (PARTITION BY w.cluster, w.namespace, coalesce(w.owner_name, w.name)
                               ORDER BY w.created_at DESC NULLS LAST) = 1
),
members AS (
    -- A gang object belongs to the job its pods belong to (their pod-group label / annotation / schedulingGroup).
    SELECT cluster, namespace, pod_group, pod_group_system,
           arg_max(job, created_at) AS job, arg_max(job_kind, created_at) AS job_kind
    FROM intermediate.int_pod_jobs
    WHERE pod_group IS NOT NULL
    GROUP BY ALL
),
pg AS (
    -- ... else, native, to its gang unit's job (int_gang_units: the controller of its Workload, else its owner,
    -- e.g. the Job that created it); else to the job of the Kueue Workload whose pod template names it, or that has
    -- the same owner; only a gang object nothing links is a job of its own.
    SELECT g.*, m.job IS NOT NULL AS has_members,
           coalesce(m.job, CASE WHEN g.system = 'native' THEN u.job END, wp.job, wo.job,
                    CASE WHEN g.system = 'native' THEN nw.controller_name END, g.name) AS job,
           coalesce(m.job_kind, CASE WHEN g.system = 'native' THEN u.job_kind END, wp.job_kind, wo.job_kind,
                    CASE WHEN g.system = 'native' THEN nw.controller_kind END, 'PodGroup') AS job_kind
    FROM staging.stg_pod_groups g
    LEFT JOIN members m
      ON m.cluster = g.cluster AND m.namespace = g.namespace AND m.pod_group = g.name AND m.pod_group_system = g.system
    LEFT JOIN wl wp ON wp.cluster = g.cluster AND wp.namespace = g.namespace AND wp.pod_group = g.name
    LEFT JOIN wl wo ON wo.cluster = g.cluster AND wo.namespace = g.namespace AND wo.job_kind = g.owner_kind
     AND wo.job = g.owner_name
    LEFT JOIN staging.stg_native_workloads nw
      ON g.system = 'native' AND nw.cluster = g.cluster AND nw.namespace = g.namespace AND nw.name = g.native_workload
    LEFT JOIN intermediate.int_gang_units u
      ON u.cluster = g.cluster AND u.namespace = g.namespace AND u.unit = g.name AND u.system = g.system
     AND u.unit_kind = 'podgroup'
    QUALIFY row_number() OVER (PARTITION BY g.cluster, g.namespace, g.name, g.system
                               ORDER BY nw.api_version DESC NULLS LAST) = 1
),
pg_job AS (
    -- One gang object per job (a job may own several: composites, 1.35 replicas): the one its pods name, else
    -- the newest.
    SELECT * FROM pg
    QUALIFY row_number() OVER (PARTITION BY cluster, namespace, job
                               ORDER BY has_members DESC, created_at DESC NULLS LAST, name) = 1
),
units AS (
    -- Jobs of several gangs (CompositePodGroup, 1.35 replicas, several PodGroups): members needed is the sum over
    -- the root gang units of the fewest pods that satisfy each (a composite's minGroupCount smallest children),
    -- and the job is assembled when every root gang unit is.
    SELECT cluster, namespace, job,
           CAST(sum(needed_pods) FILTER (WHERE parent IS NULL AND policy = 'gang') AS INTEGER) AS gang_size,
           CASE WHEN bool_and(assembled_at IS NOT NULL) FILTER (WHERE parent IS NULL AND policy = 'gang')
                THEN max(assembled_at) FILTER (WHERE parent IS NULL AND policy = 'gang') END AS assembled_at,
           CASE WHEN count(*) FILTER (WHERE parent IS NULL) = 1 THEN max(unit) FILTER (WHERE parent IS NULL) END
               AS root_unit
    FROM intermediate.int_gang_units
    GROUP BY ALL
    HAVING count(*) FILTER (WHERE unit_kind = 'composite') > 0
        OR count(*) FILTER (WHERE policy = 'gang' AND unit_kind <> 'composite') > 1
),
pods AS (
    SELECT cluster, namespace, job,
           arg_max(job_kind, created_at) AS job_kind,
           max(workload) AS workload,
           max(pod_group) AS pod_group,
           max(pod_group_system) AS gang_system,
           count(*) FILTER (WHERE NOT deleted) AS pods,
           count(*) FILTER (WHERE NOT deleted AND phase = 'Running') AS pods_running,
           count(*) FILTER (WHERE NOT deleted AND node IS NOT NULL) AS pods_bound,
           count(*) FILTER (WHERE NOT deleted AND phase IN ('Succeeded', 'Failed')) AS pods_done,
           coalesce(sum(gpus) FILTER (WHERE NOT deleted), 0) AS gpus,
           list_sort(list(DISTINCT node) FILTER (WHERE NOT deleted AND node IS NOT NULL)) AS nodes,
           list_sort(list({'t': bound_at, 'before_capture': bound_before_capture})
                     FILTER (WHERE gang_member AND NOT deleted AND bound_at IS NOT NULL)) AS bound_times,
           list_sort(list({'t': first_running_at, 'before_capture': running_before_capture})
                     FILTER (WHERE gang_member AND NOT deleted AND first_running_at IS NOT NULL)) AS running_times,
           -- The last run's pods once every pod is deleted: bound_times / running_times of a deleted job.
           list_sort(list({'t': bound_at, 'before_capture': bound_before_capture})
                     FILTER (WHERE gang_member AND last_run AND bound_at IS NOT NULL)) AS ended_bound_times,
           list_sort(list({'t': first_running_at, 'before_capture': running_before_capture})
                     FILTER (WHERE gang_member AND last_run AND first_running_at IS NOT NULL)) AS ended_running_times,
           min(created_at) AS pods_created_at,
           min(created_at) FILTER (WHERE NOT deleted) AS run_started_at,
           max(local_queue) AS local_queue,
           max(kueue_pod_group_total) AS group_total,
           min(least(created_at, last_seen_at)) AS first_seen,
           max(last_seen_at) AS last_seen,
           CASE WHEN bool_and(deleted) THEN max(last_seen_at) END AS deleted_at
    FROM (
        -- The pods deleted last, within a minute of each other: the last run of a job whose pods are all gone.
        SELECT *, deleted AND last_seen_at >= max(last_seen_at) OVER job_pods - INTERVAL 1 MINUTE AS last_run
        FROM intermediate.int_pod_jobs
        WINDOW job_pods AS (PARTITION BY cluster, namespace, job)
    ) p
    LEFT JOIN (SELECT cluster, namespace, name AS pod, local_queue, kueue_pod_group_total FROM staging.stg_pods) q
      USING (cluster, namespace, pod)
    GROUP BY cluster, namespace, job
),
terminal AS (
    -- The controller's word that a job is over: its Job / JobSet failed or completed (a JobSet's child Jobs do not
    -- speak for it), or Kueue declared its Workload Finished.
    SELECT cluster, namespace, name AS job, min(coalesce(failed_at, completed_at)) AS at
    FROM staging.stg_job_objects
    WHERE NOT deleted AND parent_job IS NULL AND (failed_at IS NOT NULL OR completed_at IS NOT NULL)
    GROUP BY ALL
    UNION ALL
    SELECT w.cluster, w.namespace, w.job, min(c.transition_at)
    FROM wl w JOIN staging.stg_workload_conditions c
      ON c.cluster = w.cluster AND c.namespace = w.namespace AND c.workload = w.workload
    WHERE c.type = 'Finished' AND c.status = 'True'
    GROUP BY ALL
),
spec AS (
    -- The gang a submitted object's spec asks for (RayCluster / RayJob, PyTorchJob, MPIJob, LeaderWorkerSet, TrainJob)
    SELECT cluster, namespace, kind, name, arg_max(spec_pods, last_seen_at) AS spec_pods
    FROM staging.stg_job_objects WHERE spec_pods IS NOT NULL AND parent_job IS NULL
    GROUP BY ALL
),
keys AS (
    SELECT cluster, namespace, job FROM pods
    UNION SELECT cluster, namespace, job FROM wl
    UNION SELECT cluster, namespace, job FROM pg_job
),
j AS (
    SELECT k.cluster, k.namespace, k.job,
           coalesce(w.job_kind, p.job_kind, g.job_kind) AS job_kind,
           coalesce(w.workload, p.workload) AS workload,
           w.cluster_queue,
           coalesce(w.queue_name, p.local_queue) AS local_queue,
           coalesce(u.root_unit, p.pod_group, g.name) AS pod_group,
           coalesce(p.gang_system, g.system) AS gang_system,
           CAST(coalesce(u.gang_size, g.min_member, o.spec_pods, p.group_total, w.pod_count, p.pods, 0) AS INTEGER)
               AS gang_size,
           u.job IS NOT NULL AS multi_gang, u.assembled_at AS units_assembled_at,
           g.schedule_timeout_s,
           coalesce(p.pods, 0) AS pods,
           coalesce(p.pods_running, 0) AS pods_running,
           coalesce(p.pods_bound, 0) AS pods_bound,
           coalesce(p.pods_done, 0) AS pods_done,
           coalesce(p.gpus, 0) AS gpus,
           coalesce(p.nodes, []) AS nodes,
           p.bound_times,
           p.running_times,
           p.ended_bound_times,
           p.ended_running_times,
           least(w.created_at, g.created_at, p.pods_created_at) AS created_at,
           p.run_started_at,
           least(w.created_at, g.created_at, p.first_seen) AS first_seen,
           greatest(w.last_seen_at, g.last_seen_at, p.last_seen) AS last_seen,
           w.required_topology,
           coalesce(w.preferred_topology, g.topology_key) AS preferred_topology,
           EXISTS (SELECT 1 FROM terminal t WHERE t.cluster = k.cluster AND t.namespace = k.namespace
                   AND t.job = k.job) AS terminal,
           CASE WHEN (w.job IS NULL OR w.deleted_at IS NOT NULL) AND (g.job IS NULL OR g.deleted)
                 AND (p.job IS NULL OR p.deleted_at IS NOT NULL)
                THEN greatest(w.deleted_at, CASE WHEN g.deleted THEN g.last_seen_at END, p.deleted_at) END AS deleted_at
    FROM keys k
    LEFT JOIN wl w USING (cluster, namespace, job)
    LEFT JOIN pg_job g USING (cluster, namespace, job)
    LEFT JOIN pods p USING (cluster, namespace, job)
    LEFT JOIN units u USING (cluster, namespace, job)
    LEFT JOIN spec o ON o.cluster = k.cluster AND o.namespace = k.namespace AND o.name = k.job
     AND o.kind = coalesce(w.job_kind, p.job_kind, g.job_kind)
),
judged AS (
    -- A deleted job (every object gone) is judged on its last run's pods: without them a Job deleted after
    -- it ran (ttlSecondsAfterFinished, kubectl delete) had no binding times and looked like a gang that never
    -- assembled until its deletion. A job with a live Workload or pods keeps its live pods only.
    SELECT * REPLACE (
        CASE WHEN deleted_at IS NOT NULL AND pods = 0 THEN ended_bound_times ELSE bound_times END AS bound_times,
        CASE WHEN deleted_at IS NOT NULL AND pods = 0 THEN ended_running_times ELSE running_times END AS running_times)
    FROM j
)
SELECT
    cluster, namespace, job, job_kind, workload, cluster_queue, local_queue, pod_group, gang_system,
    gang_size, schedule_timeout_s, pods, pods_running, pods_bound, gpus, nodes, created_at, run_started_at,
    CASE WHEN multi_gang THEN units_assembled_at
         WHEN gang_size > 0 AND len(coalesce(bound_times, [])) >= gang_size THEN bound_times[gang_size].t END
        AS all_bound_at,
    coalesce(gang_size > 0 AND len(coalesce(bound_times, [])) >= gang_size
             AND list_bool_or([b.before_capture FOR b IN bound_times[1:gang_size]]), false) AS bound_before_capture,
    CASE WHEN multi_gang AND units_assembled_at IS NULL THEN NULL
         WHEN gang_size > 0 AND len(coalesce(running_times, [])) >= gang_size THEN running_times[gang_size].t END
        AS all_running_at,
    coalesce(gang_size > 0 AND len(coalesce(running_times, [])) >= gang_size
             AND list_bool_or([r.before_capture FOR r IN running_times[1:gang_size]]), false)
        AS running_before_capture,
    first_seen, last_seen, required_topology, preferred_topology, deleted_at,
    CASE
        WHEN pods > 0 AND pods_done = pods THEN 'finished'
        -- Every pod it had is gone and no Workload or gang object waits for more (e.g. a failed Job's pods deleted).
        WHEN pods = 0 AND workload IS NULL AND pod_group IS NULL THEN 'finished'
        WHEN deleted_at IS NOT NULL THEN 'deleted'
        WHEN terminal AND pods_running = 0 THEN 'finished'
        WHEN pods = 0 AND workload IS NOT NULL THEN 'queued'
        WHEN multi_gang AND units_assembled_at IS NOT NULL AND pods_running > 0 THEN 'running'
        WHEN multi_gang THEN 'assembling'
        WHEN gang_size > 0 AND pods_running >= gang_size THEN 'running'
        WHEN pods_running > 0 AND gang_size = 0 THEN 'running'
        ELSE 'assembling'
    END AS state
FROM judged
