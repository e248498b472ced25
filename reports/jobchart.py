"""The time line of one flagged job, read from the lake: its layers, throughput, worst node's bandwidth.

Layers (queued, admitted, gang assembling, starting up, running, evicted) come from the models' own timestamps
(``int_admission``, ``int_gang``, ``marts.jobs`` and the job's preemption findings); throughput and its
baseline from ``int_job_throughput``; the worst node is the one whose bandwidth fell furthest below
its own median (the finding's ``bandwidth_drops`` name it when there are any).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from statistics import median
from typing import Any

import duckdb

from reports import charts, localtime
from reports.lakeread import as_dt, as_json, columns, first, memo, one
from reports.nextsteps import pct, rate

BW_SIGNALS = {"nvlink_bw": "NVLink", "ib_bw": "InfiniBand", "pcie_bw": "PCIe"}


@dataclass
class JobChart:
    wide: str  # SVG for a desktop
    narrow: str  # SVG for a phone
    text: str  # the text alternative: what the chart shows, in words


def _lanes(con: duckdb.DuckDBPyConnection, finding: dict[str, Any], job: dict[str, Any],
           preemptions: list[dict[str, Any]], end: datetime) -> list[charts.Band]:
    adm = one(con, "intermediate", "int_admission", finding)
    gang = one(con, "intermediate", "int_gang", finding)
    created = as_dt(first(adm, "created_at") or first(job, "created_at", "first_seen"))
    admitted = as_dt(adm.get("admitted_at"))
    g_start = as_dt(gang.get("assembly_started_at"))
    assembled = as_dt(gang.get("assembled_at"))
    running = as_dt(gang.get("all_running_at") or job.get("all_running_at"))
    out: list[charts.Band] = []
    evictions = sorted(t for t in (as_dt(p.get("started_at")) for p in preemptions) if t)
    if adm and created:
        out.append(charts.Band("queued", created, admitted or end))
    if evictions and g_start and g_start > evictions[0]:
        # The gang model describes the run after the eviction: the first run ran from admission to eviction.
        back = max((as_dt(p.get("ended_at")) for p in preemptions if as_dt(p.get("ended_at"))), default=None)
        out.append(charts.Band("running", admitted or created or evictions[0], evictions[0]))
        out.append(charts.Band("evicted", evictions[0], min(back or g_start, g_start)))
        preemptions = [p for p in preemptions if (as_dt(p.get("started_at")) or end) > g_start]
    elif admitted:
        out.append(charts.Band("admitted", admitted, g_start or running or end))
    if (g_start or (created and not adm)) and not gang.get("assembled_before_capture"):
        # Assembly ends when the members are bound (int_gang.assembled_at); a gang already bound when first
        # seen has no assembly time of its own to draw.
        start = g_start or created
        done = assembled or (running if not gang else None)
        out.append(charts.Band("gang assembling" if done else "gang incomplete", start, done or end))
    if assembled and running and gang.get("start_up_s") is not None:  # binding to running: image pulls, start-up
        out.append(charts.Band("starting up", assembled, running))
    if running:
        stops = sorted((as_dt(p.get("started_at")), as_dt(p.get("ended_at"))) for p in preemptions
                       if as_dt(p.get("started_at")))
        t = running
        for evicted, back in stops:
            if evicted and evicted > t:
                out.append(charts.Band("running", t, evicted))
                out.append(charts.Band("evicted", evicted, back or end))
                t = back or end
        if t < end:
            out.append(charts.Band("running", t, end))
    return [charts.Band(b.label, max(b.start, end - timedelta(days=7)), min(b.end, end)) for b in out
            if b.end > b.start and b.start < end]


def _throughput(con: duckdb.DuckDBPyConnection, key: list[Any], t0: datetime, t1: datetime) -> charts.Panel | None:
    if not columns(con, "intermediate", "int_job_throughput"):
        return None
    got = con.execute(
        "SELECT ts, value, baseline FROM intermediate.int_job_throughput WHERE cluster = ? AND namespace = ? "
        "AND job = ? AND ts BETWEEN ? AND ? ORDER BY ts", [*key, t0, t1]).fetchall()
    if not got:
        return None
    series = [charts.Series("throughput", [(as_dt(t), v) for t, v, _ in got])]
    if any(b is not None for _, _, b in got):
        series.append(charts.Series("baseline", [(as_dt(t), b) for t, _, b in got if b is not None], dashed=True))
    return charts.Panel("throughput", "items/s", series)


def _worst_node(con: duckdb.DuckDBPyConnection, finding: dict[str, Any], job: dict[str, Any], t0: datetime,
                t1: datetime, onset: datetime | None) -> tuple[charts.Panel | None, str]:
    nodes = list(finding.get("nodes") or job.get("nodes") or [])[:16]
    if not nodes or not columns(con, "staging", "stg_metric_signals"):
        return None, ""
    got = con.execute(
        "SELECT node, signal, time_bucket(INTERVAL 1 MINUTE, ts) AS t, sum(value) / count(DISTINCT ts) "
        f"FROM staging.stg_metric_signals WHERE signal IN ({', '.join('?' * len(BW_SIGNALS))}) "
        "AND list_contains(?, node) AND ts BETWEEN ? AND ? AND value IS NOT NULL GROUP BY ALL ORDER BY 1, 2, 3",
        [*BW_SIGNALS, nodes, t0, t1]).fetchall()
    by: dict[tuple[str, str], list[tuple[datetime, float]]] = {}
    for node, signal, t, v in got:
        by.setdefault((node, signal), []).append((as_dt(t), float(v)))
    if not by:
        return None, ""
    evidence = as_json(finding.get("evidence"))
    drops = [d for d in as_json(evidence.get("bandwidth_drops") if isinstance(evidence, dict) else None) or []
             if isinstance(d, dict) and (d.get("node"), d.get("signal")) in by]
    if drops:
        worst = min(drops, key=lambda d: float(d.get("ratio") or 1))
        key, base = (worst["node"], worst["signal"]), worst.get("baseline")
    else:  # the series whose median after the onset fell furthest below its median before it
        def before(k: tuple[str, str]) -> float:
            vals = [v for t, v in by[k] if onset is None or t < onset] or [v for _, v in by[k]]
            return median(vals)

        def low(k: tuple[str, str]) -> float:
            after = [v for t, v in by[k] if onset is None or t >= onset] or [v for _, v in by[k]]
            b = before(k)
            return median(after) / b if b > 0 else 1.0
        moving = [k for k in by if before(k) > 0]
        if not moving:  # no traffic on any of its nodes: nothing to chart
            return None, ""
        key = min(moving, key=low)
        base = before(key)
    points = by[key]
    series = [charts.Series(f"{BW_SIGNALS[key[1]]} on {key[0]}", [(t, v / 1e9) for t, v in points])]
    if base:
        series.append(charts.Series("its own baseline", [(points[0][0], float(base) / 1e9),
                                                         (points[-1][0], float(base) / 1e9)], dashed=True))
    after = [p for p in points if onset is None or p[0] >= onset] or points
    low_t, low_v = min(after, key=lambda p: p[1])
    text = (f"{BW_SIGNALS[key[1]]} bandwidth of its worst node {key[0]}: baseline {rate(base)}, lowest "
            f"{rate(low_v)} at {localtime.clock(low_t)}")
    return charts.Panel("bandwidth", "GB/s", series), text


def _gpus(con: duckdb.DuckDBPyConnection, finding: dict[str, Any], job: dict[str, Any], t0: datetime,
          t1: datetime) -> tuple[charts.Panel | None, str, list[charts.Marker]]:
    """Utilisation of the GPUs on the job's nodes (mean and the lowest GPU, per minute), and its GPU faults as
    markers (``int_gpu_minutes``, ``int_gpu_faults``)."""
    nodes = [str(n) for n in list(finding.get("nodes") or job.get("nodes") or [])[:16]]
    if not nodes:
        return None, "", []
    panel, text = None, ""
    if columns(con, "intermediate", "int_gpu_minutes"):
        got = con.execute(
            "SELECT ts, avg(gpu_util), min(gpu_util) FROM intermediate.int_gpu_minutes WHERE list_contains(?, node) "
            "AND ts BETWEEN ? AND ? AND gpu_util IS NOT NULL GROUP BY ts ORDER BY ts", [nodes, t0, t1]).fetchall()
        if got:
            panel = charts.Panel("GPU utilisation", "%", [
                charts.Series("mean of its GPUs", [(as_dt(t), float(m)) for t, m, _ in got]),
                charts.Series("lowest GPU", [(as_dt(t), float(lo)) for t, _, lo in got], dashed=True)])
            low_t, _, low_v = min(got, key=lambda r: r[2])
            text = (f"GPU utilisation on its nodes: mean {median(float(m) for _, m, _ in got):.0f} %, lowest GPU "
                    f"{float(low_v):.0f} % at {localtime.clock(as_dt(low_t))}")
    markers = []
    if columns(con, "intermediate", "int_gpu_faults"):
        for node, gpu, kind, code, at in con.execute(
                "SELECT node, gpu, kind, code, min(started_at) FROM intermediate.int_gpu_faults WHERE "
                "list_contains(?, node) AND started_at BETWEEN ? AND ? GROUP BY ALL ORDER BY 5 LIMIT 4",
                [nodes, t0, t1]).fetchall():
            what = f"XID {code}" if kind == "xid" and code is not None else str(kind).replace("_", " ")
            markers.append(charts.Marker(f"{what} {node}/{gpu}", as_dt(at)))
    return panel, text, markers


def job_chart(con: duckdb.DuckDBPyConnection, finding: dict[str, Any], job: dict[str, Any],
              preemptions: list[dict[str, Any]], uid: str, window: tuple[datetime, datetime] | None = None,
              gpus: bool = False) -> JobChart:
    """The chart of one finding's job, in both widths, with its text alternative; ``window`` overrides the time
    span (a job without a finding: its life up to the data's end), ``gpus`` adds its GPUs' utilisation and faults."""
    onset = as_dt(finding.get("started_at"))
    ended = as_dt(finding.get("ended_at"))
    anchor = onset or datetime.now(UTC)
    created = as_dt(first(job, "created_at", "first_seen"))
    t0 = max(min(anchor - timedelta(minutes=30), created or anchor), anchor - timedelta(days=1))
    # An ongoing finding is charted up to its latest data (at most 6 h past the onset).
    t1 = ended + timedelta(minutes=15) if ended else anchor + timedelta(hours=6)
    if window is not None:
        t0, t1 = window
    key = [finding.get("cluster"), finding.get("namespace"), finding.get("job")]
    panels: list[charts.Panel] = []
    parts: list[str] = []
    tp = _throughput(con, key, t0, t1)
    if tp:
        panels.append(tp)
        vals = [(t, v) for t, v in tp.series[0].points if v is not None]
        base = [v for _, v in tp.series[1].points] if len(tp.series) > 1 else []
        if vals:
            low_t, low_v = min([p for p in vals if onset is None or p[0] >= onset] or vals, key=lambda p: p[1])
            b = median(base) if base else 0.0
            parts.append(f"throughput baseline {b:,.0f} items/s, lowest {low_v:,.0f} items/s ({pct(low_v / b)})"
                         f" at {localtime.clock(low_t)}" if b > 0 else
                         f"throughput lowest {low_v:,.0f} items/s at {localtime.clock(low_t)}")
    bw, bw_text = _worst_node(con, finding, job, t0, t1, onset)
    if bw:
        panels.append(bw)
        parts.append(bw_text)
    faults: list[charts.Marker] = []
    if gpus:
        gp, gp_text, faults = _gpus(con, finding, job, t0, t1)
        if gp:
            panels.append(gp)
            parts.append(gp_text)
        parts += [f"{m.label} at {localtime.clock(m.at)}" for m in faults]
    as_of = memo(con, ("as_of", finding.get("cluster")), lambda: con.execute(
        "SELECT max(as_of) FROM intermediate.int_as_of WHERE cluster = ?", [finding.get("cluster")]).fetchone()[0]
        if columns(con, "intermediate", "int_as_of") else None)
    data_end = as_dt(as_of) or max([t for p in panels for s in p.series for t, _ in s.points]
                                   + [anchor + timedelta(minutes=5)])
    lanes = _lanes(con, finding, job, preemptions, min(data_end, t1))
    if lanes:
        parts.append("layers: " + ", ".join(f"{b.label} {localtime.hm(b.start)}-{localtime.hm(b.end)}" for b in lanes))
    markers = ([charts.Marker(f"onset {localtime.hm(onset)}", onset)] if onset else []) + faults
    if onset:
        parts.append(f"onset of {finding.get('root_cause')} at {localtime.stamp(onset)}")
    title = f"{finding.get('namespace')}/{finding.get('job')}: time line"
    text = "; ".join(parts) + "." if parts else "no samples."
    return JobChart(charts.time_chart(panels, lanes, markers, width=760, title=title, desc=text, uid=f"{uid}w"),
                    charts.time_chart(panels, lanes, markers, width=340, title=title, desc=text, uid=f"{uid}n",
                                      narrow=True),
                    text)
