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
from gangscope.rootcauses import DIP_CLASSES, FAULTS, WAITING_CLASSES

DEMO_NODES = 20  # mixed: one job of every class
DEMO_HOURS = 1.0
DEMO_INTERVAL = 30.0  # dcgm-exporter's default collect interval: halves the demo's replay volume
LIVE_SPEED = 20.0  # the simulated hour in 3 minutes
COMPACTION_S = 600.0  # gangscope's default schedule.compaction period (simulated seconds in the live demo)


def register(groups, common) -> None:
    p = groups["root"].add_parser(
        "demo", parents=[common], help="whole chain on this machine: simulator, broker, pipeline, models, report",
        description="Run gangscope end to end with nothing but the package: start an embedded Kafka broker, "
        "simulate a 20-node GPU cluster for an hour with faults injected (the 'mixed' scenario), replay it through "
        "the pipeline into the lake, build the models, print the diagnosis table, compare it with the injected "
        "truth and write an HTML report.",
    )
    p.add_argument("--out", metavar="DIR", default="gangscope-demo",
                   help="where the scenario, the lake (unless --data) and the report go (default ./gangscope-demo)")
    p.add_argument("--seed", type=int, default=1, help="simulator seed (default 1)")
    p.add_argument("--live", action="store_true",
                   help="serve the scenario live (`gangscope sandbox`) and run `gangscope run` against it, printing "
                   "each finding as it is published with its time to verdict")
    p.add_argument("--speed", type=float, default=LIVE_SPEED,
                   help=f"with --live: simulated seconds per real second (default {LIVE_SPEED:g})")
    p.set_defaults(handler=run)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _stop(what: str, issue: int, after: str) -> int:
    _say(f"demo: {what} not built yet (issue #{issue}): stopping after {after}")
    return 0


def run(settings: Settings, args: Any) -> int:
    if getattr(args, "live", False):
        return live(settings, args)
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
        import reports.diagnose  # noqa: F401 - a stage not built yet is named, not a traceback
    except ImportError:
        return _stop("diagnose", 6, "building the models")
    return _summary(settings, json.loads((g.directory / "truth.json").read_text()), out, t0)


def _summary(settings: Settings, truth: dict[str, Any], out: Path, t0: float) -> int:
    """The diagnosis table, the score against the truth, and the report: how every demo ends."""
    from pipeline import lake
    from reports.diagnose import findings, to_table

    con = lake.connect(settings, read_only=True, create=False)
    try:
        rows = findings(con, include_healthy=False)
    finally:
        con.close()
    _say("")
    _say(to_table(rows))
    _say("")
    _say(_score(rows, truth))
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


def _score(rows: list[dict[str, Any]], truth: dict[str, Any]) -> str:
    """How many injected incidents the diagnosis named correctly (primary class per job, latest run)."""
    found: dict[tuple[str, str], str] = {}
    for r in rows:
        key = (r["namespace"], r["job"])
        cls = r["root_cause"]
        if cls in FAULTS and (key not in found or FAULTS.index(cls) < FAULTS.index(found[key])):
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


def verdict_s(change: dict[str, Any], truth: dict[str, Any]) -> float | None:
    """Simulated seconds from the incident's onset to this change's publication (None: not an injected one).

    Onset is the injected condition's start (truth.json); for the classes that hold only after a wait, the
    moment the wait crossed its threshold, which is the finding's own ``started_at``; for a throughput dip,
    the low sample that made the run long enough (``evidence.throughput.held_at``). The condition cannot be
    known before then, so the time before it is the condition's, not gangscope's.
    """
    from datetime import datetime

    def t(s: str) -> float:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

    runs = [j for j in truth["jobs"] if (j["namespace"], j["job"], j["root_cause"]) ==
            (change["namespace"], change["job"], change["root_cause"]) and j["onset"]]
    if not runs:
        return None
    onset = t(runs[-1]["onset"])
    if change["root_cause"] in WAITING_CLASSES and change.get("started_at"):
        onset = max(onset, t(change["started_at"]))
    held = ((change.get("evidence") or {}).get("throughput") or {}).get("held_at")
    if change["root_cause"] in DIP_CLASSES and held:
        onset = max(onset, t(held))
    return t(change["changed_at"]) - onset


