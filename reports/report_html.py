"""The report as one self-contained HTML file: inline CSS and SVG, no scripts, fonts or images.

Read on a phone after an alert: the fleet view first, then the jobs that need action with their next
step, then per job what happened (sentences), the step with its kubectl commands, a time line, and the
layered check and raw evidence folded in ``<details>``. Narrow screens get stacked tables and the
phone rendering of each chart (CSS media queries choose; both are inline). Everything from the
cluster goes through ``html.escape``; a Content-Security-Policy (``default-src 'none'``) forbids
loading or running anything even if escaping were missed.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from reports import charts, localtime
from reports.charts import esc
from reports.fleet import Fleet
from reports.nextsteps import number
from reports.report_data import CLASS_COLOURS, SEVERITY_ORDER, JobSection, ReportData

CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;padding:12px 16px;color:#1a1a1a;
max-width:1100px;font-size:15px;line-height:1.45}
h1{font-size:22px;margin:8px 0}h2{font-size:19px;border-bottom:2px solid #ccc;padding-bottom:4px;margin-top:28px}
h3{font-size:16px;margin:10px 0 4px}h4{font-size:15px;margin:10px 0 2px}
table{border-collapse:collapse;font-size:13px;margin:8px 0;max-width:100%}
td,th{border:1px solid #ccc;padding:4px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#eee}
.scroll{overflow-x:auto;max-width:100%}
.badge{display:inline-block;padding:1px 8px;border-radius:9px;color:#fff;font-size:13px}
.critical{background:#b3261e}.warning{background:#8a5a00}.info{background:#0b5394}
.cause{background:#fff1e0}.job{border:1px solid #ccc;border-radius:6px;padding:8px 12px;margin:14px 0}
.next{border-left:4px solid #0072B2;background:#eef5fb;padding:6px 10px;margin:8px 0}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f4f4f4;padding:6px 8px;margin:4px 0;font-size:13px}
.muted{color:#555}ul{padding-left:20px;margin:4px 0}figure{margin:8px 0}figcaption{font-size:13px;color:#444}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.up{color:#b3261e}.down{color:#1b6e3a}
.narrow-only{display:none}
@media (max-width:600px){
 body{padding:8px 10px}
 .wide-only{display:none}.narrow-only{display:block}
 table.stack thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
 table.stack,table.stack tbody,table.stack tr,table.stack td{display:block;width:100%}
 table.stack tr{border:1px solid #ccc;margin-bottom:8px}table.stack td{border:none;border-bottom:1px solid #eee}
 table.stack td::before{content:attr(data-label) ": ";font-weight:600}
}
"""


def fmt(v: Any, limit: int = 400) -> str:
    text = fmt_full(v)
    return text if len(text) <= limit else text[:limit] + " …"


def fmt_full(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, datetime):
        return localtime.stamp(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, default=str, sort_keys=True)
    return str(v)


def table(cols: list[str], rows: list[tuple[Any, ...]], stack: bool = False, caption: str = "") -> str:
    """A table with a header row; ``stack`` turns rows into cards on a phone, else it scrolls in its box."""
    head = "".join(f'<th scope="col">{esc(c)}</th>' for c in cols)
    cap = f"<caption class='muted'>{esc(caption)}</caption>" if caption else ""
    body = "".join("<tr>" + "".join(f'<td data-label="{esc(c)}">{esc(fmt(v))}</td>' for c, v in zip(cols, r,
                                                                                                   strict=False))
                   + "</tr>" for r in rows)
    t = f'<table class="{"stack" if stack else ""}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    return t if stack else f'<div class="scroll">{t}</div>'


def both(fn: Any, uid: str, **kw: Any) -> str:
    """A chart drawn for a desktop and for a phone; CSS shows one."""
    return (f'<div class="wide-only">{fn(**kw, uid=uid + "w")}</div>'
            f'<div class="narrow-only">{fn(**kw, width=340, narrow=True, uid=uid + "n")}</div>')


