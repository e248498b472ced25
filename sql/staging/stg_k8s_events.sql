-- materialized: view
-- The watch events the models read: the sane landed ones (staging.stg_k8s_watch) and the deletions
-- that happened while no collector was watching (staging.stg_k8s_gone).
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
SELECT * FROM staging.stg_k8s_watch
UNION ALL BY NAME
SELECT * FROM staging.stg_k8s_gone
