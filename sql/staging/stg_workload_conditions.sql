-- Every Kueue Workload condition transition ever observed (not only the latest), both condition
-- styles: granular QuotaReserved reasons (WaitingForQuota, TopologyPlacementFailed, ...) and the
-- legacy Pending/Inadmissible + message.
-- column: cluster: the Workload
-- column: namespace: the Workload
-- column: workload: the Workload
-- column: type: QuotaReserved, Admitted, PodsReady, Evicted, Preempted, Requeued, Finished, ...
-- column: status: True / False / Unknown
-- column: reason: as written by Kueue
-- column: message: as written by Kueue
-- column: transition_at: lastTransitionTime (else the first observation)
-- column: observed_at: first time this transition was seen
SELECT
    k.cluster, k.namespace, k.name AS workload,
    c->>'$.type' AS type,
    c->>'$.status' AS status,
    c->>'$.reason' AS reason,
    c->>'$.message' AS message,
    coalesce(TRY_CAST(c->>'$.lastTransitionTime' AS TIMESTAMPTZ), min(k.observed_at)) AS transition_at,
    min(k.observed_at) AS observed_at
FROM staging.stg_k8s_events k, unnest(coalesce(json_extract(k.object, '$.status.conditions[*]'), []::JSON[])) AS t(c)
WHERE k.kind = 'Workload' AND k.api_version LIKE 'kueue.x-k8s.io/%' AND k.event_type IN ('ADDED', 'MODIFIED')
GROUP BY k.cluster, k.namespace, k.name, c->>'$.type', c->>'$.status', c->>'$.reason', c->>'$.message',
         c->>'$.lastTransitionTime'
