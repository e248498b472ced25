-- marts.jobs: one row per job
SELECT cluster, namespace, job, count(*) AS n FROM marts.jobs GROUP BY ALL HAVING count(*) > 1
