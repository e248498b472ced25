-- The newest watch event per cluster (staging.stg_k8s_events), for intermediate.int_as_of. A table of
-- its own because int_as_of is built whenever a sample lands, and reading the events view there ran its
-- time-sanity regex over every landed object at each build; this one is built only when the watch
-- events change (a model whose inputs did not change is not rebuilt: docs/models.md).
-- column: cluster: cluster name
-- column: observed_at: newest observed_at of the cluster's watch events
SELECT cluster, max(observed_at) AS observed_at
FROM staging.stg_k8s_events
GROUP BY cluster
