"""``gangscope evaluate``: score the classifier against the simulator's ground truth.

Each run: ``collectors.simulate.generate`` -> land the files into a fresh lake -> ``models.build`` ->
``reports.diagnose.findings(include_healthy=True)``; a job's predicted class is its primary finding (precedence of
CONTRACT section 4), and its other findings whose class its truth does not name are counted apart (extra findings:
one incident reported twice changes no primary class). Files land straight through ``pipeline.land.land`` (the
decoding and landing code the Kafka consumer runs, without a broker, so dozens of runs fit in minutes);
``--via-kafka`` replays them through an embedded broker instead. Scenarios run over several seeds and sizes,
variants (first contact, slow pulls, Kubernetes 1.35 / 1.37 shapes, job kinds) over fewer, since each repeats a
scenario's faults.
"""

from __future__ import annotations

import fnmatch
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gangscope import config
from gangscope.errors import UserError
from gangscope.rootcauses import ROOT_CAUSES as CLASSES


@dataclass(frozen=True)
class Outcome:
    """One job of one run: its true class, its predicted (primary) class, whether any finding is critical, and the
    classes of its findings beyond the primary one that its truth does not name."""

    run: str
    job: str
    truth: str
    predicted: str
    critical: bool = False
    extra: tuple[str, ...] = ()


@dataclass
class Scores:
    """Per-class precision/recall/F1 and support, macro F1 over the classes present, and the error counts."""

    per_class: dict[str, tuple[float, float, float, int]] = field(default_factory=dict)
    macro_f1: float = 0.0
    healthy_flagged: int = 0
    phantom_jobs: int = 0
    wrong: int = 0
    stuck_called_healthy: int = 0  # jobs whose truth is a fault but whose primary finding is healthy
    extra_findings: int = 0  # findings beyond a job's primary one whose class its truth does not name


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


def _replay_kafka(settings: config.Settings, k8s: list[str], metrics: list[str]) -> None:
    from gangscope.app.replay import replay
    from gangscope.transport.broker import bootstrap_servers

    with bootstrap_servers(settings) as bootstrap:
        settings.kafka.bootstrap_servers = bootstrap
        replay(settings, k8s, metrics, land=True)


def run_scenario(name: str, seed: int, nodes: int, work: Path, via_kafka: bool = False
                 ) -> tuple[list[tuple[str, str, str, bool]], list[str], dict[str, list[str]]]:
    """(job, true class, predicted class, any critical finding) for every job of one generated scenario, the
    jobs gangscope reported that the truth does not have (phantoms), and each job's extra findings (``extras``)."""
    from collectors.simulate import generate
    from pipeline import lake, models
    from reports import diagnose

    g = generate(name, work / f"{name}-{seed}-{nodes}", seed=seed, nodes=nodes)
    settings = config.load(overrides={"data": str(g.directory / "data")}, environ={})
    k8s, prom = [str(g.directory / "k8s.jsonl")], [str(g.directory / "metrics.prom")]
    (_replay_kafka if via_kafka else land_files)(settings, k8s, prom)
    con = lake.connect(settings)
    try:
        models.build(settings, con)
        rows = diagnose.findings(con, include_healthy=True)
    finally:
        con.close()
    truth = json.loads((g.directory / "truth.json").read_text())
    return score(truth, rows), phantoms(truth, rows), extras(truth, rows)


