-- marts.findings: classes and severities of CONTRACT section 4 only; confidence within 0..1; ends after starts
SELECT * FROM marts.findings
WHERE root_cause NOT IN ('gpu_fault', 'interconnect_degradation', 'preemption', 'admission_quota', 'admission_topology',
                         'gang_assembly', 'topology_misplacement', 'unexplained_slowdown', 'healthy')
   OR severity NOT IN ('critical', 'warning', 'info')
   OR confidence < 0 OR confidence > 1
   OR ended_at < started_at
   OR json_type(evidence) <> 'OBJECT'
