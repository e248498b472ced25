"""Benchmark: does the live page slow the pipeline or the builds? Landing and build times with the page open and
loaded every second, against `gangscope run` without the page (``server.page: false``), in the same run.

Each run is the sandbox (``mixed``, its first ``--minutes`` at ``--speed``) with `gangscope run` (embedded broker,
builds every 3 s as the live tests run them). Without: no page at all (no reader thread). With: every second a
client loads the overview (``/``), one job's page (cycling through the scenario's jobs) and one poll
(``?live=1``), as a browser refreshing both would; ``--browser`` uses a real headless Chromium tab that reloads the
overview and a job page every second instead (its own CPU then counts against the page). At the end of each run
its own ``/metrics`` give the mean landing time (``gangscope_batch_seconds``: decode and commit of one batch) and
the mean build time (``gangscope_model_build_seconds``). Runs alternate (without, with, with, without, ...) so a
machine that gets busier over the bench does not favour one side. Ends with

``page: runs=<n> without_batch_ms=<ms> with_batch_ms=<ms> batch_ratio=<r> without_build_s=<s> with_build_s=<s>
build_ratio=<r> requests=<n> page_p50_ms=<ms> page_p95_ms=<ms>``

(ratios: with / without; 1.0 is no cost; p50 and p95 are nearest-rank: the ceil(q * n)-th smallest request time).
The machine's load matters: figures are from one machine in one run. A run that landed no records, finished no
model build or (with the page) answered no page request is refused at once, with the end of its log, and the bench
exits non-zero: its means would be zeros and its ratios meaningless.

    .venv/bin/python bench/page.py [--rounds 1] [--minutes 30] [--speed 20] [--browser]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from collectors.simulate.sandbox import Sandbox  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> float:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        r.read()
    return time.perf_counter() - t


def _http_load(base: str, jobs: list[str], stop: threading.Event, took: list[float]) -> None:
    i = 0
    while not stop.is_set():
        t = time.monotonic()
        for path in ("/", f"/jobs/{jobs[i % len(jobs)]}", "/?live=1&v=x"):
            with contextlib.suppress(OSError):
                took.append(_get(base + path))
        i += 1
        stop.wait(max(0.0, 1.0 - (time.monotonic() - t)))


def _browser_load(base: str, jobs: list[str], stop: threading.Event, took: list[float], work: Path) -> None:
    from tests.servers import chromium

    b = chromium.Chromium(work / "chromium")
    try:
        overview, job = b.tab(), b.tab()
        overview.navigate(base + "/")
        i = 0
        while not stop.is_set():
            t = time.monotonic()
            for tab, url in ((overview, base + "/"), (job, f"{base}/jobs/{jobs[i % len(jobs)]}")):
                s = time.perf_counter()
                tab.navigate(url)
                took.append(time.perf_counter() - s)
            i += 1
            stop.wait(max(0.0, 1.0 - (time.monotonic() - t)))
    finally:
        b.close()


def _metrics(base: str) -> str:
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        return r.read().decode()


def figures(text: str) -> dict[str, float]:
    """A run's figures from its ``/metrics``: records landed (summed over topics), batches and their mean landing
    time, builds and their mean time (the means 0 when there were none: ``refusal`` catches those runs)."""
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    m = {s.name: s.value for s in samples if not s.labels}
    batches, builds = m.get("gangscope_batch_seconds_count", 0.0), m.get("gangscope_model_build_seconds_count", 0.0)
    return {
        "records": sum(s.value for s in samples if s.name == "gangscope_records_landed_total"),
        "batches": batches,
        "batch_s": m.get("gangscope_batch_seconds_sum", 0.0) / max(1.0, batches),
        "builds": builds,
        "build_s": m.get("gangscope_model_build_seconds_sum", 0.0) / max(1.0, builds),
    }


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile by nearest rank: the ceil(q * n)-th smallest value, always one that was measured."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


def refusal(r: dict[str, Any]) -> str | None:
    """Why a run's figures cannot be compared (None when they can): with nothing landed, built or answered, its
    means are zeros, so a ratio against it says nothing about the page."""
    side = "with" if r["page"] else "without"
    if r["records"] <= 0:
        why = f"landed no records ({r['batches']:.0f} batches)"
    elif r["builds"] <= 0:
        why = "finished no model build"
    elif r["page"] and not r["took"]:
        why = "answered no page request"
    else:
        return None
    return (
        f"bench/page.py: the run {side} the page {why}: its figures would mean nothing, none printed.\n"
        f"The end of its log:\n{r['log']}"
    )


def run_once(page: bool, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    sb = Sandbox(work / "sandbox", "mixed", speed=args.speed, interval=30.0).start()
    end = sb.sim_origin + timedelta(minutes=args.minutes)
    port = _port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")},
        "GANGSCOPE_CONFIG": str(sb.config),
        "GANGSCOPE_DATA": str(work / "data"),
        "GANGSCOPE_PIPELINE_FLUSH_SECONDS": "1",
        "GANGSCOPE_SCHEDULE_MODELS_BUILD": "interval:3",
        "GANGSCOPE_SCHEDULE_REPORT_HOURLY": "off",
        "GANGSCOPE_SCHEDULE_REPORT_DAILY": "off",
        "GANGSCOPE_SCHEDULE_COMPACTION": "off",
        "GANGSCOPE_SCHEDULE_RETENTION": "off",
        "GANGSCOPE_SERVER_LISTEN": f"127.0.0.1:{port}",
        "GANGSCOPE_SERVER_PAGE": "true" if page else "false",
    }
    log = work / "run.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gangscope.app.cli", "run"], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    stop = threading.Event()
    took: list[float] = []
    loader = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                _get(base + "/healthz")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.5)
        if page:
            truth = json.loads((sb.scenario_dir / "truth.json").read_text())
            jobs = sorted({f"{j['namespace']}/{j['job']}" for j in truth["jobs"]})
            target = _browser_load if args.browser else _http_load
            extra = (work,) if args.browser else ()
            loader = threading.Thread(target=target, args=(base, jobs, stop, took, *extra), daemon=True)
            loader.start()
        while sb.now() < end:
            assert proc.poll() is None, log.read_text()[-2000:]
            time.sleep(1)
        time.sleep(10)  # the last builds over what was played
        text = _metrics(base)
    finally:
        stop.set()
        if loader is not None:
            loader.join(60)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(180)
        except subprocess.TimeoutExpired:
            proc.kill()
        sb.stop()
    log_tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    return {"page": page, **figures(text), "took": took, "log": log_tail}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1, help="pairs of runs (default 1: without, then with)")
    ap.add_argument(
        "--minutes",
        type=float,
        default=30.0,
        help="simulated minutes per run (default 30: the mixed scenario's faults have begun)",
    )
    ap.add_argument("--speed", type=float, default=20.0, help="sandbox speed (default 20)")
    ap.add_argument("--browser", action="store_true", help="load the page in headless Chromium, not an HTTP client")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    order = [page for r in range(args.rounds) for page in ((False, True) if r % 2 == 0 else (True, False))]
    results = []
    for page in order:
        with tempfile.TemporaryDirectory(prefix="gangscope-page-bench-") as d:
            r = run_once(page, args, Path(d))
        refused = refusal(r)
        if refused:
            sys.exit(refused)
        results.append(r)
        lat = r["took"]
        print(
            f"  {'with' if page else 'without'} page: {r['records']:.0f} records in {r['batches']:.0f} batches, "
            f"mean {1000 * r['batch_s']:.1f} ms; {r['builds']:.0f} builds, mean {r['build_s']:.2f} s"
            + (f"; {len(lat)} requests, p50 {1000 * nearest_rank(lat, 0.5):.0f} ms" if lat else ""),
            flush=True,
        )

    def mean(page: bool, key: str) -> float:
        return statistics.mean(r[key] for r in results if r["page"] == page)

    lat = [t for r in results for t in r["took"]]  # every run with the page answered some (refusal)
    print(
        f"page: runs={len(results)} without_batch_ms={1000 * mean(False, 'batch_s'):.1f} "
        f"with_batch_ms={1000 * mean(True, 'batch_s'):.1f} "
        f"batch_ratio={mean(True, 'batch_s') / mean(False, 'batch_s'):.2f} "
        f"without_build_s={mean(False, 'build_s'):.2f} with_build_s={mean(True, 'build_s'):.2f} "
        f"build_ratio={mean(True, 'build_s') / mean(False, 'build_s'):.2f} requests={len(lat)} "
        f"page_p50_ms={1000 * nearest_rank(lat, 0.5):.0f} page_p95_ms={1000 * nearest_rank(lat, 0.95):.0f}"
    )


if __name__ == "__main__":
    main()
