"""``gangscope simulate``: write scenario replay files (k8s.jsonl, metrics.prom, truth.json)."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path

from gangscope.errors import UserError


def _start(text: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text}") from e
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def register(groups, common) -> None:
    p = groups["root"].add_parser(
        "simulate", parents=[common], help="simulate a GPU cluster with injected faults",
        description="Generate a simulated GPU training cluster with injected faults, as replay files "
        "(CONTRACT section 2) plus its ground truth: <out>/<scenario>/{k8s.jsonl,metrics.prom,truth.json}. "
        "Feed them to `gangscope replay --k8s ... --metrics ...`. Deterministic for a seed.",
    )
    p.add_argument("--scenario", default="mixed", metavar="NAME|all",
                   help="scenario or variant (<scenario>@<how>) to generate, or 'all' scenarios (default mixed; "
                   "see --list)")
    p.add_argument("--out", metavar="DIR", default="gangscope-sim", help="output directory (default ./gangscope-sim)")
    p.add_argument("--seed", type=int, default=1, help="random seed: same seed, same bytes (default 1)")
    p.add_argument("--nodes", type=int, default=20, help="GPU nodes of 8 GPUs (default 20; mixed needs 20, "
                   "gang_assembly 16)")
    p.add_argument("--hours", type=float, default=1.0, help="simulated hours, at least 1 (default 1)")
    p.add_argument("--interval", type=float, default=15.0, help="scrape interval in seconds (default 15)")
    p.add_argument("--start", type=_start, default=None, metavar="RFC3339",
                   help="simulated start time (default 2026-11-01T00:00:00Z)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.set_defaults(handler=run)


def run(settings, args) -> int:
    from collectors.simulate import DEFAULT_START, generate
    from collectors.simulate.scenarios import SCENARIOS
    from collectors.simulate.variants import VARIANTS

    if args.list:
        texts = {name: text for name, (text, _) in SCENARIOS.items()} | {n: v.text for n, v in VARIANTS.items()}
        width = max(len(n) for n in texts)
        for name, text in texts.items():
            print(f"{name:<{width}}  {text}")
        return 0
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    for n in names:
        if n not in SCENARIOS and n not in VARIANTS:
            raise UserError(f"unknown scenario {n!r}; one of: {', '.join(SCENARIOS)}, all, or a variant (--list)")
    if args.interval <= 0:
        raise UserError("--interval must be positive")
    out = Path(args.out)
    for n in names:
        t0 = time.perf_counter()
        try:
            g = generate(n, out, seed=args.seed, nodes=args.nodes, hours=args.hours,
                         start=args.start or DEFAULT_START, interval=args.interval)
        except ValueError as e:
            raise UserError(f"scenario {n}: {e}") from e
        print(f"{n}: {g.jobs} jobs, {g.k8s_events} watch events, {g.samples} samples in "
              f"{time.perf_counter() - t0:.1f}s -> {g.directory}")
    return 0
