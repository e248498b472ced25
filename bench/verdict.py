"""Time to verdict: every root-cause class played live in the sandbox, measured from onset to publication.

Runs `gangscope demo --live`'s loop (sandbox + `gangscope run`, embedded broker) on the ``mixed`` scenario,
which holds every class, or on each class's own scenario (``--scenarios all``), and for each injected
incident takes its first change on the findings topic (``opened``, or ``resolved`` for one first seen
already over): simulated seconds from when its condition became true to its ``changed_at``: the onset
(truth.json); for the waiting classes, when the wait crossed its threshold; for the throughput dips, the
third low sample (``gangscope.app.demo.verdict_s``). Ends with
``verdict: classes=<n> p50_s=<s> p95_s=<s> bound_s=<2 x scrape interval + build interval>`` (simulated
seconds; the build interval is the real build schedule times the speed). Figures depend on the machine: a
build that takes B real seconds costs B x speed simulated seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangscope import config  # noqa: E402
from gangscope.app.demo import DEMO_INTERVAL, play_live, verdict_s  # noqa: E402
from gangscope.rootcauses import FAULTS as CLASSES  # noqa: E402


def measure(scenario: str, speed: float, build_s: float, work: Path) -> dict[tuple[str, str, str], float]:
    """(namespace, job, class) -> verdict seconds for the injected incidents published as opened."""
    truth: dict[str, Any] = {}
    out: dict[tuple[str, str, str], float] = {}

    def on_change(change: dict[str, Any] | None, sb: Any) -> None:
        import json

        if change is None:
            truth.update(json.loads((sb.scenario_dir / "truth.json").read_text()))
            return
        # The first publication of the incident, whatever its state: a dip first seen already over is
        # published once, as resolved, and that is when people hear of it.
        v = verdict_s(change, truth)
        if v is not None:
            out.setdefault((change["namespace"], change["job"], change["root_cause"]), v)

    settings = config.load(overrides={"data": str(work / "data")}, environ={})
    play_live(settings, work, on_change, scenario=scenario, speed=speed, build_s=build_s)
    missed = sorted({(j["namespace"], j["job"], j["root_cause"]) for j in truth.get("jobs", [])
                     if j["root_cause"] != "healthy"} - set(out))
    for m in missed:
        print(f"  {scenario}: no verdict for {m[0]}/{m[1]} {m[2]}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="mixed", help="mixed (every class in one run) or all (one per class)")
    ap.add_argument("--speed", type=float, default=10.0, help="sandbox speed (default 10)")
    ap.add_argument("--build-s", type=float, default=3.0, help="model build schedule, real seconds (default 3)")
    args = ap.parse_args()
    names = CLASSES if args.scenarios == "all" else (args.scenarios,)
    verdicts: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    for name in names:
        with tempfile.TemporaryDirectory(prefix="gangscope-verdict-") as d:
            for (ns, job, cls), v in sorted(measure(name, args.speed, args.build_s, Path(d)).items()):
                print(f"  {name}: {cls:<25} {ns}/{job}: {v:.0f} s", flush=True)
                verdicts.setdefault(cls, []).append(v)
    per_class = [max(v) for v in verdicts.values()]  # the slowest incident of each class
    everything = sorted(v for vs in verdicts.values() for v in vs)
    p95 = everything[min(len(everything) - 1, int(round(0.95 * (len(everything) - 1))))] if everything else 0.0
    bound = 2 * DEMO_INTERVAL + args.build_s * args.speed
    print(f"wall {time.perf_counter() - t0:.0f} s; slowest per class: "
          + ", ".join(f"{c}={max(v):.0f}" for c, v in sorted(verdicts.items())), flush=True)
    print(f"verdict: classes={len(per_class)} p50_s={statistics.median(everything) if everything else 0:.0f} "
          f"p95_s={p95:.0f} bound_s={bound:.0f}")


if __name__ == "__main__":
    main()