def _fleet(data: ReportData) -> list[str]:
    fl = data.fleet
    if not fl.built:
        return ['<section id="fleet"><h2>Fleet: GPU-hours lost</h2>', "<p>model not built yet</p></section>"]
    total = f"{fl.total:,.1f}"
    if fl.previous is not None:
        prev = sum(fl.previous.values())
        delta = fl.change() or 0.0
        trend = (f' <span class="{"up" if delta > 0 else "down"}">{"+" if delta >= 0 else "−"}{abs(delta):,.1f} '
                 f"GPU-hours</span> against the previous report ({esc(fmt(fl.previous_at))}: {prev:,.1f}).")
    else:
        trend = " No previous report to compare with."
    return fleet_section(fl, f"<p><b>{total} GPU-hours</b> lost to {len(data.flagged)} finding(s).{trend}</p>")


def fleet_section(fl: Fleet, intro: str, heading: str = "Fleet: GPU-hours lost", changes: bool = True) -> list[str]:
    """GPU-hours lost by root cause (chart and table, with the change against the previous report when
    ``changes``), nodes ranked by faults, ClusterQueues ranked by wait: the report's fleet view, and the live
    page's. ``intro`` is HTML the caller escaped."""
    h = [f'<section id="fleet"><h2>{esc(heading)}</h2>', intro]
    if fl.lost:
        items = [(cause, hours) for cause, _, hours in fl.lost]
        h.append(both(charts.bar_chart, items=items, title="GPU-hours lost by root cause", unit="GPU-hours",
                      colours=CLASS_COLOURS, category="root cause", uid="fleet",
                      desc="; ".join(f"{c}: {v:,.1f} GPU-hours" for c, v in items)))
        rows = [(f"{cause} ({how})", f"{hours:,.1f}", *([f"{fl.change(cause):+,.1f}" if fl.previous is not None
                                                        else "–"] if changes else []))
                for cause, how, hours in fl.lost]
        h.append(table(["root cause (how)", "GPU-hours", *(["change"] if changes else [])], rows))
    h.append("<h3>Nodes ranked by faults</h3>")
    h.append(table(["node", "what went wrong", "trouble score"], [(n, w, s) for n, w, s in fl.nodes], stack=True)
             if fl.nodes else "<p>No node shows a fault.</p>")
    h.append("<h3>ClusterQueues ranked by wait</h3>")
    if fl.queues:
        h.append(table(["ClusterQueue", "pending", "p95 wait (min)", "longest wait (min)", "blocked by quota",
                        "blocked by topology"],
                       [(q.get("cluster_queue"), q.get("pending"), _minutes(q.get("wait_p95_s")),
                         _minutes(q.get("wait_max_s")), q.get("blocked_quota"), q.get("blocked_topology"))
                        for q in fl.queues], stack=True))
    else:
        h.append("<p>No ClusterQueue seen.</p>")
    h.append("</section>")
    return h


def _minutes(s: Any) -> str:
    return number(float(s) / 60) if isinstance(s, int | float) else "–"


def step_html(action: Any, check: Any, act: Any = None, first: bool = True) -> str:
    """A next step: what to do, the kubectl command that shows the evidence, and the one that acts (if any)."""
    return (f'<div class="next"><b>{"Next step" if first else "Also"}:</b> {esc(action)}'
            f'<pre aria-label="command that shows the evidence">$ {esc(check)}</pre>'
            + (f'<pre aria-label="command that acts">$ {esc(act)}</pre>' if act else "") + "</div>")


