-- Kueue admission timeline per job: when its Workload was created, reserved quota and was admitted, how long it
-- waited, and why it was not admitted. Every Kueue v0.19 reason maps to a cause, with the
-- UnadmittedWorkloadsObservability gate off (the v0.19 default: `Pending` from the scheduler for everything,
-- `Inadmissible` from the workload controller for queue blockers, told apart by the message) or on (granular
-- reasons); Workload Warning events carry the same strings. Queue state read from the LocalQueue / ClusterQueue
-- objects (missing LocalQueue or ClusterQueue, inactive, stopped) decides first while the Workload waits: a
-- workload in a queue that does not admit may carry no condition at all. Causes, their kind and class: see
-- docs/models.md "Admission causes".
-- column: cluster: identity
-- column: namespace: identity
-- column: job: identity
-- column: workload: identity
-- column: cluster_queue: identity
-- column: local_queue: identity
-- column: created_at: timeline (first QuotaReserved=True / Admitted=True)
-- column: quota_reserved_at: timeline (first QuotaReserved=True / Admitted=True)
-- column: admitted_at: timeline (first QuotaReserved=True / Admitted=True)
-- column: requeued: waiting now after losing quota it had (evicted or preempted, and requeued): not admitted now
-- column: queued_at: start of the wait judged: creation, or when a workload that had quota (seen reserved, or
--   carrying Evicted=True) lost it: its QuotaReserved=False lastTransitionTime, or, if later, when it came back to
--   the queue (Requeued=True lastTransitionTime: the end of a waitForPodsReady backoff, a reactivation)
-- column: wait_s: seconds from creation to the first admission (to the data's as_of while still waiting); for a
--   requeued workload waiting now, from queued_at to as_of; NULL (unknown) for one first met already evicted and
--   admitted again since: its first admission was before the capture
-- column: blocked_by: quota, topology or configuration (cause_kind of a blocking cause), else NULL
-- column: cause: quota, quota_never, waiting_preemption, waiting_pods_ready, admission_check, topology,
--   delayed_topology, topology_level_missing, no_matching_flavor, misconfigured, missing_local_queue,
--   missing_cluster_queue, queue_inactive, queue_stopped, admission_gated (blocking); pending_evaluation,
--   not_evaluated (not a problem); finished, stopped (terminal); NULL when admitted without a wait signal
-- column: cause_kind: quota, topology, configuration, none (not a problem), terminal
-- column: cause_class: the root-cause class a long wait gets (admission_quota / admission_topology; configuration
--   causes use admission_quota until a class exists, docs/models.md), NULL for not-a-problem and terminal causes
-- column: reason: the not-admitted reason that decided the cause (or the queue's Active reason), and when seen
-- column: message: the not-admitted reason that decided the cause (or the queue's Active reason), and when seen
-- column: reason_at: the not-admitted reason that decided the cause (or the queue's Active reason), and when seen
-- column: granular: the deciding reason is a granular UnadmittedWorkloadsObservability reason
-- column: gate: UnadmittedWorkloadsObservability as the reasons show it: on (granular), off (Pending /
--   Inadmissible / Waiting / UnsatisfiedChecks), NULL when no reason says
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
           count(*) FILTER (WHERE type IN ('QuotaReserved', 'Admitted')) AS admission_conditions,
           max(transition_at) FILTER (WHERE type = 'QuotaReserved' AND status = 'True') AS last_reserved_at,
           max(transition_at) FILTER (WHERE type = 'QuotaReserved' AND status = 'False') AS last_unreserved_at,
           max(transition_at) FILTER (WHERE type = 'Requeued' AND status = 'True') AS last_requeued_at,
           min(transition_at) FILTER (WHERE type IN ('Evicted', 'Preempted') AND status = 'True') AS first_evicted_at,
           bool_or(type IN ('QuotaReserved', 'Evicted') AND status = 'True') AS had_quota
    FROM cond GROUP BY ALL
),
signals AS (
    SELECT cluster, namespace, workload, type, reason, message, transition_at AS seen_at FROM cond
    WHERE (type IN ('QuotaReserved', 'Admitted') AND status = 'False')
       OR (type IN ('Finished', 'DeactivationTarget', 'BlockedOnPreemptionGates') AND status = 'True')
       OR (type = 'Evicted' AND status = 'True'
           AND (reason IN ('ClusterQueueStopped', 'LocalQueueStopped') OR reason LIKE 'Deactivated%'))
    UNION ALL
    SELECT cluster, object_namespace, object_name, 'Event', reason, message, first_at FROM staging.stg_events
    WHERE object_kind = 'Workload' AND type = 'Warning'
),
classified AS (
    SELECT *,
        CASE
            WHEN type = 'Finished' THEN 'finished'
            WHEN type = 'DeactivationTarget' OR reason LIKE 'Deactivated%' OR reason = 'OnHold' THEN 'stopped'
            WHEN type = 'Evicted' THEN 'queue_stopped'
            -- The preemption it needs is held by an external gate: the same cause whichever writer says it first
            -- (BlockedOnPreemptionGates, QuotaReserved AdmissionGated or, gate off, Pending + the same message).
            WHEN type = 'BlockedOnPreemptionGates' THEN 'admission_gated'
            WHEN type = 'Admitted' AND reason = 'PendingDelayedTopologyRequests' THEN 'delayed_topology'
            WHEN type = 'Admitted' AND reason IN ('UnsatisfiedAdmissionChecks', 'UnsatisfiedChecks',
                                                  'NoReservationUnsatisfiedChecks') THEN 'admission_check'
            WHEN type = 'Admitted' THEN NULL  -- NoReservation: the QuotaReserved condition says why
            WHEN reason = 'TopologyPlacementFailed'
              OR regexp_matches(message, 'topology "[^"]*" (doesn''t allow to fit any of|allows to fit only) ')
              OR message LIKE '%no requested topology level%' THEN 'topology'
            WHEN reason = 'WaitingForPreemptedWorkloads'
              OR regexp_matches(message, 'Pending the (preemption|migration) of \d+ workload|Preempting \d+ workload\(s\) '
                                         || 'failed|will fit after these preemptions complete') THEN 'waiting_preemption'
            WHEN reason = 'ExceedsMaxQuota' OR (message LIKE '%> maximum capacity%'
                                                AND message NOT ILIKE '%insufficient unused quota%') THEN 'quota_never'
            WHEN reason = 'WaitingForQuota' OR message ILIKE '%insufficient%quota%'
              OR message LIKE 'Workload no longer fits%' OR message LIKE '%overlapping preemption targets%'
                THEN 'quota'
            WHEN reason = 'NoMatchingFlavor'
              OR regexp_matches(message, 'doesn''t match node affinity|untolerated taint .* in flavor|flavor \S+ not found'
                                         || '|unavailable in ClusterQueue|does not provide resource'
                                         || '|(does not support|supports only) TopologyAwareScheduling'
                                         || '|does not contain the requested level') THEN 'no_matching_flavor'
            WHEN reason IN ('AdmissionGated', 'PreemptionGated') OR message LIKE 'Admission is gated by%'
              OR message LIKE '%requires preemption, but it''s gated%' THEN 'admission_gated'
            WHEN reason = 'Suspended' OR regexp_matches(message, '(LocalQueue|ClusterQueue) \S+ is inactive') THEN 'queue_inactive'
            WHEN regexp_matches(message, '(LocalQueue|ClusterQueue) \S+ is stopped|^The (LocalQueue|ClusterQueue) is stopped')
                THEN 'queue_stopped'
            WHEN reason = 'Misconfigured'
              OR regexp_matches(message, '(LocalQueue|ClusterQueue) \S+ (doesn''t exist|not found|is terminating or missing)'
                                         || '|doesn''t match ClusterQueue selector|invalid namespace selector'
                                         || '|resources validation failed|LimitRange constraints|DRA resources'
                                         || '|does not support use of resource claims') THEN 'misconfigured'
            WHEN reason IN ('WaitingForPodsReady', 'Waiting') THEN 'waiting_pods_ready'
            WHEN reason = 'PendingEvaluation' OR message LIKE 'Workload is pending evaluation%'
              OR message LIKE 'AdmissionGatedBy cleared%' OR message LIKE 'A more favorable variant%'
              OR message LIKE 'The workload has failed admission checks%'
              -- Requeued after an eviction, the jobframework writes the eviction's own message (gate off: Pending);
              -- the eviction itself is judged from the Evicted / Preempted conditions.
              OR regexp_matches(message, '^(Preempted to accommodate|Exceeded the PodsReady timeout|Evicted due to '
                                         || 'AdmissionChecks? in Retry state|Workload eviction triggered due to|Workload '
                                         || 'was evicted as there was no replacement|Evicted to accommodate a workload)')
                THEN 'pending_evaluation'
        END AS cause,
        CASE WHEN reason IN ('WaitingForQuota', 'ExceedsMaxQuota', 'NoMatchingFlavor', 'TopologyPlacementFailed',
                             'WaitingForPreemptedWorkloads', 'WaitingForPodsReady', 'PendingEvaluation', 'Misconfigured',
                             'Suspended', 'UnsatisfiedAdmissionChecks') THEN 'on'
             WHEN reason IN ('Pending', 'Inadmissible', 'Waiting', 'UnsatisfiedChecks',
                             'NoReservationUnsatisfiedChecks') THEN 'off' END AS gate
    FROM signals
),
decided AS (
    -- The newest classified signal decides, except that a topology signal ever seen beats quota (the NoFit
    -- severity order hides topology behind quota when several flavors fail) and a terminal state beats all.
    -- Signals of the same time are ordered too, so cause, reason and message come from one signal, the same at
    -- every build: the Workload's own condition after a Kueue Event of that second (the sandbox and Kueue stamp
    -- QuotaReserved=False and its "Pending" Event alike), then by type, reason and message.
    SELECT cluster, namespace, workload,
           arg_max(cause, row(epoch_us(seen_at), type <> 'Event', type, reason, message)) AS latest_cause,
           arg_max(reason, row(epoch_us(seen_at), type <> 'Event', type, reason, message)) AS latest_reason,
           arg_max(message, row(epoch_us(seen_at), type <> 'Event', type, reason, message)) AS latest_message,
           max(seen_at) AS latest_at,
           arg_max(cause, row(epoch_us(seen_at), type <> 'Event', type, reason, message))
               FILTER (WHERE cause IN ('finished', 'stopped')) AS terminal,
           arg_max(reason, row(epoch_us(seen_at), type <> 'Event', type, reason, message))
               FILTER (WHERE cause = 'topology') AS topo_reason,
           arg_max(message, row(epoch_us(seen_at), type <> 'Event', type, reason, message))
               FILTER (WHERE cause = 'topology') AS topo_message,
           max(seen_at) FILTER (WHERE cause = 'topology') AS topo_at,
           max(gate) AS gate
    FROM classified WHERE cause IS NOT NULL
    GROUP BY ALL
),
picked AS (
    SELECT cluster, namespace, workload, gate,
           CASE WHEN terminal IS NOT NULL THEN terminal
                WHEN topo_at IS NOT NULL AND latest_cause IN ('quota', 'quota_never', 'waiting_preemption')
                    THEN 'topology' ELSE latest_cause END AS cause,
           CASE WHEN terminal IS NULL AND topo_at IS NOT NULL
                 AND latest_cause IN ('quota', 'quota_never', 'waiting_preemption') THEN topo_reason ELSE latest_reason END
               AS reason,
           CASE WHEN terminal IS NULL AND topo_at IS NOT NULL
                 AND latest_cause IN ('quota', 'quota_never', 'waiting_preemption') THEN topo_message ELSE latest_message END
               AS message,
           CASE WHEN terminal IS NULL AND topo_at IS NOT NULL
                 AND latest_cause IN ('quota', 'quota_never', 'waiting_preemption') THEN topo_at ELSE latest_at END
               AS reason_at
    FROM decided
),
queues AS (
    -- The queue state now, when the cluster's queues are collected at all (else a missing queue proves nothing).
    SELECT j.cluster, j.namespace, j.job,
           CASE WHEN lq.name IS NULL OR lq.deleted THEN 'missing_local_queue'
                WHEN cq.name IS NULL OR cq.deleted THEN 'missing_cluster_queue'
                WHEN cq.stop_policy IN ('Hold', 'HoldAndDrain') OR lq.stop_policy IN ('Hold', 'HoldAndDrain')
                  OR cq.active_reason = 'Stopped' OR lq.active_reason = 'Stopped' THEN 'queue_stopped'
                WHEN cq.active_status = 'False' OR lq.active_status = 'False' THEN 'queue_inactive'
           END AS cause,
           CASE WHEN lq.name IS NULL OR lq.deleted THEN NULL
                WHEN cq.name IS NULL OR cq.deleted THEN lq.active_reason
                WHEN cq.active_status = 'False' OR cq.stop_policy IN ('Hold', 'HoldAndDrain')
                    THEN coalesce(cq.active_reason, 'stopPolicy ' || cq.stop_policy)
                ELSE coalesce(lq.active_reason, 'stopPolicy ' || lq.stop_policy) END AS reason,
           CASE WHEN lq.name IS NULL OR lq.deleted THEN format('LocalQueue {} does not exist', j.local_queue)
                WHEN cq.name IS NULL OR cq.deleted THEN format('ClusterQueue {} does not exist', lq.cluster_queue)
                WHEN cq.active_status = 'False' OR cq.stop_policy IN ('Hold', 'HoldAndDrain')
                    THEN format('ClusterQueue {}: {}', cq.name,
                                coalesce(cq.active_message, 'stopPolicy ' || cq.stop_policy))
                ELSE format('LocalQueue {}: {}', lq.name, coalesce(lq.active_message, 'stopPolicy ' || lq.stop_policy))
           END AS message
    FROM j
    LEFT JOIN staging.stg_local_queues lq
      ON lq.cluster = j.cluster AND lq.namespace = j.namespace AND lq.name = j.local_queue
    LEFT JOIN staging.stg_cluster_queues cq ON cq.cluster = j.cluster AND cq.name = lq.cluster_queue
    WHERE j.local_queue IS NOT NULL
      AND j.cluster IN (SELECT cluster FROM staging.stg_local_queues UNION SELECT cluster FROM staging.stg_cluster_queues)
),
levels AS (
    SELECT DISTINCT n.cluster, k.key AS level
    FROM staging.stg_nodes n, unnest(json_keys(n.labels)) AS k(key)
),
base AS (
    SELECT
        j.cluster, j.namespace, j.job, j.workload, j.cluster_queue, j.local_queue,
        j.created_at, t.quota_reserved_at, t.admitted_at,
        -- Waiting now (quota released after it was reserved, e.g. evicted and requeued): since it lost its quota,
        -- from its own QuotaReserved=False lastTransitionTime, however long before the capture that was; or, when
        -- Kueue held it out of the queue after that (Requeued False: the waitForPodsReady backoff after a
        -- PodsReadyTimeout eviction, a deactivation, a stopped queue), since it came back (Requeued True:
        -- BackoffFinished, Reactivated, ...Restarted): that time is the eviction's, not a wait in the queue.
        coalesce(t.had_quota AND t.last_unreserved_at > coalesce(t.last_reserved_at, '-infinity'::TIMESTAMPTZ), false)
            AS requeued,
        CASE WHEN requeued THEN greatest(t.last_unreserved_at, coalesce(t.last_requeued_at, t.last_unreserved_at))
             ELSE j.created_at END AS queued_at,
        -- First met already evicted (Evicted / Preempted True before any reservation seen): its first admission
        -- was before the capture and unseen, so how long it waited for it is unknown (NULL), not creation to the
        -- re-admission: that wait is the eviction's (a preemption "restarted later"), as when watched live.
        epoch(CASE WHEN requeued THEN j.as_of - queued_at
                   WHEN t.first_evicted_at < coalesce(t.quota_reserved_at, 'infinity'::TIMESTAMPTZ) THEN NULL
                   ELSE coalesce(t.admitted_at, j.as_of) - j.created_at END) AS wait_s,
        CASE WHEN ml.level IS NULL AND j.cluster IN (SELECT cluster FROM levels)
             THEN coalesce(j.required_topology, j.preferred_topology) END AS missing_level,
        CASE WHEN (t.admitted_at IS NULL OR requeued) AND coalesce(p.cause, '') NOT IN ('finished', 'stopped')
             THEN q.cause END AS queue_cause,
        q.reason AS queue_reason, q.message AS queue_message, j.as_of,
        p.cause AS signal_cause, p.reason, p.message, p.reason_at, p.gate,
        coalesce(t.admission_conditions, 0) AS admission_conditions
    FROM j
    LEFT JOIN times t USING (cluster, namespace, workload)
    LEFT JOIN picked p USING (cluster, namespace, workload)
    LEFT JOIN queues q USING (cluster, namespace, job)
    LEFT JOIN levels ml ON ml.cluster = j.cluster AND ml.level = coalesce(j.required_topology, j.preferred_topology)
),
caused AS (
    SELECT *,
           CASE WHEN queue_cause IS NOT NULL THEN queue_cause
                WHEN signal_cause IS NOT NULL THEN signal_cause
                WHEN missing_level IS NOT NULL THEN 'topology_level_missing'
                WHEN admitted_at IS NULL AND admission_conditions = 0 THEN 'not_evaluated'
           END AS cause
    FROM base
)
SELECT
    cluster, namespace, job, workload, cluster_queue, local_queue, created_at, quota_reserved_at, admitted_at,
    requeued, queued_at, wait_s,
    CASE WHEN cause IN ('quota', 'quota_never', 'waiting_preemption', 'waiting_pods_ready', 'admission_check') THEN 'quota'
         WHEN cause IN ('topology', 'delayed_topology', 'topology_level_missing') THEN 'topology'
         WHEN cause IN ('no_matching_flavor', 'misconfigured', 'missing_local_queue', 'missing_cluster_queue',
                        'queue_inactive', 'queue_stopped', 'admission_gated') THEN 'configuration' END AS blocked_by,
    cause,
    CASE WHEN cause IN ('quota', 'quota_never', 'waiting_preemption', 'waiting_pods_ready', 'admission_check') THEN 'quota'
         WHEN cause IN ('topology', 'delayed_topology', 'topology_level_missing') THEN 'topology'
         WHEN cause IN ('pending_evaluation', 'not_evaluated') THEN 'none'
         WHEN cause IN ('finished', 'stopped') THEN 'terminal'
         WHEN cause IS NOT NULL THEN 'configuration' END AS cause_kind,
    CASE WHEN cause IN ('topology', 'delayed_topology', 'topology_level_missing') THEN 'admission_topology'
         WHEN cause IN ('pending_evaluation', 'not_evaluated', 'finished', 'stopped') OR cause IS NULL THEN NULL
         ELSE 'admission_quota' END AS cause_class,
    CASE WHEN queue_cause IS NOT NULL THEN queue_reason ELSE reason END AS reason,
    CASE WHEN queue_cause IS NOT NULL THEN queue_message ELSE message END AS message,
    CASE WHEN queue_cause IS NOT NULL THEN as_of ELSE reason_at END AS reason_at,
    CASE WHEN queue_cause IS NOT NULL THEN false
         ELSE coalesce(reason IN ('WaitingForQuota', 'ExceedsMaxQuota', 'NoMatchingFlavor', 'TopologyPlacementFailed',
                                  'WaitingForPreemptedWorkloads', 'WaitingForPodsReady', 'Misconfigured', 'Suspended',
                                  'UnsatisfiedAdmissionChecks', 'PendingDelayedTopologyRequests', 'PendingEvaluation'),
                       false) END AS granular,
    gate,
    missing_level
FROM caused
