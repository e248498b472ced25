"""Report benchmark: a report of 500 jobs over 7 days stays under 5 MB and renders in headless Chromium in
about the time the demo report takes (target: under 2 s). Ends with
``report: jobs=<n> days=<d> bytes=<b> write_s=<s> render_s=<s> demo_bytes=<b> demo_render_s=<s> ratio=<r>
blank_render_s=<s> net_s=<s> demo_net_s=<s> net_ratio=<r>`` (net: less a blank page's time, the browser's own
start-up and exit).

The big lake holds marts rows written directly (the shapes of ``tests/reports/lakefix.py``): 500 jobs created
over 7 days, two in three flagged across every class, with per-minute throughput and NVLink series for the
charted jobs. The demo report is the real one: ``gangscope demo`` (simulator, embedded broker, pipeline,
models) in the same run. Rendering is timed as ``chromium --headless --dump-dom`` (load, style, layout,
paint of the whole page), the median of a few runs of each, so the ratio cancels the browser's start-up and
the machine's speed. Figures are noisy on a shared machine: compare runs, not absolutes.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangscope import config  # noqa: E402

CAUSES = ("gpu_fault", "interconnect_degradation", "preemption", "admission_quota", "admission_topology",
          "gang_assembly", "topology_misplacement", "unexplained_slowdown", "healthy", "healthy", "healthy")
EXTRA_DDL = """
CREATE OR REPLACE TABLE intermediate.int_as_of (cluster VARCHAR, as_of TIMESTAMPTZ);
CREATE OR REPLACE TABLE marts.gpu_hours_lost (cluster VARCHAR, namespace VARCHAR, job VARCHAR, root_cause VARCHAR,
  started_at TIMESTAMPTZ, how VARCHAR, gpus INTEGER, hours DOUBLE, lost_share DOUBLE, gpu_hours DOUBLE);
"""


def build_big(settings: config.Settings, jobs: int, days: int, seed: int = 1) -> None:
    from pipeline import lake
    from tests.reports import lakefix

    rng = random.Random(seed)
    rows = []
    for i in range(jobs):
        cause = CAUSES[i % len(CAUSES)]
        gpus = 8 * rng.choice((1, 2, 2, 4))
        off = rng.randrange(0, days * 24 * 60 - 120)
        rows.append((f"team-{i % 7}", f"train-{i:04d}", f"cq-{i % 5}", "kueue", "coscheduling", cause,
                     "critical" if cause in ("gpu_fault", "interconnect_degradation", "gang_assembly") else "warning",
                     gpus, off, 60 if cause != "admission_quota" else 1500, 40, cause == "gang_assembly", "rack", 1,
                     True, 900.0, 1.0 if cause == "gang_assembly" else 0.0))
    con = lake.connect(settings)
    try:
        con.execute(lakefix.DDL + EXTRA_DDL)
        con.execute("BEGIN")
        lakefix.insert_jobs(con, rows, lakefix.T0)
        end = lakefix.T0 + timedelta(days=days)
        con.execute("INSERT INTO intermediate.int_as_of VALUES ('default', ?)", [end])
        con.execute("INSERT INTO marts.gpu_hours_lost SELECT cluster, namespace, job, root_cause, started_at, "
                    "'running slow', 16, 1.0, 0.4, 6.4 FROM marts.findings")
        con.execute("INSERT INTO marts.queue_health SELECT 'default', 'cq-' || i, 'lq-' || i, 100, 3, 97, 60.0, "
                    "900.0 + i FROM range(5) t(i)")
        con.execute("INSERT INTO marts.node_health SELECT 'default', 'gpu-node-' || i, i % 3, i * 2, NULL, "
                    "i * 5.0, i * 5.0 FROM range(64) t(i)")
        # Per-minute series for the jobs the report charts (the first 40 flagged): 6 h from creation.
        con.execute("""
            INSERT INTO intermediate.int_job_throughput
            SELECT f.cluster, f.namespace, f.job, j.created_at + INTERVAL (m) MINUTE,
                   CASE WHEN m > 15 THEN 5000 ELSE 9000 END + (m % 7) * 30, 9000, 0.9, true, m > 15
            FROM marts.findings f JOIN marts.jobs j USING (cluster, namespace, job), range(360) t(m)
            WHERE f.root_cause <> 'healthy'""")
        con.execute("""
            INSERT INTO staging.stg_metric_signals
            SELECT 'default', j.created_at + INTERVAL (m) MINUTE, 'nvlink_bw', 'DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL',
                   n.node, '0', NULL, NULL, NULL, NULL, CASE WHEN m > 15 THEN 4e11 ELSE 1.4e12 END + (m % 5) * 1e9,
                   't', 'dcgm'
            FROM marts.jobs j, unnest(j.nodes) AS n(node), range(360) t(m)
            WHERE j.root_cause <> 'healthy'""")
        con.execute("COMMIT")
    finally:
        con.close()


def render_s(exe: str, page: Path, runs: int, profile: Path) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-extensions", f"--user-data-dir={profile}", "--window-size=1280,2000",
                            "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
        times.append(time.perf_counter() - t)
        if r.returncode != 0 or "</html>" not in r.stdout:
            raise SystemExit(f"chromium failed on {page}: {r.stderr[-500:]}")
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--runs", type=int, default=3, help="renders of each report (median)")
    args = ap.parse_args()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        raise SystemExit("chromium is not installed (apt-get install -y chromium)")
    from reports.report import write_report

    with tempfile.TemporaryDirectory(prefix="gangscope-bench-report-") as tmp:
        base = Path(tmp)
        subprocess.run([sys.executable, "-m", "gangscope.app.cli", "demo", "--out", str(base / "demo")], check=True,
                       capture_output=True, timeout=600)
        demo = base / "demo" / "report.html"
        settings = config.load(overrides={"data": str(base / "big" / "data")}, environ={})
        build_big(settings, args.jobs, args.days)
        t = time.perf_counter()
        big = write_report(settings, "html", base / "big" / "report.html")
        write_s = time.perf_counter() - t
        blank = base / "blank.html"
        blank.write_text("<!DOCTYPE html><html><head><title>blank</title></head><body></body></html>")
        blank_r = render_s(exe, blank, args.runs, base / "profile")
        demo_r = render_s(exe, demo, args.runs, base / "profile")
        big_r = render_s(exe, big, args.runs, base / "profile")
        size = big.stat().st_size
        # net: less the browser's own start-up and exit (a blank page), what the page itself costs
        big_net, demo_net = max(big_r - blank_r, 0.01), max(demo_r - blank_r, 0.01)
        print(f"report: jobs={args.jobs} days={args.days} bytes={size} write_s={write_s:.2f} render_s={big_r:.2f} "
              f"demo_bytes={demo.stat().st_size} demo_render_s={demo_r:.2f} ratio={big_r / demo_r:.2f} "
              f"blank_render_s={blank_r:.2f} net_s={big_net:.2f} demo_net_s={demo_net:.2f} "
              f"net_ratio={big_net / demo_net:.2f}")
        return 0 if size < 5_000_000 else 1


if __name__ == "__main__":
    sys.exit(main())
