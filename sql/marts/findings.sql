-- Root-cause findings: one row per job and incident, exactly the fields of `gangscope diagnose --format json`
-- (CONTRACT section 4). Jobs with no incident get one `healthy` row (shown only with --all). A job's primary
-- finding is its row whose class comes first in the precedence list (marts.jobs.root_cause).
-- column: cluster: cluster name
-- column: namespace: job namespace
-- column: job: job name (top-level owner, CONTRACT section 2)
-- column: job_kind: kind of that owner (Job, JobSet, PyTorchJob, PodGroup, ...)
-- column: workload: Kueue Workload name, NULL without Kueue
-- column: pod_group: gang object name, NULL without a gang
-- column: root_cause: gpu_fault, node_failure, interconnect_degradation, gpu_throttle, preemption, admission_quota,
--   admission_topology, gang_assembly, startup_failure, workload_crash, topology_misplacement, training_stalled,
--   unexplained_slowdown, healthy (gangscope/rootcauses.py, variable root_causes)
-- column: severity: critical, warning, info
-- column: started_at: first sample or event at which the condition holds
-- column: ended_at: when it stopped holding (NULL while ongoing)
-- column: confidence: 0..1
-- column: nodes: nodes involved (VARCHAR[])
-- column: evidence: JSON object with the values that crossed the thresholds, and their times
-- column: summary: one sentence
WITH j AS (SELECT * FROM intermediate.int_jobs),
pj AS (SELECT * FROM intermediate.int_pod_jobs),
gpu AS (
    SELECT j.cluster, j.namespace, j.job, f.node, f.gpu, f.kind, f.code, f.started_at, f.last_at, f.samples, d.uuid
    FROM intermediate.int_gpu_faults f
    JOIN j ON j.cluster = f.cluster
    LEFT JOIN staging.stg_gpu_devices d ON d.cluster = f.cluster AND d.node = f.node AND d.gpu = f.gpu
    WHERE (f.pod IS NOT NULL AND EXISTS (SELECT 1 FROM pj WHERE pj.cluster = f.cluster AND pj.namespace = f.namespace
                                                          AND pj.pod = f.pod AND pj.job = j.job AND pj.namespace = j.namespace
                                                          AND f.started_at >= pj.created_at - INTERVAL 1 MINUTE))
       OR (f.pod IS NULL AND list_contains(j.nodes, f.node)
           AND f.started_at >= coalesce(j.run_started_at, j.first_seen) - INTERVAL 1 MINUTE)
),
gpu_f AS (
    SELECT cluster, namespace, job, 'gpu_fault' AS root_cause, 'critical' AS severity,
           min(started_at) AS started_at, NULL::TIMESTAMPTZ AS ended_at,
           CASE WHEN bool_or(kind <> 'gpu_missing') THEN 0.95 ELSE 0.8 END AS confidence,
           list_sort(list(DISTINCT node)) AS nodes,
           to_json({'faults': list({'node': node, 'gpu': gpu, 'kind': kind, 'xid': code, 'first_at': started_at,
                                    'last_at': last_at, 'samples': samples, 'uuid': uuid}
                                   ORDER BY started_at, node, gpu, kind)}) AS evidence,
           format('GPU {} on {} reported {} from {}', arg_min(gpu, started_at), arg_min(node, started_at),
                  CASE arg_min(kind, started_at) WHEN 'xid' THEN 'hardware XID ' || arg_min(code, started_at)
                       WHEN 'ecc_dbe' THEN 'double-bit ECC errors' ELSE 'nothing (its series stopped)' END,
                  strftime(min(started_at), '%Y-%m-%dT%H:%M:%SZ')) AS summary
    FROM gpu GROUP BY cluster, namespace, job
),
gpu_nodes AS (
    -- The GPUs the job's gpu_fault names, per node.
    SELECT cluster, namespace, job, node, count(DISTINCT gpu) AS gpus, min(started_at) AS first_at
    FROM gpu GROUP BY ALL
),
node_loss AS (
    -- One incident, one finding: GPUs marked unhealthy (allocatable drop) on a node where the job's gpu_fault names
    -- at least as many GPUs, named before the GPUs came back, are that fault's (the device plugin reacting to the
    -- XID), not a lost node. Any other loss of that node, or of another node, stays.
    SELECT n.* FROM intermediate.int_node_loss n
    WHERE NOT (n.how = 'gpus_unhealthy'
               AND EXISTS (SELECT 1 FROM gpu_nodes g
                           WHERE g.cluster = n.cluster AND g.namespace = n.namespace AND g.job = n.job
                             AND g.node = n.node AND g.gpus >= n.gpus_capacity - n.gpus_allocatable
                             AND g.first_at <= coalesce(n.recovered_at, 'infinity'::TIMESTAMPTZ)))
),
node_f AS (
    -- A node that stopped serving the job's pods (node_loss). Ends when the job runs again with
    -- every member after the loss (back on the node, or elsewhere), or when every lost node is back and the job runs.
    SELECT n.cluster, n.namespace, n.job, 'node_failure' AS root_cause, 'critical' AS severity,
           min(n.lost_at) AS started_at,
           CASE WHEN any_value(j.all_running_at) > max(n.lost_at) THEN any_value(j.all_running_at)
                WHEN bool_and(n.recovered_at IS NOT NULL) AND any_value(j.state) = 'running' THEN max(n.recovered_at)
           END AS ended_at,
           CASE WHEN bool_or(n.how IN ('not_ready', 'node_ended', 'gpus_unhealthy', 'kueue')
                             OR (n.how = 'drain' AND n.cordoned)) THEN 0.95 ELSE 0.8 END AS confidence,
           list_sort(list(DISTINCT n.node) FILTER (WHERE n.node IS NOT NULL)) AS nodes,
           to_json({'losses': list({'node': n.node, 'how': n.how, 'lost_at': n.lost_at, 'recovered_at': n.recovered_at,
                                    'ready': n.ready, 'reason': n.reason, 'message': n.message, 'cordoned': n.cordoned,
                                    'gpus_allocatable': n.gpus_allocatable, 'gpus_capacity': n.gpus_capacity,
                                    'gpus_held': n.gpus_held, 'health_conditions': n.health_conditions,
                                    'pods': n.pods} ORDER BY n.lost_at, n.node),
                    'node_lost_threshold_s': getvariable('node_lost_s')}) AS evidence,
           CASE arg_min(n.how, n.lost_at)
               WHEN 'not_ready' THEN format('Node {} went {} at {} ({}: {}) under {} of the job''s pods{}',
                    arg_min(n.node, n.lost_at), CASE arg_min(n.ready, n.lost_at) WHEN 'Unknown' THEN 'unreachable'
                                                     ELSE 'NotReady' END,
                    strftime(min(n.lost_at), '%Y-%m-%dT%H:%M:%SZ'), arg_min(n.reason, n.lost_at),
                    arg_min(n.message, n.lost_at), json_array_length(arg_min(n.pods, n.lost_at)),
                    CASE WHEN list_contains(json_extract_string(arg_min(n.pods, n.lost_at), '$[*].reason'),
                                            'DeletionByTaintManager')
                         THEN '; the taint manager deleted them' ELSE '' END)
               WHEN 'drain' THEN format('Node {} was {}: {} of the job''s pods evicted through the Eviction API at {}',
                    arg_min(n.node, n.lost_at), CASE WHEN arg_min(n.cordoned, n.lost_at) THEN 'drained (cordoned)'
                                                     ELSE 'evicting pods' END,
                    json_array_length(arg_min(n.pods, n.lost_at)), strftime(min(n.lost_at), '%Y-%m-%dT%H:%M:%SZ'))
               WHEN 'node_ended' THEN format('Node {} ended {} of the job''s pods at {} ({}{})', arg_min(n.node, n.lost_at),
                    json_array_length(arg_min(n.pods, n.lost_at)), strftime(min(n.lost_at), '%Y-%m-%dT%H:%M:%SZ'),
                    arg_min(n.reason, n.lost_at), coalesce(': ' || left(arg_min(n.message, n.lost_at), 160), ''))
               WHEN 'gpus_unhealthy' THEN format('Node {} has {} of {} GPUs allocatable since {} (GPUs marked unhealthy) '
                    'while the job holds {} there', arg_min(n.node, n.lost_at), arg_min(n.gpus_allocatable, n.lost_at),
                    arg_min(n.gpus_capacity, n.lost_at), strftime(min(n.lost_at), '%Y-%m-%dT%H:%M:%SZ'),
                    arg_min(n.gpus_held, n.lost_at))
               ELSE format('Kueue evicted the Workload at {} ({}: {})', strftime(min(n.lost_at), '%Y-%m-%dT%H:%M:%SZ'),
                           arg_min(n.reason, n.lost_at), arg_min(n.message, n.lost_at))
           END AS summary
    FROM node_loss n JOIN j USING (cluster, namespace, job)
    GROUP BY n.cluster, n.namespace, n.job
),
dips AS (
    SELECT d.*, i.bandwidth_drops, i.link_errors, i.ports_down, i.signal_nodes, i.first_signal_at,
           coalesce(p.misplaced, false) AS misplaced, p.level, p.domains, p.needed_domains, p.domain_values,
           p.assigned_domains, CASE WHEN j.required_topology IS NOT NULL THEN 'required'
                                    WHEN j.preferred_topology IS NOT NULL THEN 'preferred' ELSE 'none' END AS requested_as,
           j.nodes, j.all_running_at
    FROM intermediate.int_throughput_dips d
    JOIN intermediate.int_interconnect i ON i.cluster = d.cluster AND i.namespace = d.namespace AND i.job = d.job
     AND i.dip_started_at = d.started_at
    JOIN j ON j.cluster = d.cluster AND j.namespace = d.namespace AND j.job = d.job
    LEFT JOIN intermediate.int_placement p ON p.cluster = d.cluster AND p.namespace = d.namespace AND p.job = d.job
),
dip_ev AS (
    SELECT *,
           {'throughput': {'baseline': round(baseline, 3), 'min_ratio': round(min_ratio, 3),
                           'mean_ratio': round(mean_ratio, 3), 'low_samples': samples,
                           'first_low_at': started_at, 'held_at': held_at, 'last_low_at': last_dip_at,
                           'threshold_ratio': getvariable('throughput_ratio')}} AS tp
    FROM dips
),
ic_f AS (
    SELECT cluster, namespace, job, 'interconnect_degradation' AS root_cause, 'critical' AS severity,
           started_at, ended_at,
           CASE WHEN len(signal_nodes) > 0 AND json_array_length(bandwidth_drops) > 0
                 AND (json_array_length(link_errors) > 0 OR json_array_length(ports_down) > 0) THEN 0.95 ELSE 0.85 END
               AS confidence,
           signal_nodes AS nodes,
           to_json({'throughput': tp.throughput, 'bandwidth_drops': bandwidth_drops, 'link_errors': link_errors,
                    'ports_down': ports_down, 'bandwidth_threshold_ratio': getvariable('bandwidth_ratio')}) AS evidence,
           format('Throughput fell to {}% of baseline while interconnect on {} degraded ({})',
                  TRY_CAST(round(100 * min_ratio) AS INTEGER), array_to_string(signal_nodes, ', '),
                  array_to_string(list_filter(['bandwidth drop' || CASE WHEN json_array_length(bandwidth_drops) > 0 THEN '' END,
                                               'link errors' || CASE WHEN json_array_length(link_errors) > 0 THEN '' END,
                                               'IB port down' || CASE WHEN json_array_length(ports_down) > 0 THEN '' END],
                                              x -> x IS NOT NULL), ', ')) AS summary
    FROM dip_ev WHERE len(signal_nodes) > 0 AND NOT misplaced
),
thr_f AS (
    -- A dip without an interconnect signal, with a throttled GPU (intermediate.int_gpu_throttle).
    SELECT d.cluster, d.namespace, d.job, 'gpu_throttle' AS root_cause, 'warning' AS severity,
           d.started_at, d.ended_at,
           CASE WHEN list_bool_or([len(x.reasons) > 0 OR coalesce(x.thermal_throttle, 0) > 0
                                   FOR x IN t.gpus]) THEN 0.9 ELSE 0.8 END AS confidence,
           t.nodes,
           to_json({'throughput': d.tp.throughput, 'throttled_gpus': t.throttled_gpus,
                    'clock_threshold_ratio': getvariable('throttle_clock_ratio')}) AS evidence,
           format('Throughput fell to {}% of baseline while GPU {} on {} ran at {} MHz against its peers'' {} MHz{}{}',
                  TRY_CAST(round(100 * d.min_ratio) AS INTEGER), t.gpus[1].gpu, t.gpus[1].node,
                  TRY_CAST(t.gpus[1].sm_clock AS BIGINT), TRY_CAST(t.gpus[1].peers_clock AS BIGINT),
                  CASE WHEN t.gpus[1].gpu_temp IS NOT NULL
                       THEN format(' at {} C', TRY_CAST(t.gpus[1].gpu_temp AS BIGINT)) ELSE '' END,
                  CASE WHEN len(t.gpus[1].reasons) > 0 THEN ' (' || array_to_string(t.gpus[1].reasons, ', ') || ')'
                       ELSE '' END) AS summary
    FROM dip_ev d
    JOIN (SELECT *, from_json(throttled_gpus, '[{"node": "VARCHAR", "gpu": "VARCHAR", "sm_clock": "DOUBLE",
                                                "peers_clock": "DOUBLE", "gpu_temp": "DOUBLE", "reasons": ["VARCHAR"],
                                                "thermal_throttle": "DOUBLE"}]') AS gpus
          FROM intermediate.int_gpu_throttle) t
      ON t.cluster = d.cluster AND t.namespace = d.namespace AND t.job = d.job AND t.dip_started_at = d.started_at
    WHERE len(d.signal_nodes) = 0
),
ev AS (
    SELECT e.*, w.namespace AS preemptor_namespace, w.name AS preemptor_workload,
           coalesce(w.owner_name, w.name) AS preemptor_job, nullif(regexp_extract(e.message, ' due to ([^;]+)', 1), '') AS cause
    FROM intermediate.int_evictions e
    LEFT JOIN staging.stg_workloads w
      ON w.cluster = e.cluster AND w.uid = nullif(regexp_extract(e.message, '\(UID: ([^,)\s]+)', 1), '')
),
pre_f AS (
    SELECT ev.cluster, ev.namespace, ev.job, 'preemption' AS root_cause, 'warning' AS severity,
           min(ev.event_at) AS started_at,
           CASE WHEN any_value(j.all_running_at) > min(ev.event_at) THEN any_value(j.all_running_at) END AS ended_at,
           CASE WHEN bool_or(ev.source = 'workload_condition') THEN 0.95 ELSE 0.85 END AS confidence,
           any_value(j.nodes) AS nodes,
           to_json({'evictions': list({'at': ev.event_at, 'source': ev.source, 'reason': ev.reason, 'message': ev.message}
                                      ORDER BY ev.event_at),
                    'preemptor': CASE WHEN count(ev.preemptor_workload) > 0 THEN
                        {'namespace': arg_min(ev.preemptor_namespace, ev.event_at) FILTER (WHERE ev.preemptor_workload IS NOT NULL),
                         'workload': arg_min(ev.preemptor_workload, ev.event_at) FILTER (WHERE ev.preemptor_workload IS NOT NULL),
                         'job': arg_min(ev.preemptor_job, ev.event_at) FILTER (WHERE ev.preemptor_workload IS NOT NULL)} END,
                    'cause': arg_min(ev.cause, ev.event_at) FILTER (WHERE ev.cause IS NOT NULL),
                    'cluster_queue': any_value(j.cluster_queue)}) AS evidence,
           format('Preempted at {} ({}){}', strftime(min(ev.event_at), '%Y-%m-%dT%H:%M:%SZ'), arg_min(ev.reason, ev.event_at),
                  CASE WHEN any_value(j.all_running_at) > min(ev.event_at) THEN ', restarted later' ELSE ', not running again yet' END)
               AS summary
    FROM ev JOIN j USING (cluster, namespace, job)
    GROUP BY ev.cluster, ev.namespace, ev.job
),
requeue_causes AS (
    -- Evictions whose requeue wait is their own incident's, open until the job runs again: a preemption (pre_f) and
    -- Kueue's eviction for a lost node (Evicted NodeFailures, node_f; Kueue copies it to Requeued True).
    SELECT cluster, namespace, job, event_at FROM intermediate.int_evictions
    UNION ALL
    SELECT j.cluster, j.namespace, j.job, c.transition_at
    FROM staging.stg_workload_conditions c
    JOIN j ON j.cluster = c.cluster AND j.namespace = c.namespace AND j.workload = c.workload
    WHERE c.type = 'Evicted' AND c.status = 'True' AND c.reason = 'NodeFailures'
),
adm AS (
    SELECT a.*, j.nodes, coalesce(a.missing_level, j.required_topology, j.preferred_topology) AS level,
           nullif(regexp_extract(a.message, 'quota for (\S+) in flavor ([^,\s]+)', 1), '') AS q_resource,
           nullif(regexp_extract(a.message, 'quota for (\S+) in flavor ([^,\s]+)', 2), '') AS q_flavor,
           coalesce(TRY_CAST(regexp_extract(a.message, '(\d+) more needed', 1) AS DOUBLE),
                    TRY_CAST(regexp_extract(a.message, 'podsets requests \((\d+)\)', 1) AS DOUBLE)
                    + TRY_CAST(regexp_extract(a.message, 'podset request \((\d+)\) > maximum capacity', 1) AS DOUBLE)
                    - TRY_CAST(regexp_extract(a.message, 'maximum capacity \((\d+)\)', 1) AS DOUBLE)) AS q_short,
           CASE WHEN a.message ILIKE '%doesn''t allow to fit any of%' THEN 0
                ELSE TRY_CAST(regexp_extract(a.message, 'allows to fit only (\d+) out of', 1) AS INTEGER) END AS fit_pods,
           TRY_CAST(coalesce(nullif(regexp_extract(a.message, 'out of (\d+) pod', 1), ''),
                             nullif(regexp_extract(a.message, 'fit any of (\d+) pod', 1), '')) AS INTEGER) AS want_pods
    FROM intermediate.int_admission a JOIN j USING (cluster, namespace, job)
    WHERE a.cause_class IS NOT NULL AND a.wait_s > getvariable('admission_wait_s')
      -- Waiting for quota again because it was preempted or evicted for a lost node (no reservation since): that
      -- incident's, one finding (pre_f / node_f, open until the job runs again), not a second one.
      AND NOT (a.requeued AND EXISTS (
          SELECT 1 FROM requeue_causes e
          WHERE e.cluster = a.cluster AND e.namespace = a.namespace AND e.job = a.job AND e.event_at <= a.queued_at
            AND NOT EXISTS (SELECT 1 FROM staging.stg_workload_conditions c
                            WHERE c.cluster = a.cluster AND c.namespace = a.namespace AND c.workload = a.workload
                              AND c.type = 'QuotaReserved' AND c.status = 'True'
                              AND c.transition_at > e.event_at AND c.transition_at < a.queued_at)))
),
adm_pods AS (
    SELECT a.cluster, a.namespace, a.job, w.gpus / nullif(w.pod_count, 0) AS gpus_per_pod
    FROM adm a JOIN staging.stg_workloads w ON w.cluster = a.cluster AND w.namespace = a.namespace AND w.name = a.workload
),
adm_quota AS (
    SELECT a.cluster, a.namespace, a.job, c.cohort, c.nominal_quota, c.borrowing_limit, c.used,
           (SELECT sum(greatest(o.nominal_quota - coalesce(o.used, 0), 0)) FROM staging.stg_cluster_queue_quotas o
            WHERE o.cluster = c.cluster AND o.cohort = c.cohort AND o.cluster_queue <> c.cluster_queue
              AND o.flavor = c.flavor AND o.resource = c.resource) AS cohort_unused
    FROM adm a
    JOIN staging.stg_cluster_queue_quotas c ON c.cluster = a.cluster AND c.cluster_queue = a.cluster_queue
     AND c.flavor = a.q_flavor AND c.resource = a.q_resource
),
adm_domains AS (
    SELECT cluster, namespace, job, domain, sum(free_gpus) AS free_gpus, max(free_gpus) AS node_free_gpus,
           max(gpus) AS node_gpus
    FROM (SELECT a.cluster, a.namespace, a.job, f.free_gpus, f.gpus,
                 json_extract_string(f.labels, '$."' || a.level || '"') AS domain
          FROM adm a JOIN intermediate.int_free_gpus f ON f.cluster = a.cluster AND f.schedulable
          WHERE a.blocked_by = 'topology' AND a.level IS NOT NULL)
    WHERE domain IS NOT NULL
    GROUP BY ALL
),
adm_free AS (
    -- Ties (several domains with nothing free) break by name: the same data names the same domain.
    SELECT cluster, namespace, job,
           first(domain ORDER BY free_gpus DESC NULLS LAST, node_free_gpus DESC NULLS LAST, domain) AS domain,
           max(free_gpus) AS free_gpus,
           first(node_free_gpus ORDER BY free_gpus DESC NULLS LAST, node_free_gpus DESC NULLS LAST, domain)
               AS node_free_gpus, max(node_gpus) AS node_gpus
    FROM adm_domains GROUP BY ALL
),
adm_f AS (
    SELECT a.cluster, a.namespace, a.job, a.cause_class AS root_cause,
           'warning' AS severity,
           a.queued_at + to_seconds(getvariable('admission_wait_s')) AS started_at,
           CASE WHEN a.admitted_at > a.queued_at THEN a.admitted_at END AS ended_at,
           CASE WHEN a.granular OR a.missing_level IS NOT NULL THEN 0.95 ELSE 0.85 END AS confidence,
           a.nodes,
           to_json({'wait_s': round(a.wait_s), 'threshold_s': getvariable('admission_wait_s'), 'created_at': a.created_at,
                    'queued_at': a.queued_at,
                    'admitted_at': a.admitted_at, 'reason': a.reason, 'message': a.message, 'reason_at': a.reason_at,
                    'cluster_queue': a.cluster_queue, 'local_queue': a.local_queue,
                    'missing_level': a.missing_level, 'cause': a.cause, 'cause_kind': a.cause_kind,
                    'unadmitted_observability_gate': a.gate,
                    -- docs/models.md proposes a class for configuration causes; until then admission_quota.
                    'proposed_class': CASE WHEN a.cause_kind = 'configuration' THEN 'admission_config'
                                           ELSE a.cause_class END,
                    'quota': CASE WHEN a.blocked_by = 'quota' THEN
                        {'resource': a.q_resource, 'flavor': a.q_flavor, 'short': a.q_short, 'cohort': q.cohort,
                         'nominal_quota': q.nominal_quota, 'borrowing_limit': q.borrowing_limit, 'used': q.used,
                         'cohort_unused': q.cohort_unused} END,
                    'topology': CASE WHEN a.blocked_by = 'topology' THEN
                        {'level': a.level, 'fit_pods': a.fit_pods, 'want_pods': a.want_pods,
                         'largest_free_domain': fr.domain, 'largest_free_gpus': fr.free_gpus,
                         'largest_free_node_gpus': fr.node_free_gpus, 'largest_node_gpus': fr.node_gpus,
                         'gpus_per_pod': ap.gpus_per_pod} END}) AS evidence,
           format('Not admitted for {} min{} ({}{}): {}', TRY_CAST(round(a.wait_s / 60) AS INTEGER),
                  CASE WHEN a.admitted_at > a.queued_at THEN '' ELSE ' and counting' END, replace(a.cause, '_', ' '),
                  CASE WHEN a.cause_kind = 'configuration' THEN ', configuration' ELSE '' END,
                  coalesce(coalesce(a.reason || ' - ', '') || a.message,
                           'topology level ' || a.missing_level || ' is carried by no node')) AS summary
    FROM adm a
    LEFT JOIN adm_quota q USING (cluster, namespace, job)
    LEFT JOIN adm_free fr USING (cluster, namespace, job)
    LEFT JOIN adm_pods ap USING (cluster, namespace, job)
),
gang_pods AS (
    -- Members without a node.
    SELECT p.cluster, p.namespace, p.job,
           list({'pod': p.pod, 'gpus': p.gpus, 'message': p.unscheduled_message, 'gates': p.scheduling_gates}
                ORDER BY p.pod) AS pods
    FROM intermediate.int_pod_jobs p
    WHERE NOT p.deleted AND p.node IS NULL
    GROUP BY ALL
),
gang_closest AS (
    -- The nodes that come closest to taking the job's unschedulable members (int_node_fit): only nodes that match
    -- the pods' node selector and required affinity, fewest blocking reasons first, then the smallest GPU shortfall,
    -- the most free GPUs; each with what it lacks. Nodes failing the selector are kept apart, with what they lack.
    SELECT cluster, namespace, job,
           (list({'node': node, 'gpus': node_gpus, 'free_gpus': free_gpus, 'gpus_needed': gpus_needed,
                 'untolerated_taints': untolerated_taints, 'cordoned': cordoned, 'not_ready': not_ready}
                ORDER BY misses, gpu_short, free_gpus DESC, node) FILTER (WHERE selector_ok))[1:3] AS nodes,
           count(*) FILTER (WHERE selector_ok) AS matching,
           (list({'node': node, 'missing': selector_misses} ORDER BY len(selector_misses), node)
               FILTER (WHERE NOT selector_ok))[1:3] AS failing
    FROM (
        SELECT * FROM intermediate.int_node_fit
        QUALIFY row_number() OVER (PARTITION BY cluster, namespace, job, node
                                   ORDER BY NOT selector_ok, misses, gpu_short, pods[1]) = 1
    )
    GROUP BY ALL
),
stuck_units AS (
    -- Gang units of a job not assembled (a composite's children, each 1.35 replica): which gang is short.
    SELECT cluster, namespace, job,
           list({'unit': unit, 'kind': unit_kind, 'parent': parent, 'needed': needed, 'members': members,
                 'members_bound': members_bound, 'group_reason': group_reason, 'group_message': group_message}
                ORDER BY parent NULLS FIRST, unit) AS units
    FROM intermediate.int_gang_units
    WHERE assembled_at IS NULL AND policy = 'gang'
    GROUP BY ALL
),
gang_f AS (
    SELECT g.cluster, g.namespace, g.job, 'gang_assembly' AS root_cause,
           CASE WHEN g.idle_gpus > 0 THEN 'critical' ELSE 'warning' END AS severity,
           g.assembly_started_at + to_seconds(g.timeout_s) AS started_at,
           g.assembled_at AS ended_at,
           CASE WHEN g.failed_reasons IS NOT NULL OR g.phase IS NOT NULL THEN 0.9 ELSE 0.75 END AS confidence,
           j.nodes,
           to_json({'gang_size': g.gang_size, 'pods': g.pods, 'pods_bound': g.pods_bound,
                    'pods_running': g.pods_running, 'assembly_started_at': g.assembly_started_at,
                    'assembled_at': g.assembled_at, 'assembly_s': round(g.assembly_s), 'start_up_s': round(g.start_up_s),
                    'timeout_s': g.timeout_s, 'pod_group_phase': g.phase, 'pod_group_message': g.group_message,
                    'failed_scheduling': g.failed_reasons, 'first_failed_at': g.first_failed_at,
                    'idle_gpus': g.idle_gpus, 'gangs_not_assembled': su.units,
                    'unschedulable_pods': gp.pods, 'closest_nodes': gc.nodes,
                    'nodes_matching_selector': gc.matching, 'nodes_failing_selector': gc.failing}) AS evidence,
           format('Gang {} after {} s (timeout {} s): {}/{} pods bound, {} running{}{}{}',
                  CASE WHEN g.assembled_at IS NULL THEN 'not assembled' ELSE 'assembled only' END,
                  TRY_CAST(round(g.assembly_s) AS BIGINT), TRY_CAST(g.timeout_s AS BIGINT), g.pods_bound, g.gang_size,
                  g.pods_running,
                  CASE WHEN g.phase IS NOT NULL THEN ', PodGroup ' || g.phase ELSE '' END,
                  CASE WHEN su.units IS NOT NULL
                       THEN ', not assembled: ' || array_to_string([u.unit FOR u IN su.units], ', ') ELSE '' END,
                  CASE WHEN g.idle_gpus > 0 THEN ', ' || g.idle_gpus || ' GPUs held idle' ELSE '' END) AS summary
    FROM intermediate.int_gang g JOIN j USING (cluster, namespace, job)
    LEFT JOIN gang_pods gp USING (cluster, namespace, job)
    LEFT JOIN gang_closest gc USING (cluster, namespace, job)
    LEFT JOIN stuck_units su USING (cluster, namespace, job)
    WHERE g.timed_out
),
ray_f AS (
    -- The gang inside a Ray cluster: every pod of the RayCluster gang runs, yet a placement group waits PENDING past
    -- the gang timeout and the job's throughput is absent or below baseline meanwhile (intermediate.int_ray_placement).
    SELECT r.cluster, r.namespace, r.job, 'gang_assembly' AS root_cause,
           CASE WHEN j.gpus > 0 THEN 'critical' ELSE 'warning' END AS severity,
           r.pending_since + to_seconds(r.timeout_s) AS started_at, r.placed_at AS ended_at, 0.85 AS confidence,
           j.nodes,
           to_json({'ray_placement_groups_pending': r.max_pending, 'pending_since': r.pending_since,
                    'placed_at': r.placed_at, 'pending_s': round(r.pending_s), 'timeout_s': r.timeout_s,
                    'gang_size': j.gang_size, 'pods_running': j.pods_running, 'worker_groups': r.worker_groups,
                    'next_step': r.next_step}) AS evidence,
           format('Ray placement group{} PENDING for {} s (timeout {} s) while all {} pods of the gang run: {}',
                  CASE WHEN r.max_pending > 1 THEN 's (' || CAST(r.max_pending AS BIGINT) || ')' ELSE '' END,
                  TRY_CAST(round(r.pending_s) AS BIGINT), TRY_CAST(r.timeout_s AS BIGINT), j.pods_running,
                  r.next_step) AS summary
    FROM intermediate.int_ray_placement r JOIN j USING (cluster, namespace, job)
    WHERE r.timed_out AND j.gang_size > 0 AND j.pods_running >= j.gang_size
      AND NOT EXISTS (SELECT 1 FROM intermediate.int_job_throughput t
                      WHERE t.cluster = r.cluster AND t.namespace = r.namespace AND t.job = r.job
                        AND t.ts >= r.pending_since + to_seconds(r.timeout_s)
                        AND t.ts <= coalesce(r.placed_at, 'infinity'::TIMESTAMPTZ)
                        AND t.ratio >= getvariable('throughput_ratio'))
),
su_f AS (
    -- Pods bound whose containers never start (intermediate.int_startup_failures).
    SELECT s.cluster, s.namespace, s.job, 'startup_failure' AS root_cause,
           CASE WHEN s.gpus_held > 0 THEN 'critical' ELSE 'warning' END AS severity,
           s.started_at, s.ended_at,
           CASE WHEN s.reason IS NOT NULL THEN 0.95 WHEN s.events IS NOT NULL OR s.kueue_eviction IS NOT NULL THEN 0.85
                ELSE 0.7 END AS confidence,
           j.nodes,
           to_json({'pods_stuck': s.pods_stuck, 'gpus_held': s.gpus_held,
                    'first_pod': {'pod': s.first_pod, 'container': s.container, 'image': s.image, 'reason': s.reason,
                                  'message': s.message, 'immediate': s.immediate, 'bound_at': s.bound_at,
                                  'stuck_s': s.stuck_s},
                    'pods': s.pods, 'events': s.events, 'kueue_eviction': s.kueue_eviction,
                    'threshold_s': getvariable('startup_timeout_s')}) AS evidence,
           CASE WHEN s.first_pod IS NULL
                THEN format('Kueue evicted the Workload at {} because its pods never became ready ({}: {})',
                            strftime(TRY_CAST(s.kueue_eviction->>'$.at' AS TIMESTAMPTZ), '%Y-%m-%dT%H:%M:%SZ'),
                            s.kueue_eviction->>'$.reason', s.kueue_eviction->>'$.message')
                ELSE format('Containers of {} pod(s) not started {} min after binding: {}{}{}', s.pods_stuck,
                            TRY_CAST(round(s.stuck_s / 60) AS BIGINT),
                            coalesce(s.reason, 'no container started'),
                            CASE WHEN s.image IS NOT NULL AND s.reason ILIKE '%Image%' THEN ' for image ' || s.image
                                 ELSE '' END,
                            coalesce(' (' || left(s.message, 200) || ')', ''))
           END AS summary
    FROM intermediate.int_startup_failures s JOIN j USING (cluster, namespace, job)
),
crash_f AS (
    -- The job's containers failed (intermediate.int_container_failures): the first rank that failed, how, restarts.
    SELECT c.cluster, c.namespace, c.job, 'workload_crash' AS root_cause,
           CASE WHEN c.recovered_at IS NULL THEN 'critical' ELSE 'warning' END AS severity,
           c.first_failed_at AS started_at, c.recovered_at AS ended_at,
           CASE WHEN c.first_exit_code IS NOT NULL OR c.crash_looping > 0 THEN 0.95 ELSE 0.85 END AS confidence,
           CASE WHEN c.first_node IS NOT NULL THEN [c.first_node] ELSE j.nodes END AS nodes,
           to_json({'first_failure': {'pod': c.first_pod, 'rank': c.first_rank, 'container': c.first_container,
                                      'node': c.first_node, 'exit_code': c.first_exit_code, 'reason': c.first_reason,
                                      'at': c.first_failed_at,
                                      'oom_killed': coalesce(c.first_reason = 'OOMKilled', false)},
                    'failures': c.failures, 'oom_kills': c.oom_kills, 'exit_codes': c.exit_codes,
                    'restarts': c.restarts, 'crash_looping': c.crash_looping,
                    'crash_loop_message': c.crash_loop_message, 'last_failed_at': c.last_failed_at,
                    'controller': CASE WHEN c.controller_reason IS NOT NULL OR c.jobset_restarts > 0 THEN
                        {'kind': c.controller_kind, 'reason': c.controller_reason, 'message': c.controller_message,
                         'at': c.controller_failed_at, 'jobset_restarts': c.jobset_restarts} END,
                    'crashes': c.crashes}) AS evidence,
           format('{}{}{}{}',
                  CASE WHEN c.first_pod IS NULL THEN 'Containers of the job failed'
                       ELSE coalesce('Rank ' || c.first_rank || ' (pod ' || c.first_pod || ')', 'Pod ' || c.first_pod)
                            || ' container ' || c.first_container
                            || CASE WHEN c.first_reason = 'OOMKilled'
                                    THEN ' was killed for running out of memory (OOMKilled, exit code '
                                         || c.first_exit_code || ')'
                                    ELSE ' exited with code ' || c.first_exit_code
                                         || coalesce(' (' || c.first_reason || ')', '') END
                            || ' at ' || strftime(c.first_failed_at, '%Y-%m-%dT%H:%M:%SZ') END,
                  CASE WHEN c.restarts > 0 THEN format('; {} restarts', c.restarts) ELSE '' END,
                  CASE WHEN c.crash_looping > 0 THEN format('; {} pod(s) in CrashLoopBackOff', c.crash_looping)
                       ELSE '' END,
                  CASE WHEN c.controller_reason IS NOT NULL
                       THEN format('; {} failed: {}', c.controller_kind, c.controller_reason)
                       WHEN c.jobset_restarts > 0 THEN format('; JobSet restarted {} times', c.jobset_restarts)
                       ELSE '' END) AS summary
    FROM intermediate.int_container_failures c JOIN j USING (cluster, namespace, job)
),
explaining AS (
    -- Incidents a crash or a stall of the same job can be part of: a GPU fault, a lost node, degraded links or a
    -- throttled GPU, a preemption, containers that never started (and, for a stall, a crash: a hung collective that
    -- the watchdog ends). Placement and queue classes explain neither.
    SELECT cluster, namespace, job, root_cause, started_at, ended_at FROM gpu_f
    UNION ALL SELECT cluster, namespace, job, root_cause, started_at, ended_at FROM node_f
    UNION ALL SELECT cluster, namespace, job, root_cause, started_at, ended_at FROM ic_f
    UNION ALL SELECT cluster, namespace, job, root_cause, started_at, ended_at FROM thr_f
    UNION ALL SELECT cluster, namespace, job, root_cause, started_at, ended_at FROM pre_f
    UNION ALL SELECT cluster, namespace, job, root_cause, started_at, ended_at FROM su_f
    UNION ALL SELECT cluster, namespace, job, root_cause, started_at, ended_at FROM crash_f
),
crash_kept AS (
    -- One incident, one finding: a crash while a cause above it held (the XID that killed the process, the node
    -- lost under it, the preemption that stopped its peers) is that incident's.
    SELECT c.* FROM crash_f c
    WHERE NOT EXISTS (SELECT 1 FROM explaining x
                      WHERE x.cluster = c.cluster AND x.namespace = c.namespace AND x.job = c.job
                        AND x.root_cause <> 'workload_crash'
                        AND x.started_at <= c.started_at + INTERVAL 1 MINUTE
                        AND coalesce(x.ended_at, 'infinity'::TIMESTAMPTZ) >= c.started_at - INTERVAL 1 MINUTE)
),
stall_f AS (
    SELECT s.cluster, s.namespace, s.job, 'training_stalled' AS root_cause, 'critical' AS severity,
           s.stalled_from AS started_at, s.ended_at,
           CASE WHEN s.how = 'reported_zero' THEN 0.8 ELSE 0.7 END AS confidence, j.nodes,
           to_json({'stalled_from': s.stalled_from, 'stalled_s': round(s.stalled_s), 'how': s.how,
                    'last_progress_at': s.last_progress_at, 'last_value': round(s.last_value, 3),
                    'baseline': round(s.baseline, 3), 'pods_running': j.pods_running, 'gang_size': j.gang_size,
                    'gpu_util': round(s.gpu_util, 1), 'gpu_power': round(s.gpu_power, 1),
                    'pause_ratio': getvariable('pause_ratio'), 'threshold_s': getvariable('stall_s')}) AS evidence,
           format('No training progress for {} min since {} while {}/{} pods stay Running ({}{})',
                  TRY_CAST(round(s.stalled_s / 60) AS BIGINT), strftime(s.stalled_from, '%Y-%m-%dT%H:%M:%SZ'),
                  j.pods_running, j.gang_size,
                  CASE s.how WHEN 'reported_zero' THEN 'throughput reported at about 0'
                             ELSE 'throughput stopped reporting' END,
                  CASE WHEN s.gpu_util IS NOT NULL
                       THEN format('; its GPUs {}% busy', TRY_CAST(round(s.gpu_util) AS BIGINT)) ELSE '' END) AS summary
    FROM intermediate.int_training_stalls s JOIN j USING (cluster, namespace, job)
    WHERE NOT EXISTS (SELECT 1 FROM explaining x
                      WHERE x.cluster = s.cluster AND x.namespace = s.namespace AND x.job = s.job
                        AND x.started_at <= coalesce(s.ended_at, 'infinity'::TIMESTAMPTZ) + INTERVAL 1 MINUTE
                        AND coalesce(x.ended_at, 'infinity'::TIMESTAMPTZ) >= s.stalled_from - INTERVAL 1 MINUTE)
),
quiet_dips AS (
    -- Dips no interconnect or GPU signal explains: misplacement or unexplained. A dip while a GPU fault, a
    -- preemption, a lost node or a crash held is that incident's.
    SELECT d.* FROM dip_ev d
    WHERE len(d.signal_nodes) = 0
      AND NOT EXISTS (SELECT 1 FROM thr_f t WHERE t.cluster = d.cluster AND t.namespace = d.namespace
                      AND t.job = d.job AND t.started_at = d.started_at)
      AND NOT EXISTS (SELECT 1 FROM gpu_f g WHERE g.cluster = d.cluster AND g.namespace = d.namespace AND g.job = d.job)
      AND NOT EXISTS (SELECT 1 FROM pre_f p WHERE p.cluster = d.cluster AND p.namespace = d.namespace AND p.job = d.job)
      AND NOT EXISTS (SELECT 1 FROM explaining x
                      WHERE x.cluster = d.cluster AND x.namespace = d.namespace AND x.job = d.job
                        AND x.root_cause IN ('node_failure', 'workload_crash')
                        AND x.started_at <= coalesce(d.ended_at, 'infinity'::TIMESTAMPTZ) + INTERVAL 1 MINUTE
                        AND coalesce(x.ended_at, 'infinity'::TIMESTAMPTZ) >= d.started_at - INTERVAL 1 MINUTE)
),
mis_f AS (
    SELECT cluster, namespace, job, 'topology_misplacement' AS root_cause, 'warning' AS severity,
           started_at, ended_at, 0.8 AS confidence, nodes,
           to_json({'throughput': tp.throughput, 'level': level, 'domains': domains, 'needed_domains': needed_domains,
                    'domain_values': domain_values, 'requested_as': requested_as,
                    'assigned_domains': assigned_domains}) AS evidence,
           format('Throughput fell to {}% of baseline; pods span {} {} domains where {} would do',
                  TRY_CAST(round(100 * min_ratio) AS INTEGER), domains, level, needed_domains) AS summary
    FROM quiet_dips WHERE misplaced
),
slow_f AS (
    SELECT cluster, namespace, job, 'unexplained_slowdown' AS root_cause, 'warning' AS severity,
           started_at, ended_at, 0.6 AS confidence, nodes,
           to_json({'throughput': tp.throughput}) AS evidence,
           format('Throughput fell to {}% of baseline for {} samples with no queue, gang, placement, interconnect or GPU signal',
                  TRY_CAST(round(100 * min_ratio) AS INTEGER), samples) AS summary
    FROM quiet_dips WHERE NOT misplaced
),
gang_kept AS (
    -- A member replaced after its node was lost leaves the gang incomplete: the lost node's incident, not a gang
    -- that fails to assemble.
    SELECT g.* FROM gang_f g
    WHERE NOT EXISTS (SELECT 1 FROM node_f n
                      WHERE n.cluster = g.cluster AND n.namespace = g.namespace AND n.job = g.job
                        AND n.started_at <= coalesce(TRY_CAST(g.evidence->>'$.assembled_at' AS TIMESTAMPTZ),
                                                     'infinity'::TIMESTAMPTZ)
                        AND n.started_at >= TRY_CAST(g.evidence->>'$.assembly_started_at' AS TIMESTAMPTZ))
),
incidents AS (
    SELECT * FROM gpu_f UNION ALL BY NAME SELECT * FROM node_f UNION ALL BY NAME SELECT * FROM ic_f
    UNION ALL BY NAME SELECT * FROM thr_f UNION ALL BY NAME SELECT * FROM pre_f
    UNION ALL BY NAME SELECT * FROM adm_f UNION ALL BY NAME SELECT * FROM gang_kept
    UNION ALL BY NAME SELECT * FROM ray_f
    UNION ALL BY NAME SELECT * FROM su_f UNION ALL BY NAME SELECT * FROM crash_kept
    UNION ALL BY NAME SELECT * FROM mis_f UNION ALL BY NAME SELECT * FROM stall_f
    UNION ALL BY NAME SELECT * FROM slow_f
),
healthy AS (
    SELECT j.cluster, j.namespace, j.job, 'healthy' AS root_cause, 'info' AS severity,
           j.first_seen AS started_at, NULL::TIMESTAMPTZ AS ended_at, 0.9 AS confidence, j.nodes,
           to_json({'state': j.state, 'gang_size': j.gang_size, 'pods_running': j.pods_running,
                    'assembly_s': round(g.assembly_s), 'assembled_at': g.assembled_at,
                    'assembled_before_capture': g.assembled_before_capture, 'start_up_s': round(g.start_up_s),
                    'all_running_at': j.all_running_at,
                    -- what "making progress" rests on: the job's throughput series, when it reports one
                    'throughput_reported': EXISTS (SELECT 1 FROM intermediate.int_job_throughput t
                                                   WHERE t.cluster = j.cluster AND t.namespace = j.namespace
                                                     AND t.job = j.job)}) AS evidence,
           format('No incident: {} with {}/{} pods running{}', j.state, j.pods_running, j.gang_size,
                  CASE WHEN g.start_up_s IS NOT NULL THEN format(' (bound to running in {} s)', TRY_CAST(round(g.start_up_s) AS BIGINT))
                       WHEN g.assembled_before_capture THEN ' (assembled before capture began)' ELSE '' END) AS summary
    FROM j
    LEFT JOIN intermediate.int_gang g USING (cluster, namespace, job)
    WHERE NOT EXISTS (SELECT 1 FROM incidents i WHERE i.cluster = j.cluster AND i.namespace = j.namespace AND i.job = j.job)
)
SELECT f.cluster, f.namespace, f.job, j.job_kind, j.workload, j.pod_group, f.root_cause, f.severity,
       -- A job's deletion ends what still held (for objects deleted while gangscope was not watching, at the
       -- end of the list that found them gone: an upper bound).
       f.started_at, coalesce(f.ended_at, j.deleted_at) AS ended_at, CAST(f.confidence AS DOUBLE) AS confidence,
       CAST(coalesce(f.nodes, []) AS VARCHAR[]) AS nodes, CAST(f.evidence AS JSON) AS evidence, f.summary
FROM (SELECT * FROM incidents UNION ALL BY NAME SELECT * FROM healthy) f
JOIN j USING (cluster, namespace, job)
WHERE j.deleted_at IS NULL OR f.started_at <= j.deleted_at OR f.root_cause = 'healthy'
