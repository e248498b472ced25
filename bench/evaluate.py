"""Scores the classifier against the simulator's ground truth: every scenario over several seeds and
cluster sizes, and every first-contact / slow-pull variant (``collectors/simulate/variants.py``) over the first
seed and size (``--variant-seeds``, ``--variant-nodes``); prints a confusion matrix, per-class
precision/recall and macro-F1, and ends with
``evaluate: macro_f1=<f> healthy_flagged=<k> phantom_jobs=<p>``: ``healthy_flagged`` counts
jobs that are healthy in truth but have any finding, ``phantom_jobs`` jobs gangscope reports that are not in
the truth (e.g. a PodGroup taken for a job of its own).

Each run: ``collectors.simulate.generate`` -> land the files into a fresh lake -> ``models.build`` ->
``reports.diagnose.findings(include_healthy=True)``; a job's predicted class is its primary finding
(precedence of CONTRACT section 4). By default the files are landed straight through
``pipeline.land.land`` (the same decoding and landing code the Kafka consumer runs, without a broker,
so dozens of runs fit in minutes); ``--via-kafka`` replays them through an embedded broker instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangscope import config  # noqa: E402

CLASSES = ("gpu_fault", "interconnect_degradation", "preemption", "admission_quota", "admission_topology",
           "gang_assembly", "topology_misplacement", "unexplained_slowdown", "healthy")


def land_files(settings: config.Settings, k8s: list[str], metrics: list[str], batch: int = 2000) -> None:
    """Land replay files into the lake without Kafka: records in timestamp order, fake offsets per topic."""
    from collectors.replay import merged
    from gangscope.records import K8sEvent, topic_names
    from pipeline import lake
    from pipeline.land import land

    topics = topic_names(settings.kafka.topic_prefix)
    offsets: Counter[str] = Counter()
    con = lake.connect(settings)
    buf: list[tuple[str, int, int, bytes]] = []
    try:
        for rec in merged(settings, k8s, metrics):
            topic = topics["k8s"] if isinstance(rec, K8sEvent) else topics["scrape"]
            buf.append((topic, 0, offsets[topic], rec.to_bytes()))
            offsets[topic] += 1
            if len(buf) >= batch:
                land(con, buf)
                buf = []
        land(con, buf)
    finally:
        con.close()


def replay_kafka(settings: config.Settings, k8s: list[str], metrics: list[str]) -> None:
    from gangscope.app.replay import replay
    from gangscope.transport.broker import bootstrap_servers

    with bootstrap_servers(settings) as bootstrap:
        settings.kafka.bootstrap_servers = bootstrap
        replay(settings, k8s, metrics, land=True)


def run_scenario(name: str, seed: int, nodes: int, work: Path,
                 via_kafka: bool = False) -> tuple[list[tuple[str, str, str, bool]], list[str]]:
    """(job, true class, predicted class, any critical finding) for every job of one generated scenario, and the
    jobs gangscope reported that the truth does not have (phantoms)."""
    from collectors.simulate import generate
    from pipeline import lake, models
    from reports import diagnose

    g = generate(name, work / f"{name}-{seed}-{nodes}", seed=seed, nodes=nodes)
    settings = config.load(overrides={"data": str(g.directory / "data")}, environ={})
    k8s, prom = [str(g.directory / "k8s.jsonl")], [str(g.directory / "metrics.prom")]
    (replay_kafka if via_kafka else land_files)(settings, k8s, prom)
    con = lake.connect(settings)
    try:
        models.build(settings, con)
        rows = diagnose.findings(con, include_healthy=True)
    finally:
        con.close()
    truth = json.loads((g.directory / "truth.json").read_text())
    return score(truth, rows), phantoms(truth, rows)


def phantoms(truth: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    known = {(j["namespace"], j["job"]) for j in truth["jobs"]}
    return sorted({f"{r['namespace']}/{r['job']}" for r in rows if (r["namespace"], r["job"]) not in known})


def primary(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """Each job's primary class: the first in precedence order among its findings."""
    best: dict[tuple[str, str], str] = {}
    for r in rows:
        key = (r["namespace"], r["job"])
        if key not in best or CLASSES.index(r["root_cause"]) < CLASSES.index(best[key]):
            best[key] = r["root_cause"]
    return best


