-- materialized: view
-- The watch events as landed: raw.k8s_objects without the rows whose times are insane (defence in
-- depth behind the collectors' time sanity, docs/records.md): observed before 2000-01-01 or more than a
-- day after the build, or with an object time field (a key ending in Timestamp, Time or At) in a year
-- before 2000 or after 2099. One such row must not move the data's "now" (intermediate.int_as_of) or
-- overflow a duration; it stays in raw.k8s_objects for inspection. Models read staging.stg_k8s_events:
-- these rows plus the deletions that happened while no collector watched (staging.stg_k8s_gone).
-- column: cluster: cluster name
-- column: observed_at: when the event was observed
-- column: event_type: ADDED, MODIFIED, DELETED or a relist marker
-- column: api_version: the object's apiVersion
-- column: kind: the object's kind
-- column: namespace: the object's namespace
-- column: name: the object's name
-- column: uid: the object's metadata.uid
-- column: resource_version: the object's metadata.resourceVersion
-- column: object: the object as JSON
-- column: kafka_partition: where it was read from
-- column: kafka_offset: where it was read from
SELECT * EXCLUDE (bad_time)
FROM raw.k8s_objects
WHERE observed_at >= TIMESTAMPTZ '2000-01-01 00:00:00+00' AND observed_at <= now() + INTERVAL 1 DAY
  -- bad_time: the same pattern matched once at landing (pipeline/decode.py); rows landed before it existed match here
  AND NOT coalesce(
        bad_time,
        regexp_matches(object::VARCHAR, '(Timestamp|Time|At)"\s*:\s*"(0[0-9]{3}|1[0-9]{3}|2[1-9][0-9]{2}|[3-9][0-9]{3})-'),
        false)
