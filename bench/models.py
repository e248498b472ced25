"""Model build benchmark: a full build over N hours of an M-node cluster at 15 s, a rebuild after one more
minute of data, four more such rebuilds (what a live 30 s schedule does; their median is ``steady_rebuild_s``),
four scheduled builds as ``gangscope run`` does them at most intervals (the models the findings need, a
minute each), and a diagnose (staleness check + reading marts.findings). Then, per fleet size of
``--scheduled-nodes`` (default 128 and 1,280 nodes x 8 GPUs), a fresh lake of ``--scheduled-minutes`` (30) of
history, its full build, one rebuild and four scheduled builds a minute each (their median is
``scheduled_s_<nodes>``). Ends with
``models: build_s=<s> rebuild_s=<s> steady_rebuild_s=<s> scheduled_s=<s> diagnose_s=<s> build_rss_mb=<peak>
scheduled_s_<nodes>=<s> full_s_per_gpu_day_<nodes>=<s> full_rss_mb_<nodes>=<peak> full_spill_mb_<nodes>=<peak> ...``
(with ``--baseline-ref``: the same for the models of that ref, and the ratio of the scheduled builds)
(targets at 128 nodes x 6 h on 2 cores: build < 60, a rebuild < 3 (10 % of a 30 s schedule, issue 16), diagnose < 3,
RSS < 1024): the peak RSS is this process's from the start of the full build on (the data
generation before it does not count; what it left in memory does).

Kubernetes objects come from the simulator (``mixed`` scenario timeline, landed through pipeline.land).
Metric samples are generated inside DuckDB (series once, with the pipeline's ids, then points) with the
simulator's exporter shapes (dcgm-exporter: 21 fields per
GPU with Hostname/gpu/UUID labels and pod labels on allocated GPUs; node_exporter InfiniBand: 9 fields per
port; training throughput per job), because writing ~36 M samples to a text file and parsing it back
would benchmark the parser, not the models. Figures are noisy on a shared machine: compare runs, not absolutes.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangscope import config  # noqa: E402

DCGM = ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")
IB = ("node_infiniband_state_id", "node_infiniband_physical_state_id", "node_infiniband_rate_bytes_per_second",
      "node_infiniband_port_data_received_bytes_total", "node_infiniband_port_data_transmitted_bytes_total",
      "node_infiniband_symbol_error_total", "node_infiniband_link_error_recovery_total",
      "node_infiniband_link_downed_total", "node_infiniband_port_transmit_wait_total")


def _k8s(settings: config.Settings, work: Path, nodes: int, hours: float) -> None:
    import random

    from collectors.simulate import DEFAULT_START, cluster, scenarios, timeline
    from gangscope.app.evaluate import land_files

    clu = cluster.build(nodes, random.Random("1:cluster"))
    scn = scenarios.build("mixed", clu, 1, hours * 3600.0)
    path = work / "k8s.jsonl"
    timeline.build(scn, DEFAULT_START).write(path)
    land_files(settings, [str(path)], [])


START = "TIMESTAMPTZ '2026-11-01 00:00:00+00'"
MIXED_NODES = 20  # the mixed scenario lays out one job of every class on 20 nodes (fewer: "use more --nodes")


def _series(con, nodes: int, days: int) -> None:
    """Every series of the synthetic cluster into raw.metric_series, for each of ``days`` UTC days, with the
    pipeline's ids; ``_bench_ids`` keeps each id's generator keys (kind, node, GPU or port) for ``_samples``."""
    from pipeline.decode import with_series_ids

    dcgm = ", ".join(f"('{m}')" for m in DCGM)
    ib = ", ".join(f"('{m}')" for m in IB)
    series = con.execute(f"""
        SELECT 'dcgm' AS kind, n.i AS n, g.i AS k, 'default' AS cluster, m.metric,
               json_object('gpu', g.i::VARCHAR, 'UUID', 'GPU-' || n.i || '-' || g.i,
                           'Hostname', printf('gpu-node-%03d', n.i + 1), 'modelName', 'NVIDIA H100 80GB HBM3',
                           'pod', CASE WHEN n.i % 4 <> 3 THEN printf('job-%03d-worker-0', n.i // 2) END,
                           'namespace', CASE WHEN n.i % 4 <> 3 THEN 'ml-platform' END)::VARCHAR AS labels,
               printf('gpu-node-%03d', n.i + 1) AS node, printf('http://gpu-node-%03d:9400/metrics', n.i + 1) AS target,
               'dcgm-exporter' AS job, printf('gpu-node-%03d:9400', n.i + 1) AS instance
        FROM range({nodes}) n(i), range(8) g(i), (VALUES {dcgm}) m(metric)
        UNION ALL
        SELECT 'ib', n.i, d.i, 'default', m.metric,
               json_object('device', 'mlx5_' || d.i, 'port', '1', 'instance', printf('gpu-node-%03d:9100', n.i + 1)),
               printf('gpu-node-%03d', n.i + 1), printf('http://gpu-node-%03d:9100/metrics', n.i + 1),
               'node-exporter', printf('gpu-node-%03d:9100', n.i + 1)
        FROM range({nodes}) n(i), range(4) d(i), (VALUES {ib}) m(metric)
        UNION ALL
        SELECT 'train', j.i, 0, 'default', 'train_tokens_per_second',
               json_object('pod', printf('job-%03d-worker-0', j.i), 'namespace', 'ml-platform'),
               NULL, 'http://training/metrics', 'training', 'training:8000'
        FROM range({nodes // 2}) j(i)
    """).pl()
    start = con.execute(f"SELECT {START}").fetchone()[0]
    per_day = [with_series_ids(series.with_columns(ts=pl.lit(start + timedelta(days=d)))) for d in range(days)]
    con.register("_bench_series", pl.concat(per_day).to_arrow())
    con.execute("INSERT INTO raw.metric_series SELECT series, day, cluster, metric, labels, node, target, job, "
                "instance FROM _bench_series")
    con.execute("CREATE OR REPLACE TEMP TABLE _bench_ids AS SELECT series, day, kind, n, k, metric FROM _bench_series")
    con.unregister("_bench_series")


def _samples(con, nodes: int, t_from: int, t_to: int, interval: float = 15.0) -> int:
    """Insert scrape rounds [t_from, t_to) for every node: DCGM per GPU, IB per port, throughput per pod, and a
    raw.scrapes row per target and round."""
    day = "CAST(timezone('UTC', {ts}) AS DATE)"
    values = {
        "dcgm": ("t.i * {interval} + s.n % 7", """
            CASE WHEN s.metric = 'DCGM_FI_DEV_XID_ERRORS' THEN 0
                 WHEN s.metric LIKE '%COUNT_TOTAL' OR s.metric LIKE '%DBE%' OR s.metric LIKE '%REPLAY%' THEN 0
                 WHEN s.metric = 'DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL' THEN 200000 + (t.i * 7 + s.k) % 1000
                 ELSE 50 + (t.i + s.k) % 40 END"""),
        "ib": ("t.i * {interval} + 3 + s.n % 5", """
            CASE WHEN s.metric = 'node_infiniband_state_id' THEN 4
                 WHEN s.metric = 'node_infiniband_physical_state_id' THEN 5
                 WHEN s.metric LIKE '%data_%' THEN (t.i * 2.5e10 * {interval})::DOUBLE ELSE 0 END"""),
        "train": ("t.i * {interval} + 1", "100000 + (t.i * 13) % 500"),
    }
    for kind, (offset, value) in values.items():
        ts = f"{START} + to_seconds({offset.format(interval=interval)})"
        con.execute(f"""
            INSERT INTO raw.metric_points
            SELECT {ts}, s.series, {value.format(interval=interval)}
            FROM range({t_from}, {t_to}) t(i) JOIN _bench_ids s ON s.kind = '{kind}' AND s.day = {day.format(ts=ts)}
        """)
    # One raw.scrapes row per target and round, as the pipeline lands them (the model runner's late_from reads them):
    # a partition per target (of 4), offsets rising with the round.
    per_round = 2 * nodes + 1
    con.execute(f"""
        INSERT INTO raw.scrapes
        SELECT 'default', ts, target, job, instance, true, 0.1, n, NULL, k % 4, t * {per_round} + k, ts
        FROM (SELECT t.i AS t, x.k, x.target, x.job, x.instance, x.n,
                     {START} + to_seconds(t.i * {interval} + x.offset_s) AS ts
              FROM range({t_from}, {t_to}) t(i),
                   (SELECT 2 * n.i AS k, printf('http://gpu-node-%03d:9400/metrics', n.i + 1) AS target,
                           'dcgm-exporter' AS job, printf('gpu-node-%03d:9400', n.i + 1) AS instance,
                           8 * {len(DCGM)} AS n, n.i % 7 AS offset_s FROM range({nodes}) n(i)
                    UNION ALL
                    SELECT 2 * n.i + 1, printf('http://gpu-node-%03d:9100/metrics', n.i + 1), 'node-exporter',
                           printf('gpu-node-%03d:9100', n.i + 1), 4 * {len(IB)}, 3 + n.i % 5 FROM range({nodes}) n(i)
                    UNION ALL
                    SELECT {2 * nodes}, 'http://training/metrics', 'training', 'training:8000', {nodes // 2}, 1) x)
    """)
    return (t_to - t_from) * (nodes * (8 * len(DCGM) + 4 * len(IB)) + nodes // 2)


def reset_peak_rss() -> None:
    """Forget this process's peak RSS so far (Linux), so generating the data does not count as the build's."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def release_heap() -> None:
    """Return freed heap to the OS (glibc keeps it otherwise, and it would count as the build's RSS)."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def peak_rss_mb() -> float:
    """Peak RSS since ``reset_peak_rss`` (VmHWM), else since start."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _SpillWatch:
    """The peak size of DuckDB's spill directory (``<data>/tmp``) while the block runs, sampled every 0.2 s (as `du` is
    watched by hand in docs/scaling.md)."""

    def __init__(self, path: Path) -> None:
        import threading

        self.path, self.peak_mb, self._stop = path, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            size = 0
            with contextlib.suppress(OSError):
                size = sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
            self.peak_mb = max(self.peak_mb, size / 2**20)
            if self._stop.wait(0.2):
                return

    def __enter__(self) -> _SpillWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _scheduled(settings: config.Settings, con, nodes: int, tick: int, sql_dir: Path | None = None,
               rounds: int = 4) -> list[float]:
    """Scheduled builds as ``gangscope run`` does them at most intervals (the models the findings need),
    each after one more minute of samples from round ``tick`` on."""
    from pipeline import models

    out = []
    for k in range(rounds):
        _samples(con, nodes, tick + 4 * k, tick + 4 * (k + 1))
        t = time.perf_counter()
        models.build(settings, con, only_stale=True, first=("marts.findings", "marts.jobs"), rest=False,
                     **({"sql_dir": sql_dir} if sql_dir else {}))
        out.append(time.perf_counter() - t)
    return out


def scheduled_at(nodes: int, minutes: float, memory_limit: str | None,
                 sql_dirs: dict[str, Path | None]) -> dict[str, tuple[float, float, float, float]]:
    """label -> (median scheduled build s, full build s, the full build's peak RSS MB, its peak spill MB) on a fresh
    lake of ``nodes`` x 8 GPUs with ``minutes`` of history, one lake per models directory (the same data), their
    scheduled builds interleaved so that each sees the same load: the first rebuild (it reads past the full build's
    one unsorted file) untimed. The RSS is the process's from the full build's start: only the first label's is
    its own (the lakes before it are open beside the others' builds)."""
    from pipeline import lake, models

    with tempfile.TemporaryDirectory() as tmp:
        lakes, cons, ticks = {}, [], int(minutes * 4)
        try:
            for label, sql_dir in sql_dirs.items():
                work = Path(tmp) / label
                work.mkdir()
                settings = config.load(overrides={"data": str(work / "data"), "memory_limit": memory_limit},
                                       environ={})
                _k8s(settings, work, max(nodes, MIXED_NODES), minutes / 60)
                con = lake.connect(settings)
                cons.append(con)
                t = time.perf_counter()
                _series(con, nodes, days=int((ticks + 40) * 15 // 86400) + 2)
                n = _samples(con, nodes, 0, ticks)
                print(f"{nodes} nodes ({label}): generated {n:,} samples in {time.perf_counter() - t:.1f}s", flush=True)
                kw = {"sql_dir": sql_dir} if sql_dir else {}
                release_heap()
                reset_peak_rss()
                t = time.perf_counter()
                with _SpillWatch(lake.temp_path(settings)) as spill:
                    models.build(settings, con, **kw)
                lakes[label] = (settings, con, sql_dir, time.perf_counter() - t, peak_rss_mb(), spill.peak_mb)
                _samples(con, nodes, ticks, ticks + 4)
                models.build(settings, con, only_stale=True, **kw)
            runs: dict[str, list[float]] = {label: [] for label in lakes}
            for k in range(4):
                for label, (settings, con, sql_dir, *_) in lakes.items():
                    runs[label] += _scheduled(settings, con, nodes, ticks + 4 + 4 * k, sql_dir, rounds=1)
        finally:
            for con in cons:
                con.close()
    out = {}
    for label, (_, _, _, full_s, rss, spill_mb) in lakes.items():
        print(f"{nodes} nodes ({label}): full build {full_s:.1f}s (peak RSS {rss:.0f} MB, spill {spill_mb:.0f} MB); "
              "scheduled builds, a minute each: " + ", ".join(f"{s:.2f}s" for s in runs[label]), flush=True)
        out[label] = statistics.median(runs[label]), full_s, rss, spill_mb
    return out


def _models_at(ref: str) -> Path:
    """The sql/ directory of git ``ref`` (e.g. main), extracted to a temporary directory left for the OS."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    out = Path(tempfile.mkdtemp(prefix="gangscope-sql-"))
    archive = subprocess.run(["git", "-C", str(root), "archive", ref, "sql"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out / "sql"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--keep", metavar="DIR", help="keep the lake in DIR")
    ap.add_argument("--memory-limit", help="the memory_limit setting (default: the settings' default; '' : none)")
    ap.add_argument("--scheduled-nodes", default="128,1280",
                    help="fleet sizes (nodes x 8 GPUs) whose scheduled build is timed, comma-separated ('' none)")
    ap.add_argument("--scheduled-minutes", type=float, default=30.0, help="history in each of those lakes")
    ap.add_argument("--baseline-ref", metavar="REF",
                    help="also time those scheduled builds with the models of git REF (e.g. main) on a second lake, "
                         "interleaved: scheduled_base_s_<nodes> and scheduled_ratio_<nodes> (base / this)")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.scheduled_nodes.split(",") if x.strip()]
    from pipeline import lake, models
    from reports import diagnose

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        settings = config.load(overrides={"data": str(work / "data"), "memory_limit": args.memory_limit}, environ={})
        print(f"memory_limit={settings.memory_limit}", flush=True)
        _k8s(settings, work, max(args.nodes, MIXED_NODES), args.hours)
        ticks = int(args.hours * 240)
        con = lake.connect(settings)
        t = time.perf_counter()
        _series(con, args.nodes, days=int((ticks + 4) * 15 // 86400) + 2)
        n = _samples(con, args.nodes, 0, ticks)
        print(f"generated {n:,} samples in {time.perf_counter() - t:.1f}s", flush=True)
        # A fresh connection and the freed heap handed back: the peak is the build's, not the generator's leftovers.
        ids = con.execute("SELECT * FROM _bench_ids").pl()  # a temp table: kept for the extra minute below
        con.close()
        release_heap()
        con = lake.connect(settings)
        reset_peak_rss()
        t = time.perf_counter()
        full = models.build(settings, con)
        build_s = time.perf_counter() - t
        build_rss_mb = peak_rss_mb()
        slow = sorted(full.per_model_s.items(), key=lambda kv: -kv[1])[:5]
        print("slowest models: " + ", ".join(f"{k} {v:.1f}s" for k, v in slow), flush=True)
        con.register("_ids", ids.to_arrow())
        con.execute("CREATE TEMP TABLE _bench_ids AS SELECT * FROM _ids")
        con.unregister("_ids")
        _samples(con, args.nodes, ticks, ticks + 4)  # one more minute
        t = time.perf_counter()
        re = models.build(settings, con, only_stale=True)
        rebuild_s = time.perf_counter() - t
        slow = sorted(re.per_model_s.items(), key=lambda kv: -kv[1])[:5]
        print(f"rebuild: {re.models} models, incremental: {', '.join(re.incremental)}; slowest: "
              + ", ".join(f"{k} {v:.2f}s" for k, v in slow), flush=True)
        # The first rebuild after a full build reads past the full build's one unsorted file (docs/models.md);
        # a live 30 s schedule then rebuilds after each minute from its own small files: time a few of those.
        steady = []
        for k in range(1, 5):
            _samples(con, args.nodes, ticks + 4 * k, ticks + 4 * (k + 1))
            t = time.perf_counter()
            models.build(settings, con, only_stale=True)
            steady.append(time.perf_counter() - t)
        print("next rebuilds, a minute each: " + ", ".join(f"{s:.2f}s" for s in steady), flush=True)
        # What `gangscope run`'s schedule builds at most intervals: the models the findings need (published
        # before the rest; the other marts follow every fifth interval, gangscope.app.schedule).
        scheduled = _scheduled(settings, con, args.nodes, ticks + 20)
        print("scheduled builds (findings first, the rest left), a minute each: "
              + ", ".join(f"{s:.2f}s" for s in scheduled), flush=True)
        models.build(settings, con, only_stale=True)  # the rest, as every fifth interval does: diagnose finds none
        con.close()
        t = time.perf_counter()
        con = lake.connect(settings)
        models.build(settings, con, only_stale=True)
        rows = diagnose.findings(con, include_healthy=True)
        diagnose.to_table(rows)
        diagnose_s = time.perf_counter() - t
        con.close()
        print(f"findings: {len(rows)}")
    dirs: dict[str, Path | None] = {"this": None}
    if args.baseline_ref:
        dirs["base"] = _models_at(args.baseline_ref)
    at = {n: scheduled_at(n, args.scheduled_minutes, args.memory_limit, dirs) for n in sizes}
    extra = ""
    for n, got in at.items():
        # The full build of that lake per GPU-day of history (n x 8 GPUs x --scheduled-minutes).
        per_gpu_day = 1 / (n * 8 * args.scheduled_minutes / 1440)
        extra += (f" scheduled_s_{n}={got['this'][0]:.2f} full_s_per_gpu_day_{n}={got['this'][1] * per_gpu_day:.3f}"
                  f" full_rss_mb_{n}={got['this'][2]:.0f} full_spill_mb_{n}={got['this'][3]:.0f}")
        if "base" in got:
            extra += (f" scheduled_base_s_{n}={got['base'][0]:.2f}"
                      f" scheduled_ratio_{n}={got['base'][0] / got['this'][0]:.2f}"
                      f" full_base_s_per_gpu_day_{n}={got['base'][1] * per_gpu_day:.3f}"
                      f" full_base_spill_mb_{n}={got['base'][3]:.0f}")
    print(f"models: build_s={build_s:.1f} rebuild_s={rebuild_s:.1f} steady_rebuild_s={statistics.median(steady):.1f} "
          f"scheduled_s={statistics.median(scheduled):.1f} diagnose_s={diagnose_s:.2f} build_rss_mb={build_rss_mb:.0f}"
          + extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
