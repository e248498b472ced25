"""``gangscope sandbox``: serve a simulated cluster live (Kubernetes API + exporters) until it ends."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from gangscope.config import Settings
from gangscope.errors import UserError


def register(groups: dict[str, Any], common: Any) -> None:
    p = groups["root"].add_parser(
        "sandbox", parents=[common], help="serve a simulated cluster live: Kubernetes API and exporters",
        description="Generate a scenario (as `gangscope simulate`) starting now and play it live: a Kubernetes API "
        "server (list/watch, bookmarks, 410 Gone, selectors, discovery) and one Prometheus endpoint per simulated "
        "exporter, on a clock --speed times faster than real time. Writes <out>/kubeconfig (for kubectl) and "
        "<out>/gangscope.yaml (for `gangscope run --config`), and the ground truth to <out>/scenario/truth.json. "
        "Runs until the scenario ends or SIGINT/SIGTERM.")
    p.add_argument("--scenario", default="mixed", metavar="NAME",
                   help="scenario or variant <scenario>@<how> (see `gangscope simulate --list`; default mixed); "
                   "@ray, @trainjob, @pytorchjob, @mpijob, @lws, @podgroup submit every job as that kind, served "
                   "with its CRD (a variant with 1.35 / 1.37 native scheduling.k8s.io versions is refused at start)")
    p.add_argument("--out", metavar="DIR", default="gangscope-sandbox", help="directory (default ./gangscope-sandbox)")
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second (default 1)")
    p.add_argument("--seed", type=int, default=1, help="simulator seed (default 1)")
    p.add_argument("--nodes", type=int, default=20, help="GPU nodes of 8 GPUs (default 20: mixed needs 20)")
    p.add_argument("--hours", type=float, default=1.0, help="simulated hours, at least 1 (default 1)")
    p.add_argument("--interval", type=float, default=15.0, help="simulated scrape interval in seconds (default 15)")
    p.add_argument("--port", type=int, default=0, help="loopback port of the API server (default: any free one)")
    p.set_defaults(handler=run)


def run(settings: Settings, args: Any) -> int:
    from collectors.simulate.sandbox import Sandbox
    from collectors.simulate.scenarios import SCENARIOS
    from collectors.simulate.variants import VARIANTS
    from gangscope.app.service import stop_on_signals

    if args.speed <= 0 or args.interval <= 0:
        raise UserError("--speed and --interval must be positive")
    if args.scenario not in SCENARIOS and args.scenario not in VARIANTS:
        raise UserError(f"unknown scenario {args.scenario!r}; one of: {', '.join(SCENARIOS)}, or a variant "
                        "(`gangscope simulate --list`)")
    try:
        sandbox = Sandbox(Path(args.out), args.scenario, seed=args.seed, nodes=args.nodes, hours=args.hours,
                          interval=args.interval, speed=args.speed, port=args.port).start()
    except (ValueError, KeyError) as e:
        raise UserError(f"sandbox: {e}") from None
    stop = threading.Event()
    try:
        print(f"sandbox: {args.scenario} on {args.nodes} nodes at {args.speed:g}x, API {sandbox.api.url}, "
              f"{len(sandbox.exporters)} exporters", flush=True)
        print(f"sandbox: kubectl --kubeconfig {sandbox.kubeconfig} get pods -A", flush=True)
        print(f"sandbox: gangscope run --config {sandbox.config}", flush=True)
        print(f"sandbox: truth in {sandbox.scenario_dir / 'truth.json'}; ends at {sandbox.end:%Y-%m-%dT%H:%M:%SZ} "
              f"(sandbox clock)", flush=True)
        with stop_on_signals(stop):
            while not stop.wait(0.5) and not sandbox.finished:
                pass
    finally:
        sandbox.stop()
    print("sandbox: stopped" if stop.is_set() else "sandbox: scenario over", flush=True)
    return 0
