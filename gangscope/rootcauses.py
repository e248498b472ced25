"""The root-cause classes of CONTRACT section 4, in precedence order: defined once, read everywhere.

A job's primary finding is the one whose class comes first here. The SQL models get the same list as the
DuckDB variable ``root_causes`` (pipeline.models), so precedence has one definition for Python and SQL.
"""

from __future__ import annotations

ROOT_CAUSES: tuple[str, ...] = (
    "gpu_fault", "node_failure", "interconnect_degradation", "gpu_throttle", "preemption", "admission_quota",
    "admission_topology", "gang_assembly", "startup_failure", "workload_crash", "topology_misplacement",
    "training_stalled", "unexplained_slowdown", "healthy",
)
# Every class but healthy: what a finding can be.
FAULTS: tuple[str, ...] = ROOT_CAUSES[:-1]
# The classes decided by a throughput dip (below baseline, not a pause).
DIP_CLASSES: tuple[str, ...] = ("interconnect_degradation", "gpu_throttle", "topology_misplacement",
                                "unexplained_slowdown")
# The classes of a job that waits (admission, assembly, start-up): their finding holds from creation + threshold.
WAITING_CLASSES: tuple[str, ...] = ("admission_quota", "admission_topology", "gang_assembly", "startup_failure")


def precedence(root_cause: str) -> int:
    """Position in the precedence list (unknown classes last)."""
    return ROOT_CAUSES.index(root_cause) if root_cause in ROOT_CAUSES else len(ROOT_CAUSES)
