-- marts.findings: a job with an incident has no healthy row, and a healthy job has exactly one
SELECT cluster, namespace, job FROM marts.findings
GROUP BY ALL
HAVING (count(*) FILTER (WHERE root_cause = 'healthy') > 0 AND count(*) FILTER (WHERE root_cause <> 'healthy') > 0)
    OR count(*) FILTER (WHERE root_cause = 'healthy') > 1
