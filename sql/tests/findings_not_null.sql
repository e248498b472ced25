-- marts.findings: identity, class, severity, confidence, evidence and summary are always set
SELECT * FROM marts.findings
WHERE cluster IS NULL OR namespace IS NULL OR job IS NULL OR job_kind IS NULL OR root_cause IS NULL
   OR severity IS NULL OR confidence IS NULL OR nodes IS NULL OR evidence IS NULL OR summary IS NULL
