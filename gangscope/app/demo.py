"""``gangscope demo``: the whole chain on this machine, on a simulated cluster with injected faults.

Embedded broker → ``mixed`` scenario → replay (publish + land) → SQL models → diagnosis table →
report. A stage whose module is not built yet is named and the demo stops after the stages that ran,
exiting 0; it never prints a result it did not compute.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from gangscope.config import Settings

DEMO_NODES = 16
DEMO_HOURS = 1.0
DEMO_INTERVAL = 30.0  # dcgm-exporter's default collect interval: halves the demo's replay volume


def register(groups, common) -> None:
    p = groups["root"].add_parser(
        "demo", parents=[common], help="whole chain on this machine: simulator, broker, pipeline, models, report",
        description="Run gangscope end to end with nothing but the package: start an embedded Kafka broker, "
        "simulate a 16-node GPU cluster for an hour with faults injected (the 'mixed' scenario), replay it through "
        "the pipeline into the lake, build the models, print the diagnosis table, compare it with the injected "
        "truth and write an HTML report.",
    )
    p.add_argument("--out", metavar="DIR", default="gangscope-demo",
                   help="where the scenario, the lake (unless --data) and the report go (default ./gangscope-demo)")
    p.add_argument("--seed", type=int, default=1, help="simulator seed (default 1)")
    p.set_defaults(handler=run)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _stop(what: str, issue: int, after: str) -> int:
    _say(f"demo: {what} not built yet (issue #{issue}): stopping after {after}")
    return 0


def run(settings: Settings, args: Any) -> int:
    from collectors.simulate import DEFAULT_START, generate
    from gangscope.transport.broker import bootstrap_servers

    out = Path(args.out)
    if getattr(args, "data", None) is None:
        settings = dataclasses.replace(settings, data=out / "data")
    t0 = time.perf_counter()
    g = generate("mixed", out, seed=args.seed, nodes=DEMO_NODES, hours=DEMO_HOURS, start=DEFAULT_START,
                 interval=DEMO_INTERVAL, subdir="scenario")
    _say(f"demo: simulated {DEMO_NODES} nodes x {DEMO_HOURS:g} h ({g.jobs} jobs, {g.k8s_events} watch events, "
         f"{g.samples} samples) -> {g.directory} [{time.perf_counter() - t0:.1f}s]")
    try:
        from gangscope.app.replay import replay
    except ImportError:
        return _stop("replay", 3, "simulating")
    with bootstrap_servers(settings) as bootstrap:
        t = time.perf_counter()
        stats = replay(settings, [str(g.directory / "k8s.jsonl")], [str(g.directory / "metrics.prom")], land=True,
                       bootstrap=bootstrap, progress=None)
        _say(f"demo: replayed {stats.records} records through Kafka into the lake at {settings.data} "
             f"[{time.perf_counter() - t:.1f}s]")
    if not stats.landed:
        return _stop("landing", 2, "publishing")
    try:
        from pipeline.models import build
    except ImportError:
        return _stop("models", 6, "landing")
    t = time.perf_counter()
    b = build(settings)
    _say(f"demo: built {b.models} models [{time.perf_counter() - t:.1f}s]")
    try:
        from reports.diagnose import findings, to_table
    except ImportError:
        return _stop("diagnose", 6, "building the models")
    from pipeline import lake

    con = lake.connect(settings)
    try:
        rows = findings(con, include_healthy=False)
    finally:
        con.close()
    _say("")
    _say(to_table(rows))
    _say("")
    _say(_score(rows, json.loads((g.directory / "truth.json").read_text())))
    try:
        from reports.report import write_report
    except ImportError:
        return _stop("report", 7, "the diagnosis")
    try:
        path = write_report(settings, "html", out / "report.html")
    except Exception as e:  # another stage's failure: say which, never pretend a report exists
        print(f"gangscope: demo: writing the report failed: {type(e).__name__}: {str(e).splitlines()[0]}",
              file=sys.stderr)
        return 1
    _say(f"demo: report written to {path} (total {time.perf_counter() - t0:.1f}s)")
    return 0


PRECEDENCE = ("gpu_fault", "interconnect_degradation", "preemption", "admission_quota", "admission_topology",
              "gang_assembly", "topology_misplacement", "unexplained_slowdown")


def _score(rows: list[dict[str, Any]], truth: dict[str, Any]) -> str:
    """How many injected incidents the diagnosis named correctly (primary class per job, latest run)."""
    found: dict[tuple[str, str], str] = {}
    for r in rows:
        key = (r["namespace"], r["job"])
        cls = r["root_cause"]
        if cls in PRECEDENCE and (key not in found or PRECEDENCE.index(cls) < PRECEDENCE.index(found[key])):
            found[key] = cls
    latest: dict[tuple[str, str], str] = {}
    for j in truth["jobs"]:
        latest[(j["namespace"], j["job"])] = j["root_cause"]
    injected = {k: v for k, v in latest.items() if v != "healthy"}
    hits = sorted(k for k, v in injected.items() if found.get(k) == v)
    misses = [f"{ns}/{job}: injected {v}, diagnosed {found.get((ns, job), 'nothing')}"
              for (ns, job), v in sorted(injected.items()) if found.get((ns, job)) != v]
    false_alarms = [f"{ns}/{job}: healthy, diagnosed {c}" for (ns, job), c in sorted(found.items())
                    if latest.get((ns, job)) == "healthy"]
    lines = [f"demo: {len(hits)} of {len(injected)} injected incidents diagnosed with the injected class; "
             f"{len(false_alarms)} healthy jobs flagged"]
    lines += [f"  missed  {m}" for m in misses] + [f"  flagged {f}" for f in false_alarms]
    return "\n".join(lines)