def phantoms(truth: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Jobs gangscope reports that the truth does not have (e.g. a PodGroup taken for a job of its own), and, in the
    job-kind variants (``@ray``, ``@trainjob``, ...), a job reported under another kind than the one submitted."""
    from collectors.simulate.kinds import KINDS

    known = {(j["namespace"], j["job"]): j.get("job_kind") for j in truth["jobs"]}
    out = {f"{r['namespace']}/{r['job']}" for r in rows if (r["namespace"], r["job"]) not in known}
    out |= {f"{r['namespace']}/{r['job']} (as {r['job_kind']}, submitted as {known[(r['namespace'], r['job'])]})"
            for r in rows if known.get((r["namespace"], r["job"])) in KINDS.values()
            and r["job_kind"] != known[(r["namespace"], r["job"])]}
    return sorted(out)


def primary(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """Each job's primary class: the first in precedence order among its findings."""
    best: dict[tuple[str, str], str] = {}
    for r in rows:
        key = (r["namespace"], r["job"])
        if key not in best or CLASSES.index(r["root_cause"]) < CLASSES.index(best[key]):
            best[key] = r["root_cause"]
    return best


def extras(truth: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per job of the truth ("ns/job"), the classes of its findings beyond its primary one that the truth does not
    name for it (any of its runs' classes: a re-run's own fault is called for), in precedence order. The primary is
    scored as the predicted class; a second finding for the same incident is counted here, since it changes no
    primary class. Jobs the truth does not have are phantoms, not counted here."""
    expected: dict[tuple[str, str], set[str]] = {}
    for j in truth["jobs"]:
        expected.setdefault((j["namespace"], j["job"]), set()).add(j["root_cause"])
    found: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        key = (r["namespace"], r["job"])
        if key in expected and r["root_cause"] != "healthy":
            found.setdefault(key, []).append(r["root_cause"])
    out: dict[str, list[str]] = {}
    for key, classes in found.items():
        extra = [c for c in sorted(classes, key=CLASSES.index)[1:] if c not in expected[key]]
        if extra:
            out[f"{key[0]}/{key[1]}"] = extra
    return out


def score(truth: dict[str, Any], rows: list[dict[str, Any]]) -> list[tuple[str, str, str, bool]]:
    """(job, true class, predicted class or "missing", any critical finding) per job of the truth."""
    pred = primary(rows)
    critical = {(r["namespace"], r["job"]) for r in rows if r["severity"] == "critical"}
    # A re-run of a job name is a second truth entry for the same job: the job's class is the last run's.
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for j in truth["jobs"]:
        latest[(j["namespace"], j["job"])] = j
    return [(f"{ns}/{name}", j["root_cause"], pred.get((ns, name), "missing"), (ns, name) in critical)
            for (ns, name), j in latest.items()]


def scores(outcomes: Iterable[Outcome], phantom_jobs: int = 0) -> Scores:
    """Precision/recall/F1 per class (classes with neither support nor predictions are left out of the macro F1);
    ``healthy_flagged``: jobs healthy in truth with a non-healthy primary finding; ``stuck_called_healthy``: jobs
    whose truth is a fault but whose primary finding is healthy (healthy is earned: CONTRACT section 4);
    ``extra_findings``: findings beyond each job's primary one that its truth does not call for."""
    out = list(outcomes)
    m: Counter[tuple[str, str]] = Counter((o.truth, o.predicted) for o in out)
    s = Scores(phantom_jobs=phantom_jobs, wrong=sum(o.truth != o.predicted for o in out),
               healthy_flagged=sum(o.truth == "healthy" and o.predicted not in ("healthy", "missing") for o in out),
               stuck_called_healthy=sum(o.truth != "healthy" and o.predicted == "healthy" for o in out),
               extra_findings=sum(len(o.extra) for o in out))
    for c in CLASSES:
        tp = m[(c, c)]
        fp = sum(v for (t, p), v in m.items() if p == c and t != c)
        support = sum(v for (t, _), v in m.items() if t == c)
        if support == 0 and fp == 0:
            continue
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / support if support else 0.0
        s.per_class[c] = (prec, rec, 2 * prec * rec / (prec + rec) if prec + rec else 0.0, support)
    f1s = [v[2] for v in s.per_class.values()]
    s.macro_f1 = sum(f1s) / len(f1s) if f1s else 0.0
    return s


def family(name: str) -> str:
    """Which API shapes a run used: the Kubernetes variant suffix (``k8s-1.37``, ...) or job kind (``ray``, ...),
    else ``1.36`` (the base)."""
    from collectors.simulate.kinds import KINDS

    suffix = name.split("/")[0].partition("@")[2]
    return suffix if suffix.startswith("k8s-") or suffix in KINDS else "1.36"


def render(outcomes: list[Outcome], s: Scores, runs: int) -> str:
    labels = [*CLASSES, "missing"]
    m: Counter[tuple[str, str]] = Counter((o.truth, o.predicted) for o in outcomes)
    lines = ["confusion matrix (rows: truth, columns: predicted)",
             " " * 26 + " ".join(f"{c[:10]:>10}" for c in labels)]
    lines += [f"{t:>26}" + " ".join(f"{m.get((t, p), 0):>10}" for p in labels) for t in CLASSES]
    lines += ["", f"{'class':>26} {'precision':>10} {'recall':>10} {'f1':>10} {'support':>8}"]
    lines += [f"{c:>26} {p:>10.3f} {r:>10.3f} {f:>10.3f} {n:>8}" for c, (p, r, f, n) in s.per_class.items()]
    families = sorted({family(o.run) for o in outcomes})
    if len(families) > 1:  # the same faults in other API shapes must score the same
        lines += ["", f"{'shapes':>26} {'macro_f1':>10} {'wrong':>10} {'jobs':>10}"]
        for fam in families:
            sub = [o for o in outcomes if family(o.run) == fam]
            fs = scores(sub)
            lines.append(f"{fam:>26} {fs.macro_f1:>10.3f} {fs.wrong:>10} {len(sub):>10}")
    wrong = [o for o in outcomes if o.truth != o.predicted]
    if wrong:
        lines += ["", "misclassified:"]
        lines += [f"  {o.run}: {o.job}: truth={o.truth} predicted={o.predicted}" for o in wrong[:40]]
    doubled = [o for o in outcomes if o.extra]
    if doubled:
        lines += ["", "extra findings (beyond the primary, not in the truth):"]
        lines += [f"  {o.run}: {o.job}: truth={o.truth} predicted={o.predicted} extra={','.join(o.extra)}"
                  for o in doubled[:40]]
    lines += [f"runs: {runs}",
              f"evaluate: macro_f1={s.macro_f1:.3f} healthy_flagged={s.healthy_flagged} phantom_jobs={s.phantom_jobs} "
              f"stuck_called_healthy={s.stuck_called_healthy} extra_findings={s.extra_findings}"]
    return "\n".join(lines)


def select(patterns: str) -> list[str]:
    """Scenario and variant names matching comma-separated names or globs (``all``: every one)."""
    from collectors.simulate.scenarios import SCENARIOS
    from collectors.simulate.variants import VARIANTS

    every = [*SCENARIOS, *VARIANTS]
    if patterns == "all":
        return every
    out: list[str] = []
    for pat in patterns.split(","):
        hits = [n for n in every if fnmatch.fnmatchcase(n, pat)]
        if not hits:
            raise UserError(f"no scenario or variant matches {pat!r} (see `gangscope simulate --list`)")
        out += [n for n in hits if n not in out]
    return out


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"{flag} takes comma-separated integers, got {text!r}") from None


def evaluate(names: list[str], seeds: list[int], nodes: list[int], variant_seeds: list[int],
             variant_nodes: list[int], work: Path, via_kafka: bool = False,
             progress: Callable[[str], None] = print) -> tuple[list[Outcome], Scores, int]:
    """Run every name over its seeds and sizes; the outcomes, their scores and the number of runs."""
    from collectors.simulate.variants import VARIANTS

    outcomes: list[Outcome] = []
    phantom_jobs = runs = 0
    t0 = time.perf_counter()
    for name in names:
        variant = name in VARIANTS
        for seed in variant_seeds if variant else seeds:
            for n in variant_nodes if variant else nodes:
                tag = f"{name}/seed={seed}/nodes={n}"
                try:
                    res, ghosts, more = run_scenario(name, seed, n, work, via_kafka)
                except ValueError as e:  # the simulator cannot lay this scenario out on n nodes
                    progress(f"{tag}: skipped ({e})")
                    continue
                runs += 1
                outcomes += [Outcome(tag, job, t, p, crit, tuple(more.get(job, ()))) for job, t, p, crit in res]
                phantom_jobs += len(ghosts)
                flagged = [job for job, t, p, _ in res if t == "healthy" and p not in ("healthy", "missing")]
                extra = "".join(f" flagged={j}" for j in flagged) + "".join(f" phantom={j}" for j in ghosts) \
                    + "".join(f" extra={j}:{','.join(c)}" for j, c in more.items())
                bad = sum(1 for _, t, p, _ in res if t != p)
                progress(f"{tag}: jobs={len(res)} wrong={bad}{extra} ({time.perf_counter() - t0:.0f}s)")
    return outcomes, scores(outcomes, phantom_jobs), runs


def register(groups: dict[str, Any], common: Any) -> None:
    p = groups["root"].add_parser(
        "evaluate", parents=[common], help="score the classifier against simulated faults with known root causes",
        description="Generate simulator scenarios and variants (first contact, slow pulls, Kubernetes 1.35 / 1.37 + "
        "Kueue v0.19 shapes, the job kinds @ray @trainjob @pytorchjob @mpijob @lws @podgroup), land each into a fresh "
        "lake, build the models and compare every job's primary finding with the ground truth (and, for the job "
        "kinds, its job_kind). Prints a confusion matrix, per-class precision/recall, macro F1 per API shape, and "
        "ends `evaluate: macro_f1=<f> healthy_flagged=<k> phantom_jobs=<p> stuck_called_healthy=<s> "
        "extra_findings=<x>` (<s>: jobs whose injected fault was called healthy; <x>: findings beyond a job's primary "
        "one whose class its truth does not name, e.g. one incident reported twice). Leaves --data alone: each run has "
        "its own lake (kept with --keep).")
    p.add_argument("--scenarios", default="all", help="comma-separated scenario / variant names or globs, e.g. "
                   "'gang_assembly,*@k8s-1.37' (default: every scenario and variant)")
    p.add_argument("--seeds", default="1,2,3", help="seeds of the scenarios (default 1,2,3)")
    p.add_argument("--nodes", default="16,32", help="cluster sizes of the scenarios (default 16,32)")
    p.add_argument("--variant-seeds", default="1", help="seeds of the variants (default 1)")
    p.add_argument("--variant-nodes", default="16", help="cluster sizes of the variants (default 16)")
    p.add_argument("--via-kafka", action="store_true", help="replay through an embedded Kafka broker")
    p.add_argument("--keep", metavar="DIR", help="keep generated files and lakes in DIR")
    p.set_defaults(handler=run)


def run(settings: config.Settings, args: Any) -> int:
    names = select(args.scenarios)
    seeds, nodes = _ints(args.seeds, "--seeds"), _ints(args.nodes, "--nodes")
    vseeds, vnodes = _ints(args.variant_seeds, "--variant-seeds"), _ints(args.variant_nodes, "--variant-nodes")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        outcomes, s, runs = evaluate(names, seeds, nodes, vseeds, vnodes, work, args.via_kafka,
                                     progress=lambda line: print(line, flush=True))
    print(render(outcomes, s, runs))
    return 0
