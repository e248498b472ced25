-- marts.jobs: every job has findings, and its root cause is one of them
SELECT j.* FROM marts.jobs j
WHERE NOT EXISTS (SELECT 1 FROM marts.findings f WHERE f.cluster = j.cluster AND f.namespace = j.namespace
                    AND f.job = j.job AND f.root_cause = j.root_cause)