def score(truth: dict[str, Any], rows: list[dict[str, Any]]) -> list[tuple[str, str, str, bool]]:
    pred = primary(rows)
    critical = {(r["namespace"], r["job"]) for r in rows if r["severity"] == "critical"}
    out = []
    # A re-run of a job name is a second truth entry for the same job: the job's class is the last run's.
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for j in truth["jobs"]:
        latest[(j["namespace"], j["job"])] = j
    for (ns, name), j in latest.items():
        out.append((f"{ns}/{name}", j["root_cause"], pred.get((ns, name), "missing"), (ns, name) in critical))
    return out


def report(results: list[tuple[str, str, str, str]]) -> tuple[float, int]:
    labels = list(CLASSES) + ["missing"]
    m: dict[tuple[str, str], int] = Counter((t, p) for _, _, t, p in results)
    short = {c: c[:10] for c in labels}
    print("confusion matrix (rows: truth, columns: predicted)")
    print(" " * 26 + " ".join(f"{short[c]:>10}" for c in labels))
    for t in CLASSES:
        print(f"{t:>26}" + " ".join(f"{m.get((t, p), 0):>10}" for p in labels))
    f1s = []
    print(f"\n{'class':>26} {'precision':>10} {'recall':>10} {'f1':>10} {'support':>8}")
    for c in CLASSES:
        tp = m.get((c, c), 0)
        fp = sum(v for (t, p), v in m.items() if p == c and t != c)
        fn = sum(v for (t, p), v in m.items() if t == c and p != c)
        support = tp + fn
        if support == 0 and fp == 0:
            continue
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / support if support else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        f1s.append(f1)
        print(f"{c:>26} {prec:>10.3f} {rec:>10.3f} {f1:>10.3f} {support:>8}")
    wrong = [r for r in results if r[2] != r[3]]
    if wrong:
        print("\nmisclassified:")
        for scen, job, t, p in wrong[:40]:
            print(f"  {scen}: {job}: truth={t} predicted={p}")
    return (sum(f1s) / len(f1s) if f1s else 0.0), len(wrong)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="all",
                    help="comma-separated scenario or variant names (default: every scenario and variant)")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    ap.add_argument("--nodes", default="16,32", help="comma-separated cluster sizes (default 16,32)")
    ap.add_argument("--variant-seeds", default="1", help="seeds for the variants (default 1)")
    ap.add_argument("--variant-nodes", default="16", help="cluster sizes for the variants (default 16)")
    ap.add_argument("--via-kafka", action="store_true", help="replay through an embedded Kafka broker")
    ap.add_argument("--keep", metavar="DIR", help="keep generated files and lakes in DIR")
    args = ap.parse_args(argv)
    from collectors.simulate.scenarios import SCENARIOS
    from collectors.simulate.variants import VARIANTS

    names = list(SCENARIOS) + list(VARIANTS) if args.scenarios == "all" else args.scenarios.split(",")
    results: list[tuple[str, str, str, str]] = []
    healthy_flagged = 0
    phantom_jobs = 0
    runs = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        for name in names:
            variant = name in VARIANTS
            seeds = [int(s) for s in (args.variant_seeds if variant else args.seeds).split(",")]
            sizes = [int(n) for n in (args.variant_nodes if variant else args.nodes).split(",")]
            for seed in seeds:
                for n in sizes:
                    tag = f"{name}/seed={seed}/nodes={n}"
                    try:
                        res, ghosts = run_scenario(name, seed, n, work, args.via_kafka)
                    except ValueError as e:  # the simulator cannot lay this scenario out on n nodes
                        print(f"{tag}: skipped ({e})", flush=True)
                        continue
                    runs += 1
                    results += [(tag, job, t, p) for job, t, p, _ in res]
                    bad = sum(1 for _, t, p, _ in res if t != p)
                    flagged = [job for job, t, p, _ in res if t == "healthy" and p not in ("healthy", "missing")]
                    healthy_flagged += len(flagged)
                    phantom_jobs += len(ghosts)
                    extra = "".join(f" flagged={j}" for j in flagged) + "".join(f" phantom={j}" for j in ghosts)
                    print(f"{tag}: jobs={len(res)} wrong={bad}{extra} ({time.perf_counter() - t0:.0f}s)", flush=True)
    macro_f1, _ = report(results)
    print(f"runs: {runs}")
    print(f"evaluate: macro_f1={macro_f1:.3f} healthy_flagged={healthy_flagged} phantom_jobs={phantom_jobs}")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
