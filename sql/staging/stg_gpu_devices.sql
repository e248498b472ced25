-- GPU devices as dcgm-exporter names them: node, index and UUID, so a finding about "GPU 3" can name the
-- exact device to pull. From the series' labels (one row per series and day), not from the samples.
-- column: cluster: cluster name
-- column: node: the Hostname / hostname label, else the series' node
-- column: gpu: the gpu label (index)
-- column: uuid: the UUID label
-- column: model: the modelName label
-- column: pci_bus_id: the pci_bus_id label
SELECT cluster, node, gpu, max(uuid) AS uuid, max(model) AS model, max(pci_bus_id) AS pci_bus_id
FROM (
    SELECT cluster,
           coalesce(json_extract_string(labels, '$.Hostname'), json_extract_string(labels, '$.hostname'), node) AS node,
           json_extract_string(labels, '$.gpu') AS gpu, json_extract_string(labels, '$.UUID') AS uuid,
           json_extract_string(labels, '$.modelName') AS model, json_extract_string(labels, '$.pci_bus_id') AS pci_bus_id
    FROM raw.metric_series
    WHERE starts_with(metric, 'DCGM_FI_')
)
WHERE gpu IS NOT NULL AND uuid IS NOT NULL
GROUP BY ALL
