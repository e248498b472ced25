-- staging.stg_pods and intermediate.int_pod_jobs: one row per pod uid
SELECT cluster, uid, count(*) AS n FROM staging.stg_pods GROUP BY ALL HAVING count(*) > 1
UNION ALL
SELECT cluster, pod_uid, count(*) FROM intermediate.int_pod_jobs GROUP BY ALL HAVING count(*) > 1
