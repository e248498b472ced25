-- One gang model for every system: one row per gang unit and whether it is assembled. A unit is a
-- coscheduling / Volcano PodGroup, a native leaf PodGroup (1.36 / 1.37), a 1.35 v1alpha1 Workload pod group
-- replica (Workload, podGroup, podGroupReplicaKey: "the policy is applied separately to each replica") or a
-- 1.37 CompositePodGroup, a gang of gangs assembled when minGroupCount of its child groups are (at any depth
-- the API admits: root, up to 3 composite levels, leaf PodGroups). A leaf is assembled when its needed members are bound to nodes (else, native, when the scheduler
-- marked it scheduled); a `basic` group (the 1.37 Job default) schedules pod by pod and needs one.
-- column: cluster: identity
-- column: namespace: identity
-- column: job: the job (CONTRACT section 2): its member pods' job, else the controller of its native Workload,
--   else its controller owner (the Job that created it), else its own name
-- column: job_kind: kind of that owner
-- column: unit: PodGroup / CompositePodGroup name, or <workload>/<podGroup>[/<replica key>] for 1.35
-- column: unit_kind: podgroup, composite, replica
-- column: system: coscheduling, volcano, native
-- column: parent: the CompositePodGroup this unit belongs to (NULL: a root)
-- column: policy: gang or basic
-- column: needed: members needed to be assembled: minMember / minCount pods, minGroupCount child groups, 1 for basic
-- column: needed_pods: pods needed: a leaf's needed; a composite's fewest pods that can satisfy it, the sum of
--   needed_pods over its minGroupCount smallest children (a gang of gangs needs only minGroupCount of them)
-- column: members: live member pods (child groups for a composite)
-- column: members_bound: members bound to a node (child groups assembled for a composite)
-- column: assembled_at: when the needed-th member was bound (child group assembled), else the native scheduled
--   condition time; NULL while not assembled
-- column: group_status: native PodGroupInitiallyScheduled / PodGroupScheduled status, reason, message
-- column: group_reason: native PodGroupInitiallyScheduled / PodGroupScheduled status, reason, message
-- column: group_message: native PodGroupInitiallyScheduled / PodGroupScheduled status, reason, message
-- column: created_at: the gang object, else its first member pod
WITH pj AS (
    SELECT p.*, s.native_group, s.native_replica_key, s.native_workload AS pod_workload
    FROM intermediate.int_pod_jobs p
    JOIN staging.stg_pods s
      ON s.cluster = p.cluster AND s.namespace = p.namespace AND s.name = p.pod AND s.uid IS NOT DISTINCT FROM p.pod_uid
),
pod_units AS (
    SELECT cluster, namespace,
           CASE WHEN native_group IS NOT NULL
                THEN pod_workload || '/' || native_group || coalesce('/' || native_replica_key, '')
                ELSE pod_group END AS unit,
           CASE WHEN native_group IS NOT NULL THEN 'replica' ELSE 'podgroup' END AS unit_kind,
           pod_group_system AS system,
           any_value(pod_workload) AS pod_workload, any_value(native_group) AS native_group,
           arg_max(job, created_at) AS job, arg_max(job_kind, created_at) AS job_kind,
           count(*) FILTER (WHERE NOT deleted) AS members,
           count(*) FILTER (WHERE NOT deleted AND node IS NOT NULL) AS members_bound,
           list_sort(list(bound_at) FILTER (WHERE NOT deleted AND bound_at IS NOT NULL)) AS times,
           min(created_at) AS created_at
    FROM pj
    WHERE pod_group IS NOT NULL
    GROUP BY ALL
),
objects AS (
    SELECT g.cluster, g.namespace, g.name AS unit,
           CASE g.kind WHEN 'CompositePodGroup' THEN 'composite' ELSE 'podgroup' END AS unit_kind,
           'native' AS system, g.parent, g.policy, coalesce(g.min_count, g.min_group_count) AS min_count,
           g.scheduled_status, g.scheduled_reason, g.scheduled_message, g.scheduled_at, g.created_at,
           coalesce(w.controller_name, g.owner_name, g.name) AS obj_job,
           coalesce(w.controller_kind, g.owner_kind, g.kind) AS obj_job_kind
    FROM staging.stg_native_groups g
    LEFT JOIN staging.stg_native_workloads w
      ON w.cluster = g.cluster AND w.namespace = g.namespace AND w.name = g.native_workload
    WHERE NOT g.deleted
    QUALIFY row_number() OVER (PARTITION BY g.cluster, g.uid ORDER BY w.deleted NULLS LAST) = 1
    UNION ALL BY NAME
    SELECT cluster, namespace, name AS unit, 'podgroup' AS unit_kind, system, 'gang' AS policy,
           min_member AS min_count, scheduled_reason, scheduled_message, created_at,
           name AS obj_job, 'PodGroup' AS obj_job_kind
    FROM staging.stg_pod_groups
    WHERE system IN ('coscheduling', 'volcano') AND NOT deleted
),
leaves AS (
    SELECT coalesce(o.cluster, p.cluster) AS cluster, coalesce(o.namespace, p.namespace) AS namespace,
           coalesce(p.job, o.obj_job) AS job, coalesce(p.job_kind, o.obj_job_kind) AS job_kind,
           coalesce(o.unit, p.unit) AS unit, 'podgroup' AS unit_kind, coalesce(o.system, p.system) AS system,
           o.parent, coalesce(o.policy, 'gang') AS policy,
           CASE WHEN o.policy = 'basic' THEN 1 ELSE coalesce(o.min_count, p.members) END AS needed,
           coalesce(p.members, 0) AS members, coalesce(p.members_bound, 0) AS members_bound, p.times,
           o.scheduled_at, o.scheduled_status AS group_status, o.scheduled_reason AS group_reason,
           o.scheduled_message AS group_message, coalesce(o.created_at, p.created_at) AS created_at
    FROM (SELECT * FROM objects WHERE unit_kind = 'podgroup') o
    FULL JOIN (SELECT * FROM pod_units WHERE unit_kind = 'podgroup') p
      ON p.cluster = o.cluster AND p.namespace = o.namespace AND p.unit = o.unit AND p.system = o.system
    UNION ALL BY NAME
    SELECT p.cluster, p.namespace, p.job, p.job_kind, p.unit, 'replica' AS unit_kind, 'native' AS system,
           coalesce(g.policy, 'gang') AS policy,
           CASE WHEN g.policy = 'basic' THEN 1 ELSE coalesce(g.min_count, p.members) END AS needed,
           p.members, p.members_bound, p.times, p.created_at
    FROM pod_units p
    LEFT JOIN staging.stg_native_workloads w
      ON w.cluster = p.cluster AND w.namespace = p.namespace AND w.name = p.pod_workload AND NOT w.deleted
    LEFT JOIN LATERAL (SELECT unnest(list_filter(w.groups, x -> x.name = p.native_group)[1:1]) AS g) ON true
    WHERE p.unit_kind = 'replica'
),
leaf AS (
    SELECT * EXCLUDE (times, scheduled_at),
           coalesce(CASE WHEN needed > 0 AND len(coalesce(times, [])) >= needed THEN times[needed] END,
                    scheduled_at) AS assembled_at
    FROM leaves
),
comps AS (SELECT * FROM objects WHERE unit_kind = 'composite'),
tree AS (
    -- Composites roll up from their children, level by level: iteration k is right for every composite whose
    -- subtree is at most k composites high. The 1.37 API nests at most WorkloadMaxTreeDepth = 4 levels (root
    -- first, leaf PodGroups last: 3 composite levels), so 4 iterations settle every tree the API admits.
    WITH RECURSIVE r(lvl, cluster, namespace, unit, unit_kind, parent, policy, min_count, needed, members,
                     members_bound, needed_pods, assembled_at) AS (
        SELECT 0, cluster, namespace, unit, unit_kind, parent, policy, NULL::INTEGER, needed, members,
               members_bound, needed, assembled_at
        FROM leaf WHERE parent IS NOT NULL
        UNION ALL
        SELECT 0, cluster, namespace, unit, unit_kind, parent, coalesce(policy, 'gang'), min_count, NULL::BIGINT,
               0::BIGINT, 0::BIGINT, NULL::BIGINT, NULL::TIMESTAMPTZ
        FROM comps
        UNION ALL
        SELECT any_value(u.lvl) + 1, u.cluster, u.namespace, u.unit, u.unit_kind, u.parent, u.policy, u.min_count,
               CASE WHEN u.unit_kind <> 'composite' THEN any_value(u.needed)
                    WHEN u.policy = 'basic' THEN 1 ELSE coalesce(u.min_count, count(c.unit)) END,
               CASE WHEN u.unit_kind <> 'composite' THEN any_value(u.members) ELSE count(c.unit) END,
               CASE WHEN u.unit_kind <> 'composite' THEN any_value(u.members_bound) ELSE count(c.assembled_at) END,
               -- The fewest pods that can satisfy it: a composite needs only minGroupCount children, so the
               -- sum of its smallest children's needs (not the sum over every child).
               CASE WHEN u.unit_kind <> 'composite' THEN any_value(u.needed_pods)
                    ELSE list_sum(list_sort(list(c.needed_pods) FILTER (WHERE c.needed_pods IS NOT NULL))
                         [1:CASE WHEN u.policy = 'basic' THEN 1 ELSE coalesce(u.min_count, count(c.unit)) END]) END,
               CASE WHEN u.unit_kind <> 'composite' THEN any_value(u.assembled_at)
                    WHEN count(c.unit) > 0 AND count(c.assembled_at)
                         >= CASE WHEN u.policy = 'basic' THEN 1 ELSE coalesce(u.min_count, count(c.unit)) END
                    THEN list_sort(list(c.assembled_at) FILTER (WHERE c.assembled_at IS NOT NULL))
                         [CASE WHEN u.policy = 'basic' THEN 1 ELSE coalesce(u.min_count, count(c.unit)) END] END
        FROM r u
        LEFT JOIN r c
          ON u.unit_kind = 'composite' AND c.cluster = u.cluster AND c.namespace = u.namespace AND c.parent = u.unit
        WHERE u.lvl < 4
        GROUP BY u.cluster, u.namespace, u.unit, u.unit_kind, u.parent, u.policy, u.min_count
    )
    SELECT * EXCLUDE (lvl) FROM r WHERE lvl = 4 AND unit_kind = 'composite'
),
comp AS (
    SELECT c.cluster, c.namespace, c.obj_job AS job, c.obj_job_kind AS job_kind, c.unit, 'composite' AS unit_kind,
           c.system, c.parent, coalesce(c.policy, 'gang') AS policy, t.needed, t.members, t.members_bound,
           t.needed_pods, coalesce(t.assembled_at, c.scheduled_at) AS assembled_at,
           c.scheduled_status AS group_status, c.scheduled_reason AS group_reason,
           c.scheduled_message AS group_message, c.created_at
    FROM comps c JOIN tree t USING (cluster, namespace, unit)
)
SELECT cluster, namespace, job, job_kind, unit, unit_kind, system, parent, policy, CAST(needed AS INTEGER) AS needed,
       CAST(coalesce(needed_pods, needed) AS INTEGER) AS needed_pods, CAST(members AS INTEGER) AS members,
       CAST(members_bound AS INTEGER) AS members_bound, assembled_at,
       group_status, group_reason, group_message, created_at
FROM (SELECT * FROM leaf UNION ALL BY NAME SELECT * FROM comp)
