"""Prometheus as a source: the remote-write receiver and the backfill of a past window."""

DEFAULT_JOB = "prometheus"  # job and instance of a series that has neither label (recording rules, say)
