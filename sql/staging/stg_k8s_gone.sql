-- Objects deleted while no collector was watching. A collector that starts (or restarts) lists every
-- kind from nothing and re-sends every object it finds, framed by RELIST_BEGIN (resource_version '')
-- and RELIST_END markers (docs/records.md). An object the lake knows from before such a list, not
-- deleted, and not re-sent by it, is gone: it gets a DELETED row at the list's end, carrying its last
-- known object. A relist after 410 Gone resumes from a known version (resource_version not '') and
-- re-sends only what changed, so it proves nothing about unchanged objects and is not used here;
-- neither are Events, which expire by themselves. A namespace-scoped list only speaks for its namespace.
-- A list counts only once all the events it sent (RELIST_END's {"sent": N}) have landed: the pipeline
-- lands Kafka partitions at their own pace, and the marker may land before some of the objects.
-- column: cluster: cluster name
-- column: observed_at: the end of the first full list that did not re-send the object
-- column: event_type: always DELETED
-- column: api_version: the object's apiVersion (as last seen)
-- column: kind: the object's kind
-- column: namespace: the object's namespace
-- column: name: the object's name
-- column: uid: the object's metadata.uid
-- column: resource_version: the object's last seen metadata.resourceVersion
-- column: object: the object as last seen
-- column: kafka_partition: of the object's last event
-- column: kafka_offset: of the object's last event
WITH markers AS (
    SELECT cluster, observed_at, event_type, kind, coalesce(namespace, '') AS ns, resource_version,
           TRY_CAST(object->>'$.sent' AS BIGINT) AS sent,
           CASE WHEN contains(api_version, '/') THEN split_part(api_version, '/', 1) ELSE '' END AS api_group
    FROM staging.stg_k8s_watch
    WHERE event_type IN ('RELIST_BEGIN', 'RELIST_END')
),

lists AS (
    SELECT b.cluster, b.kind, b.api_group, b.ns, b.observed_at AS began,
           min(e.observed_at) AS ended, arg_min(e.sent, e.observed_at) AS sent
    FROM markers AS b
    JOIN markers AS e
      ON e.event_type = 'RELIST_END' AND e.cluster = b.cluster AND e.kind = b.kind AND e.api_group = b.api_group
     AND e.ns = b.ns AND e.observed_at >= b.observed_at
    WHERE b.event_type = 'RELIST_BEGIN' AND b.resource_version = ''
    GROUP BY ALL
),

full_lists AS (
    -- ... whose events have all landed (counted in raw: a row the sanity filter drops has landed too).
    SELECT l.* FROM lists AS l
    WHERE l.sent <= (SELECT count(*) FROM raw.k8s_objects AS r
                     WHERE r.cluster = l.cluster AND r.kind = l.kind AND r.observed_at BETWEEN l.began AND l.ended
                       AND r.event_type IN ('ADDED', 'MODIFIED', 'DELETED')
                       AND l.api_group = CASE WHEN contains(r.api_version, '/')
                                              THEN split_part(r.api_version, '/', 1) ELSE '' END
                       AND l.ns IN ('', coalesce(r.namespace, '')))
),

last_seen AS (
    SELECT cluster, uid,
           arg_max(w, (observed_at, kafka_offset)) AS w
    FROM staging.stg_k8s_watch AS w
    WHERE event_type IN ('ADDED', 'MODIFIED', 'DELETED') AND kind <> 'Event' AND uid IS NOT NULL
      AND EXISTS (SELECT 1 FROM full_lists AS f WHERE f.cluster = w.cluster AND f.kind = w.kind)
    GROUP BY cluster, uid
)

SELECT l.cluster,
       min(f.ended) AS observed_at,
       'DELETED' AS event_type,
       l.w.api_version, l.w.kind, l.w.namespace, l.w.name, l.uid, l.w.resource_version, l.w.object,
       l.w.kafka_partition, l.w.kafka_offset
FROM last_seen AS l
JOIN full_lists AS f
  ON f.cluster = l.cluster AND f.kind = l.w.kind
 AND f.api_group = CASE WHEN contains(l.w.api_version, '/') THEN split_part(l.w.api_version, '/', 1) ELSE '' END
 AND f.ns IN ('', coalesce(l.w.namespace, ''))
 AND f.began > l.w.observed_at
WHERE l.w.event_type <> 'DELETED'
  -- re-sent, but left out of stg_k8s_watch by its time checks: still there
  AND NOT EXISTS (SELECT 1 FROM raw.k8s_objects AS r
                  WHERE r.cluster = l.cluster AND r.uid = l.uid AND r.observed_at >= f.began)
GROUP BY ALL