def _job(s: JobSection, i: int) -> list[str]:
    f = s.finding
    sev = str(f.get("severity") or "info")
    h = [f'<article class="job" id="job-{i}">',
         f'<h3><span class="badge {esc(sev) if sev in SEVERITY_ORDER else "info"}">{esc(sev)}</span> '
         f"{esc(f.get('namespace'))}/{esc(f.get('job'))}: {esc(f.get('root_cause'))}</h3>",
         f"<p>{esc(f.get('summary'))}</p>"]
    for i, step in enumerate(s.explained.steps):
        h.append(step_html(step.action, step.check, step.act, first=i == 0))
    if s.explained.sentences:
        h.append("<h4>What happened</h4><ul>" + "".join(f"<li>{esc(x)}</li>" for x in s.explained.sentences)
                 + "</ul>")
    meta = [("kind", f.get("job_kind")), ("workload", f.get("workload")), ("pod group", f.get("pod_group")),
            ("started", f.get("started_at")), ("ended", f.get("ended_at") or "ongoing"),
            ("confidence", f.get("confidence")), ("nodes", f.get("nodes"))]
    h.append('<p class="muted">' + " · ".join(f"{esc(k)} {esc(fmt(v))}" for k, v in meta) + "</p>")
    if s.chart:
        h.append(f'<figure><div class="wide-only">{s.chart.wide}</div><div class="narrow-only">{s.chart.narrow}</div>'
                 f"<figcaption>{esc(s.chart.text)}</figcaption></figure>")
    h.append("<details><summary>Layered check (queue, topology, gang, throughput)</summary>")
    rows = []
    for layer, is_cause, items in s.layers:
        facts = "<br>".join(f"{esc(k)} = {esc(fmt(v))}" for k, v in items) or '<span class="muted">no signal</span>'
        verdict = "root cause" if is_cause else ("checked" if items else "no data")
        rows.append(f'<tr class="{"cause" if is_cause else ""}"><td>{esc(layer)}</td><td>{esc(verdict)}</td>'
                    f"<td>{facts}</td></tr>")
    h.append('<div class="scroll"><table><thead><tr><th scope="col">layer</th><th scope="col">verdict</th>'
             f'<th scope="col">what we saw</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></details>')
    evidence = json.dumps(f.get("evidence"), indent=1, default=str, sort_keys=True)
    h.append(f"<details><summary>Raw evidence (JSON)</summary><pre>{esc(evidence)}</pre></details>")
    h.append("</article>")
    return h


def render(data: ReportData) -> str:
    with localtime.using(data.zone):
        return _render(data)


def _render(data: ReportData) -> str:
    h = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         '<meta name="viewport" content="width=device-width, initial-scale=1">',
         '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
         'img-src data:">',
         f"<title>gangscope report: {esc(data.cluster)}</title><style>{CSS}</style></head><body><main>",
         f"<h1>gangscope root-cause report: cluster {esc(data.cluster)}</h1>",
         f'<p class="muted">generated {esc(fmt(data.generated_at))}. {len(data.flagged)} finding(s) need action; '
         f"{data.healthy_jobs} job(s) healthy. Times are {esc(localtime.name())}.</p>"]
    h += _fleet(data)
    h.append('<section id="jobs"><h2>Jobs that need action</h2>')
    if data.flagged:
        rows = [(s.finding.get("severity"), f"{s.finding.get('namespace')}/{s.finding.get('job')}",
                 s.finding.get("root_cause"), s.finding.get("started_at"),
                 s.explained.steps[0].action if s.explained.steps else s.finding.get("summary"))
                for s in data.flagged]
        h.append(table(["severity", "job", "root cause", "since", "next step"], rows, stack=True))
    else:
        h.append("<p>No job needs action.</p>")
    h.append('</section><section id="classes"><h2>Findings by class</h2>')
    if data.by_class:
        h.append(both(charts.bar_chart, items=[(k, float(v)) for k, v in data.by_class],
                       title="findings by root cause", unit="findings", colours=CLASS_COLOURS, category="root cause",
                       uid="classes", desc="; ".join(f"{k}: {v}" for k, v in data.by_class)))
        h.append(table(["root cause", "findings"], data.by_class, stack=True))
    else:
        h.append("<p>No findings.</p>")
    h.append('</section><section id="checks"><h2>Layered check per flagged job</h2>')
    for i, s in enumerate(data.flagged):
        h += _job(s, i)
    h.append("</section>")
    for t in data.tables:
        h.append(f"<section><h2>{esc(t.title)}</h2><p class='muted'>{esc(t.note)}</p>")
        if not t.missing:
            h.append(table(t.cols, t.rows) if t.rows else "<p>None.</p>")
        h.append("</section>")
    h.append("</main></body></html>")
    return "\n".join(h)
