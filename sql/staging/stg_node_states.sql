-- Node states over time: one row per Node and distinct state gangscope saw (Ready, cordon, the node lifecycle
-- controller's taints, allocatable GPUs, health conditions of node problem detectors), with the node's own times:
-- the Ready condition's lastTransitionTime, the taints' timeAdded. What node losses, drains and GPUs marked
-- unhealthy are read from (intermediate.int_node_loss); staging.stg_nodes keeps only the current state.
-- column: cluster: the Node
-- column: node: the Node
-- column: ready: condition Ready status (True, False, Unknown; NULL if not posted)
-- column: ready_reason: its reason (KubeletReady, KubeletNotReady, NodeStatusUnknown, NodeStatusNeverUpdated)
-- column: ready_message: its message (e.g. "Kubelet stopped posting node status.", "container runtime is down")
-- column: ready_changed_at: its lastTransitionTime
-- column: unschedulable: spec.unschedulable (cordoned)
-- column: cordoned_at: timeAdded of the node.kubernetes.io/unschedulable taint
-- column: not_ready_taint_at: timeAdded of the node.kubernetes.io/not-ready or unreachable taint (earliest effect)
-- column: not_ready_taint: which of the two (not-ready: Ready False; unreachable: Ready Unknown)
-- column: gpus_allocatable: status.allocatable nvidia.com/gpu (healthy devices; the device plugin drops unhealthy)
-- column: gpus_capacity: status.capacity nvidia.com/gpu (healthy + unhealthy)
-- column: health_conditions: conditions other than the kubelet's (Ready, MemoryPressure, DiskPressure, PIDPressure,
--   NetworkUnavailable) that are True, e.g. NVSentinel's SysLogsXIDError: JSON list of {type, reason, message, at}
-- column: deleted: this state is the Node's deletion
-- column: first_seen_at: first and last observation of this state
-- column: last_seen_at: first and last observation of this state
WITH ev AS (
    SELECT cluster, name AS node, observed_at, event_type, object,
           coalesce(json_extract(object, '$.status.conditions[*]'), []::JSON[]) AS conds,
           coalesce(json_extract(object, '$.spec.taints[*]'), []::JSON[]) AS taints
    FROM staging.stg_k8s_events
    WHERE kind = 'Node' AND event_type IN ('ADDED', 'MODIFIED', 'DELETED')
),
states AS (
    SELECT cluster, node, observed_at,
           [c FOR c IN conds IF (c->>'$.type') = 'Ready'][1] AS rc,
           coalesce(TRY_CAST(object->>'$.spec.unschedulable' AS BOOLEAN), false) AS unschedulable,
           list_min([TRY_CAST(t->>'$.timeAdded' AS TIMESTAMPTZ) FOR t IN taints
                     IF (t->>'$.key') = 'node.kubernetes.io/unschedulable']) AS cordoned_at,
           list_min([TRY_CAST(t->>'$.timeAdded' AS TIMESTAMPTZ) FOR t IN taints
                     IF (t->>'$.key') IN ('node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable')])
               AS not_ready_taint_at,
           [replace(t->>'$.key', 'node.kubernetes.io/', '') FOR t IN taints
            IF (t->>'$.key') IN ('node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable')][1] AS not_ready_taint,
           TRY_CAST(object->>'$.status.allocatable."nvidia.com/gpu"' AS INTEGER) AS gpus_allocatable,
           TRY_CAST(object->>'$.status.capacity."nvidia.com/gpu"' AS INTEGER) AS gpus_capacity,
           to_json([{'type': c->>'$.type', 'reason': c->>'$.reason', 'message': c->>'$.message',
                     'at': TRY_CAST(c->>'$.lastTransitionTime' AS TIMESTAMPTZ)}
                    FOR c IN conds
                    IF (c->>'$.status') = 'True'
                       AND (c->>'$.type') NOT IN ('Ready', 'MemoryPressure', 'DiskPressure', 'PIDPressure',
                                                  'NetworkUnavailable')]) AS health_conditions,
           event_type = 'DELETED' AS deleted
    FROM ev
)
SELECT cluster, node,
       rc->>'$.status' AS ready, rc->>'$.reason' AS ready_reason, rc->>'$.message' AS ready_message,
       TRY_CAST(rc->>'$.lastTransitionTime' AS TIMESTAMPTZ) AS ready_changed_at,
       unschedulable, cordoned_at, not_ready_taint_at, not_ready_taint, gpus_allocatable, gpus_capacity,
       health_conditions, deleted,
       min(observed_at) AS first_seen_at, max(observed_at) AS last_seen_at
FROM states
GROUP BY ALL
