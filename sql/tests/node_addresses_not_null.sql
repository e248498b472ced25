-- staging.stg_node_addresses: node and address always set, each pair once
SELECT cluster, node, address, count(*) AS n FROM staging.stg_node_addresses
GROUP BY ALL HAVING count(*) > 1 OR node IS NULL OR address IS NULL