def play_live(settings: Settings, out: Path, on_change: Any, *, scenario: str = "mixed", speed: float = LIVE_SPEED,
              seed: int = 1, data: Path | None = None, build_s: float = 2.0) -> tuple[Any, Path]:
    """Serve ``scenario`` in a sandbox and run `gangscope run` against it until the scenario is over and two
    more builds ran; ``on_change(change, sandbox)`` gets each finding change as the topic delivers it.
    Returns (the stopped sandbox, the data directory)."""
    import logging
    import threading

    from collectors.simulate.sandbox import Sandbox
    from gangscope.app.findings_topic import topic
    from gangscope.app.service import run_service
    from gangscope.config import load
    from gangscope.transport import kafka as pkafka
    from gangscope.transport.broker import bootstrap_servers

    sb = Sandbox(out / "sandbox", scenario, seed=seed, nodes=DEMO_NODES, hours=DEMO_HOURS, interval=DEMO_INTERVAL,
                 speed=speed).start()
    data = data or out / "data"
    stop = threading.Event()
    scrape_log = logging.getLogger("collectors.metrics.scrape")
    try:
        on_change(None, sb)
        with bootstrap_servers(settings) as bootstrap:
            live_settings = load(sb.config, {
                "data": str(data), "cluster": settings.cluster,
                "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": settings.kafka.topic_prefix},
                # Compaction at gangscope's default period on the sandbox clock: left off, every landing and
                # incremental build leaves files behind, and builds slow down with the file count.
                "schedule": {"models_build": f"interval:{build_s:g}", "report_hourly": "off", "report_daily": "off",
                             "compaction": f"interval:{COMPACTION_S / speed:g}", "retention": "off"},
                "server": {"listen": "127.0.0.1:0"},
                "findings": {"alertmanager_url": settings.findings.alertmanager_url},
            }, environ={})
            service = threading.Thread(target=run_service, args=(live_settings, stop), name="demo-run", daemon=True)
            service.start()
            consumer = pkafka.consumer(live_settings, bootstrap, group_id=None, auto_offset_reset="earliest")
            consumer.subscribe([topic(live_settings)])
            state_file = data / "findings-state.json"
            final_builds, mark = 0, None
            try:
                while service.is_alive() and final_builds < 3:
                    for batch in consumer.poll(timeout_ms=500).values():
                        for m in batch:
                            on_change(json.loads(m.value), sb)
                    if sb.finished:  # two builds over the whole scenario, then stop
                        # Its exporters answer 503 from now on (their data ended): expected, not news to print.
                        scrape_log.setLevel(logging.ERROR)
                        stamp = state_file.stat().st_mtime if state_file.exists() else None
                        if stamp != mark:
                            final_builds, mark = final_builds + 1, stamp
                for batch in consumer.poll(timeout_ms=1000).values():
                    for m in batch:
                        on_change(json.loads(m.value), sb)
            finally:
                scrape_log.setLevel(logging.NOTSET)
                consumer.close()
                stop.set()
                service.join(180)
    finally:
        sb.stop()
    return sb, data


def live(settings: Settings, args: Any) -> int:
    """`demo --live`: :func:`play_live` on ``mixed``, printing each change, then the summary of `demo`."""
    import logging

    out = Path(args.out)
    t0 = time.perf_counter()
    truth: dict[str, Any] = {}
    if settings.log.level.upper() == "INFO":  # the service's progress lines would bury the findings
        logging.getLogger().setLevel(logging.WARNING)

    def show(change: dict[str, Any] | None, sb: Any) -> None:
        if change is None:
            truth.update(json.loads((sb.scenario_dir / "truth.json").read_text()))
            _say(f"demo: sandbox serving {DEMO_NODES} nodes x {DEMO_HOURS:g} h at {args.speed:g}x on {sb.api.url} "
                 f"({len(sb.exporters)} exporters; kubectl --kubeconfig {sb.kubeconfig}) "
                 f"[{time.perf_counter() - t0:.1f}s]")
        else:
            _say(_change_line(change, sb, truth))

    _, data = play_live(settings, out, show, speed=args.speed, seed=args.seed,
                        data=settings.data if getattr(args, "data", None) is not None else None)
    return _summary(dataclasses.replace(settings, data=data), truth, out, t0)


_announced: set[tuple[str, str, str]] = set()  # incidents already printed once (their first publication)


def _change_line(change: dict[str, Any], sb: Any, truth: dict[str, Any]) -> str:
    from datetime import datetime

    at = datetime.fromisoformat(change["changed_at"].replace("Z", "+00:00"))
    minute = (at - sb.sim_origin).total_seconds() / 60
    key = (change["namespace"], change["job"], change["root_cause"])
    first = key not in _announced
    _announced.add(key)
    v = verdict_s(change, truth) if first else None
    tail = f"  time to verdict {v:.0f} s" if v is not None else ("  (not injected)" if first else "")
    return (f"  +{minute:4.1f} min  {change['state']:<8} {change['root_cause']:<25} "
            f"{change['namespace']}/{change['job']}{tail}  {change['summary']}")
