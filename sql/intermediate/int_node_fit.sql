-- How close each node comes to taking a job's unschedulable pods, judged on the pod's own constraints as
-- kube-scheduler does: spec.nodeSelector (every label equal), required node affinity (one nodeSelectorTerm whose
-- matchExpressions / matchFields all hold: In, NotIn, Exists, DoesNotExist, Gt, Lt), tolerations against the
-- node's NoSchedule / NoExecute taints, cordon and Ready, and the pod's GPUs against the node's free GPUs now.
-- A node that fails the selector or affinity can never take the pod, so it is never among the nodes that come
-- closest (marts.findings ranks the others by what they miss). Evaluated once per distinct constraint set
-- (members of a gang share theirs); one row per job, constraint set and node.
-- column: cluster: the job
-- column: namespace: the job
-- column: job: the job
-- column: pods: its unschedulable pods (not deleted, no node) that share one set of constraints
-- column: node: a live Node
-- column: gpus_needed: GPUs the pod requests
-- column: node_gpus: the node's allocatable GPUs
-- column: free_gpus: the node's free GPUs now (int_free_gpus)
-- column: selector_ok: the node matches the pod's nodeSelector and (if any) one required node affinity term
-- column: selector_misses: what of the selector the node lacks ('label K=V', 'K In [a, b]', ...); empty when it matches
-- column: untolerated_taints: the node's NoSchedule / NoExecute taints (key=value:effect) no toleration of the pod
--   tolerates
-- column: cordoned: spec.unschedulable
-- column: not_ready: condition Ready is False or Unknown
-- column: gpu_short: GPUs the node lacks for the pod (0 when it has enough free)
-- column: misses: blocking reasons besides the selector: untolerated taints, a GPU shortfall, cordoned, not Ready
WITH pods AS (
    SELECT *, md5(concat_ws('|', gpus, CAST(sel AS VARCHAR), CAST(terms AS VARCHAR), CAST(tols AS VARCHAR))) AS shape
    FROM (
        SELECT p.cluster, p.namespace, p.job, p.pod, coalesce(p.gpus, 0) AS gpus,
               coalesce(TRY_CAST(s.node_selector AS MAP(VARCHAR, VARCHAR)), MAP {}) AS sel,
               CASE WHEN json_type(s.required_node_terms) = 'ARRAY' THEN s.required_node_terms ELSE '[]'::JSON END
                   AS terms,
               CASE WHEN json_type(s.tolerations) = 'ARRAY' THEN s.tolerations ELSE '[]'::JSON END AS tols
        FROM intermediate.int_pod_jobs p
        JOIN staging.stg_pods s ON s.cluster = p.cluster AND s.namespace = p.namespace AND s.name = p.pod
                               AND s.uid IS NOT DISTINCT FROM p.pod_uid
        WHERE NOT p.deleted AND p.node IS NULL
    )
),
shapes AS (
    SELECT cluster, shape, any_value(gpus) AS gpus, any_value(sel) AS sel, any_value(terms) AS terms,
           any_value(tols) AS tols
    FROM pods GROUP BY ALL
),
nodes AS (
    SELECT f.cluster, f.node, f.gpus, f.free_gpus, coalesce(n.unschedulable, false) AS cordoned,
           coalesce(n.ready, 'True') <> 'True' AS not_ready,
           coalesce(TRY_CAST(f.labels AS MAP(VARCHAR, VARCHAR)), MAP {}) AS labels,
           [t FOR t IN coalesce(json_extract(f.taints, '$[*]'), []::JSON[])
            IF (t->>'$.effect') IN ('NoSchedule', 'NoExecute')] AS taints
    FROM intermediate.int_free_gpus f
    JOIN staging.stg_nodes n ON n.cluster = f.cluster AND n.name = f.node AND NOT n.deleted
),
exprs AS (
    -- One row per requirement of each affinity term (matchFields: metadata.name is the only field).
    SELECT s.shape, s.cluster, i AS term,
           coalesce(json_extract(json_extract(s.terms, '$[' || i || ']'), '$.matchExpressions[*]'), []::JSON[])
           || [json_merge_patch(x, '{"field": true}')
               FOR x IN coalesce(json_extract(json_extract(s.terms, '$[' || i || ']'), '$.matchFields[*]'), []::JSON[])]
               AS reqs
    FROM shapes s, range(CAST(json_array_length(s.terms) AS BIGINT)) AS r(i)
),
term_fit AS (
    SELECT e.shape, e.cluster, n.node, e.term, len(e.reqs) AS n_reqs,
           [format('{} {}', r->>'$.key', r->>'$.operator')
            || coalesce(' [' || nullif(array_to_string(
                   coalesce(CAST(json_extract_string(r, '$.values[*]') AS VARCHAR[]), []), ', '), '') || ']', '')
            FOR r IN e.reqs
            IF NOT coalesce(CASE r->>'$.operator'
                WHEN 'In' THEN list_contains(coalesce(CAST(json_extract_string(r, '$.values[*]') AS VARCHAR[]), []),
                                             CASE WHEN (r->>'$.field') = 'true' THEN n.node ELSE n.labels[r->>'$.key'] END)
                WHEN 'NotIn' THEN NOT coalesce(list_contains(
                                      coalesce(CAST(json_extract_string(r, '$.values[*]') AS VARCHAR[]), []),
                                      CASE WHEN (r->>'$.field') = 'true' THEN n.node ELSE n.labels[r->>'$.key'] END), false)
                WHEN 'Exists' THEN n.labels[r->>'$.key'] IS NOT NULL
                WHEN 'DoesNotExist' THEN n.labels[r->>'$.key'] IS NULL
                WHEN 'Gt' THEN TRY_CAST(n.labels[r->>'$.key'] AS BIGINT) > TRY_CAST(r->>'$.values[0]' AS BIGINT)
                WHEN 'Lt' THEN TRY_CAST(n.labels[r->>'$.key'] AS BIGINT) < TRY_CAST(r->>'$.values[0]' AS BIGINT)
                ELSE false END, false)] AS failed
    FROM exprs e JOIN nodes n USING (cluster)
),
affinity AS (
    -- A term with no requirements matches no node (as in kube-scheduler); the node's misses are those of the term
    -- it comes closest to.
    SELECT shape, cluster, node,
           bool_or(n_reqs > 0 AND len(failed) = 0) AS ok,
           arg_min(CASE WHEN n_reqs = 0 THEN ['an empty node affinity term'] ELSE failed END,
                   CASE WHEN n_reqs = 0 THEN 1000000 ELSE len(failed) END) AS misses
    FROM term_fit GROUP BY ALL
),
fit AS (
    SELECT s.shape, n.cluster, n.node, s.gpus AS gpus_needed, n.gpus AS node_gpus, n.free_gpus, n.cordoned, n.not_ready,
           [format('label {}={}', e.key, e.value) FOR e IN map_entries(s.sel)
            IF n.labels[e.key] IS DISTINCT FROM e.value] AS sel_misses,
           [format('{}{}:{}', t->>'$.key', coalesce('=' || (t->>'$.value'), ''), t->>'$.effect') FOR t IN n.taints
            IF NOT list_bool_or([
                coalesce(nullif(o->>'$.effect', ''), t->>'$.effect') = (t->>'$.effect')
                AND CASE WHEN (o->>'$.operator') = 'Exists'
                         THEN coalesce(nullif(o->>'$.key', ''), t->>'$.key') = (t->>'$.key')
                         ELSE (o->>'$.key') = (t->>'$.key')
                              AND coalesce(o->>'$.value', '') = coalesce(t->>'$.value', '') END
                FOR o IN coalesce(json_extract(s.tols, '$[*]'), []::JSON[])] || [false])] AS untolerated_taints
    FROM shapes s JOIN nodes n USING (cluster)
)
SELECT p.cluster, p.namespace, p.job, p.pods, f.node, f.gpus_needed, f.node_gpus, f.free_gpus,
       len(f.sel_misses) = 0 AND coalesce(a.ok, true) AS selector_ok,
       f.sel_misses || CASE WHEN coalesce(a.ok, true) THEN [] ELSE coalesce(a.misses, []) END AS selector_misses,
       f.untolerated_taints, f.cordoned, f.not_ready,
       greatest(f.gpus_needed - f.free_gpus, 0) AS gpu_short,
       len(f.untolerated_taints) + (f.gpus_needed > f.free_gpus)::INTEGER + f.cordoned::INTEGER
           + f.not_ready::INTEGER AS misses
FROM (SELECT cluster, namespace, job, shape, list(pod ORDER BY pod) AS pods FROM pods GROUP BY ALL) p
JOIN fit f ON f.shape = p.shape AND f.cluster = p.cluster
LEFT JOIN affinity a ON a.shape = p.shape AND a.cluster = p.cluster AND a.node = f.node
