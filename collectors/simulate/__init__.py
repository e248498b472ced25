"""Cluster simulator with fault injection: replay files (k8s.jsonl, metrics.prom) and truth.json.

``generate(name, out_dir, ...)`` writes one scenario into ``<out_dir>/<name>/``; see docs/simulator.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DEFAULT_START = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass
class Generated:
    scenario: str
    directory: Path
    k8s_events: int
    samples: int
    jobs: int


def generate(name: str, out_dir: Path, seed: int = 1, nodes: int = 16, hours: float = 1.0,
             start: datetime = DEFAULT_START, interval: float = 15.0, subdir: str | None = None,
             variant: str = "1.36") -> Generated:
    """Generate one scenario into ``out_dir/<subdir or name>``: k8s.jsonl, metrics.prom, truth.json.

    ``variant`` (scenarios.VARIANTS) shows the same jobs and faults as another Kubernetes / Kueue version would.
    """
    from collectors.simulate import cluster, scenarios, telemetry, timeline, truth

    if hours < 1.0:
        raise ValueError("--hours must be at least 1 (every scenario plays out in its first hour)")
    rng = random.Random(f"{seed}:cluster")
    clu = cluster.build(nodes, rng)
    scn = scenarios.build(name, clu, seed, hours * 3600.0, variant)
    d = out_dir / (subdir or name)
    d.mkdir(parents=True, exist_ok=True)
    events = timeline.build(scn, start).write(d / "k8s.jsonl")
    samples = telemetry.write(scn, d / "metrics.prom", start, interval, seed)
    truth.write(scn, start, d / "truth.json")
    return Generated(name, d, events, samples, len(scn.jobs))
