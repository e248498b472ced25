-- materialized: incremental
-- unique_key: series
-- Every landed series id (one per series and UTC day, raw.metric_series) with its canonical signal and
-- what its labels say of node, GPU, device and pod, resolved once when the id first appears: each build
-- reads only ids not here yet (a few at most builds, every series once after midnight), never every
-- series of the day again. A series of no signal has signal NULL (so it is not looked at twice). The signal
-- map is a variable: when it changes the runner starts this table over (docs/models.md).
-- Rules: staging.stg_metric_signals' header. What depends on Kubernetes objects (a node found by its
-- address) is joined there, at each build, not frozen here.
-- column: series: series id (raw.metric_series.series; day-scoped)
-- column: day: UTC day of the id
-- column: cluster: cluster name
-- column: target: scrape target (URL, or instance for replayed files)
-- column: scrape_job: scrape job (dcgm, node, kueue, scheduler, ray, training, ...)
-- column: instance: instance as landed
-- column: metric: metric name exactly as the exporter wrote it
-- column: signal: canonical signal name; NULL when the series maps to none (or is a Kueue HA follower's)
-- column: kind: gauge, counter or code (the signal map's kind); NULL without a signal
-- column: scale: factor to the signal's unit; NULL without a signal
-- column: label_node: node from the series: raw node, else the hostname/node/kubernetes_node/nodename label
-- column: instance_host: host part of the instance (raw, else the instance label), to find a node by address
-- column: gpu: the gpu label (GPU index), else gpu_uuid (NVLink link entities)
-- column: device: IB '<device>/<port>', NVLink 'nvlink<N>', Kueue cluster_queue, dcgm-exporter clock_event; else NULL
-- column: namespace: pod namespace (namespace, else exported_namespace)
-- column: pod: pod name (pod, else exported_pod)
-- column: job_name: the job_name label (throughput samples without a pod)
-- column: rate_key: one number per (cluster, target, metric, labels) whatever the day: counters' rates are taken along it
WITH signal_map AS (
    -- How this stays fast (issue #6): labels are parsed once per series (~10^4), not per sample (~10^7).
    SELECT unnest(getvariable('signal_map'), recursive := true)
),
new_series AS (
    SELECT series, day, cluster, target, job, instance, node, metric, labels
    FROM raw.metric_series
    WHERE series NOT IN (SELECT series FROM staging.stg_metric_series)
    -- Once, even if two writers landed the same id (each checks before the other commits).
    QUALIFY row_number() OVER (PARTITION BY series) = 1
),
name_map AS (
    -- Every map entry that matches each metric name present (a few dozen names, a few dozen rules).
    SELECT n.metric, m.signal, m.kind, m.scale, m.label, m.label_value, m.priority
    FROM (SELECT DISTINCT metric FROM new_series) n
    JOIN signal_map m
      ON (m.match = 'exact' AND n.metric = m.metric)
      OR (m.match = 'suffix' AND ends_with(n.metric, m.metric))
      OR (m.match = 'regex' AND regexp_full_match(n.metric, m.metric))
),
series_label AS (
    -- One row per series and label, the key lower-cased: label keys compare case-insensitively.
    SELECT metric, labels, lower(k) AS k, json_extract_string(labels, '$."' || k || '"') AS v
    FROM (SELECT DISTINCT metric, labels FROM new_series WHERE metric IN (SELECT metric FROM name_map)),
         unnest(json_keys(labels)) AS t(k)
),
mapped AS (
    -- The best signal-map entry per (metric, labels) (lowest priority number).
    SELECT s.metric, s.labels, m.signal, m.kind, m.scale
    FROM (SELECT DISTINCT metric, labels FROM new_series WHERE metric IN (SELECT metric FROM name_map)) s
    JOIN name_map m ON m.metric = s.metric
    WHERE (m.label IS NULL
           OR EXISTS (SELECT 1 FROM series_label l
                      WHERE l.metric = s.metric AND l.labels = s.labels
                        AND l.k = lower(m.label) AND lower(l.v) = lower(m.label_value)))
      -- Kueue in HA: followers export gauges too (replica_role, since v0.16); only leader / standalone count,
      -- else queue depth doubles.
      AND NOT EXISTS (SELECT 1 FROM series_label l
                      WHERE l.metric = s.metric AND l.labels = s.labels
                        AND l.k = 'replica_role' AND lower(l.v) = 'follower')
    QUALIFY row_number() OVER (PARTITION BY s.metric, s.labels ORDER BY m.priority) = 1
),
attrs AS (
    SELECT mp.metric, mp.labels, mp.signal, mp.kind, mp.scale,
           max(l.v) FILTER (WHERE l.k = 'hostname') AS l_hostname,
           max(l.v) FILTER (WHERE l.k = 'node') AS l_node,
           max(l.v) FILTER (WHERE l.k = 'kubernetes_node') AS l_kubernetes_node,
           max(l.v) FILTER (WHERE l.k = 'nodename') AS l_nodename,
           max(l.v) FILTER (WHERE l.k = 'gpu') AS l_gpu,
           max(l.v) FILTER (WHERE l.k = 'gpu_uuid') AS l_gpu_uuid,
           max(l.v) FILTER (WHERE l.k = 'device') AS l_device,
           max(l.v) FILTER (WHERE l.k = 'port') AS l_port,
           max(l.v) FILTER (WHERE l.k = 'nvlink') AS l_nvlink,
           max(l.v) FILTER (WHERE l.k = 'cluster_queue') AS l_cluster_queue,
           max(l.v) FILTER (WHERE l.k = 'clock_event') AS l_clock_event,
           max(l.v) FILTER (WHERE l.k = 'pod') AS l_pod,
           max(l.v) FILTER (WHERE l.k = 'namespace') AS l_namespace,
           max(l.v) FILTER (WHERE l.k = 'exported_pod') AS l_exported_pod,
           max(l.v) FILTER (WHERE l.k = 'exported_namespace') AS l_exported_namespace,
           max(l.v) FILTER (WHERE l.k = 'job_name') AS l_job_name,
           max(l.v) FILTER (WHERE l.k = 'instance') AS l_instance
    FROM mapped mp
    LEFT JOIN series_label l ON l.metric = mp.metric AND l.labels = mp.labels
    GROUP BY ALL
)
SELECT
    x.series,
    x.day,
    x.cluster,
    x.target,
    x.job AS scrape_job,
    x.instance,
    x.metric,
    x.signal,
    x.kind,
    x.scale,
    coalesce(nullif(x.raw_node, ''), x.l_hostname, x.l_node, x.l_kubernetes_node, x.l_nodename) AS label_node,
    CASE WHEN coalesce(x.r_inst, '') LIKE '[%'
         THEN regexp_extract(x.r_inst, '^\[([^\]]+)\]', 1)
         ELSE regexp_replace(coalesce(x.r_inst, ''), ':[0-9]+$', '') END AS instance_host,
    coalesce(x.l_gpu, x.l_gpu_uuid) AS gpu,
    CASE
        WHEN x.l_nvlink IS NOT NULL THEN 'nvlink' || x.l_nvlink
        WHEN regexp_matches(x.metric, 'NVLINK.*_L[0-9]+(_|$)')
            THEN 'nvlink' || regexp_extract(x.metric, '_L([0-9]+)(_|$)', 1)
        WHEN x.l_port IS NOT NULL AND x.l_device IS NOT NULL THEN x.l_device || '/' || x.l_port
        WHEN x.l_cluster_queue IS NOT NULL THEN x.l_cluster_queue
        WHEN x.l_clock_event IS NOT NULL THEN x.l_clock_event
    END AS device,
    CASE WHEN x.l_pod IS NOT NULL THEN x.l_namespace ELSE x.l_exported_namespace END AS namespace,
    coalesce(x.l_pod, x.l_exported_pod) AS pod,
    x.l_job_name AS job_name,
    -- md5, not hash(): the same number in every DuckDB version and build, as rows stay here across both.
    md5_number(to_json([x.cluster, x.target, x.metric, x.labels::VARCHAR])::VARCHAR) AS rate_key
FROM (SELECT s.series, s.day, s.cluster, s.target, s.job, s.instance, s.node AS raw_node, s.metric, s.labels,
             a.* EXCLUDE (metric, labels), coalesce(nullif(s.instance, ''), a.l_instance) AS r_inst
      FROM new_series s LEFT JOIN attrs a ON a.metric = s.metric AND a.labels = s.labels) x
