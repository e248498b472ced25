-- Kueue admission timeline per job: when its Workload was created, reserved quota and was admitted,
-- how long it waited, and why it was not admitted (both condition styles: granular QuotaReserved
-- reasons, or legacy Pending/Inadmissible with the message; Workload events carry the same texts).
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: workload: identity
-- column: cluster_queue: identity
-- column: local_queue: identity
-- column: created_at: timeline (first QuotaReserved=True / Admitted=True)
-- column: quota_reserved_at: timeline (first QuotaReserved=True / Admitted=True)
-- column: admitted_at: timeline (first QuotaReserved=True / Admitted=True)
-- column: queued_at: start of the wait judged: creation, or when a workload that had quota (seen reserved, or
--   carrying Evicted=True) lost it: its QuotaReserved=False lastTransitionTime
-- column: wait_s: seconds from creation to the first admission (to the data's as_of while still waiting); for a
--   requeued workload waiting now, from queued_at to as_of
-- column: blocked_by: quota, topology or NULL (another or no reason)
-- column: reason: the last not-admitted reason that decided blocked_by, and when it was seen
-- column: message: the last not-admitted reason that decided blocked_by, and when it was seen
-- column: reason_at: the last not-admitted reason that decided blocked_by, and when it was seen
-- column: granular: the reason is one of the granular UnadmittedWorkloadsObservability reasons
-- column: missing_level: the requested topology level that no node carries as a label (NULL if carried)
WITH j AS (
    SELECT j.*, a.as_of FROM intermediate.int_jobs j JOIN intermediate.int_as_of a USING (cluster)
    WHERE j.workload IS NOT NULL
),
cond AS (
    SELECT c.* FROM staging.stg_workload_conditions c
),
times AS (
    SELECT cluster, namespace, workload,
           min(transition_at) FILTER (WHERE type = 'QuotaReserved' AND status = 'True') AS quota_reserved_at,
           min(transition_at) FILTER (WHERE type = 'Admitted' AND status = 'True') AS admitted_at,
           max(transition_at) FILTER (WHERE type = 'QuotaReserved' AND status = 'True') AS last_reserved_at,
           max(transition_at) FILTER (WHERE type = 'QuotaReserved' AND status = 'False') AS last_unreserved_at,
           bool_or(type IN ('QuotaReserved', 'Evicted') AND status = 'True') AS had_quota
    FROM cond GROUP BY ALL
),
signals AS (
    SELECT cluster, namespace, workload, reason, message, transition_at AS seen_at FROM cond
    WHERE type = 'QuotaReserved' AND status = 'False'
    UNION ALL
    SELECT cluster, object_namespace, object_name, reason, message, first_at FROM staging.stg_events
    WHERE object_kind = 'Workload' AND type = 'Warning'
),
classified AS (
    SELECT *,
        CASE
            WHEN reason = 'TopologyPlacementFailed'
              OR regexp_matches(message, 'topology "[^"]*" (doesn''t allow to fit any of|allows to fit only) ')
                THEN 'topology'
            WHEN reason IN ('WaitingForQuota', 'ExceedsMaxQuota', 'NoMatchingFlavor')
              OR (reason IN ('Pending', 'Inadmissible') AND (message ILIKE '%insufficient%quota%'
                  OR message ILIKE '%doesn''t match node affinity%'))
                THEN 'quota'
        END AS kind,
        reason IN ('WaitingForQuota', 'ExceedsMaxQuota', 'NoMatchingFlavor', 'TopologyPlacementFailed') AS granular
    FROM signals
),
decided AS (
    SELECT cluster, namespace, workload,
           arg_max(kind, (kind = 'topology')::INT * 1e12 + epoch(seen_at)) AS blocked_by,
           arg_max(reason, (kind = 'topology')::INT * 1e12 + epoch(seen_at)) AS reason,
           arg_max(message, (kind = 'topology')::INT * 1e12 + epoch(seen_at)) AS message,
           arg_max(seen_at, (kind = 'topology')::INT * 1e12 + epoch(seen_at)) AS reason_at,
           bool_or(granular) AS granular
    FROM classified WHERE kind IS NOT NULL
    GROUP BY ALL
),
levels AS (
    SELECT DISTINCT n.cluster, k.key AS level
    FROM staging.stg_nodes n, unnest(json_keys(n.labels)) AS k(key)
)
SELECT
    j.cluster, j.namespace, j.job, j.workload, j.cluster_queue, j.local_queue,
    j.created_at, t.quota_reserved_at, t.admitted_at,
    -- Waiting now (quota released after it was reserved, e.g. evicted and requeued): since it lost its quota,
    -- from its own QuotaReserved=False lastTransitionTime, however long before the capture that was.
    CASE WHEN t.had_quota AND t.last_unreserved_at > coalesce(t.last_reserved_at, '-infinity'::TIMESTAMPTZ)
         THEN t.last_unreserved_at ELSE j.created_at END AS queued_at,
    epoch(CASE WHEN t.had_quota AND t.last_unreserved_at > coalesce(t.last_reserved_at, '-infinity'::TIMESTAMPTZ)
               THEN j.as_of - t.last_unreserved_at
               ELSE coalesce(t.admitted_at, j.as_of) - j.created_at END) AS wait_s,
    CASE WHEN d.blocked_by IS NOT NULL THEN d.blocked_by
         WHEN ml.level IS NULL AND coalesce(j.required_topology, j.preferred_topology) IS NOT NULL
          AND j.cluster IN (SELECT cluster FROM levels) THEN 'topology'
    END AS blocked_by,
    d.reason, d.message, d.reason_at, coalesce(d.granular, false) AS granular,
    CASE WHEN ml.level IS NULL AND j.cluster IN (SELECT cluster FROM levels)
         THEN coalesce(j.required_topology, j.preferred_topology) END AS missing_level
FROM j
LEFT JOIN times t USING (cluster, namespace, workload)
LEFT JOIN decided d USING (cluster, namespace, workload)
LEFT JOIN levels ml ON ml.cluster = j.cluster AND ml.level = coalesce(j.required_topology, j.preferred_topology)
