-- marts.findings: one row per job, class and incident start
SELECT cluster, namespace, job, root_cause, started_at, count(*) AS n
FROM marts.findings GROUP BY ALL HAVING count(*) > 1
