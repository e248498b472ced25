-- marts.findings: classes and severities of CONTRACT section 4 only; confidence within 0..1; ends after starts
SELECT * FROM marts.findings
WHERE NOT list_contains(getvariable('root_causes'), root_cause)
   OR severity NOT IN ('critical', 'warning', 'info')
   OR confidence < 0 OR confidence > 1
   OR ended_at < started_at
   OR json_type(evidence) <> 'OBJECT'
