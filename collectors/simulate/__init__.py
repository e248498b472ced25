"""Cluster simulator with fault injection: replay files (k8s.jsonl, metrics.prom) and truth.json.

``generate(name, out_dir, ...)`` writes one scenario (or variant, ``<scenario>@<how>``) into
``<out_dir>/<name>/``; see docs/simulator.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DEFAULT_START = datetime(2026, 11, 1, tzinfo=UTC)
DEFAULT_NODES = 20  # every scenario fits, `mixed` (one job of every class) included


@dataclass
class Generated:
    scenario: str
    directory: Path
    k8s_events: int
    samples: int
    jobs: int


def generate(name: str, out_dir: Path, seed: int = 1, nodes: int = DEFAULT_NODES, hours: float = 1.0,
             start: datetime = DEFAULT_START, interval: float = 15.0, subdir: str | None = None) -> Generated:
    """Generate one scenario or variant into ``out_dir/<subdir or name>``: k8s.jsonl, metrics.prom, truth.json."""
    from collectors.simulate import cluster, scenarios, telemetry, timeline, truth
    from collectors.simulate.variants import VARIANTS

    if hours < 1.0:
        raise ValueError("--hours must be at least 1 (every scenario plays out in its first hour)")
    variant = VARIANTS.get(name)
    rng = random.Random(f"{seed}:cluster")
    clu = cluster.build(nodes, rng)
    scn = scenarios.build(variant.scenario if variant else name, clu, seed, hours * 3600.0)
    capture_at = None
    if variant is not None:
        variant.apply(scn, seed)
        capture_at = variant.capture_at(scn)
    d = out_dir / (subdir or name)
    d.mkdir(parents=True, exist_ok=True)
    tl = timeline.build(scn, start)
    if variant is not None and variant.kind:
        from collectors.simulate.kinds import rekind

        tl.items = rekind(tl.items, scn, variant.kind)
    if capture_at is not None:
        tl.start_capture_at(capture_at)
    events = tl.write(d / "k8s.jsonl")
    since = capture_at if capture_at is not None and variant is not None and not variant.metrics_history else 0.0
    samples = telemetry.write(scn, d / "metrics.prom", start, interval, seed, since=since)
    truth.write(scn, start, d / "truth.json", variant=name if variant else None, capture_at=capture_at)
    return Generated(name, d, events, samples, len(scn.jobs))
