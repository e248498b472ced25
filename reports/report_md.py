"""The report as Markdown for a chat tool or a ticket: the fleet in three lines, the table of jobs that need
action, then per job three lines (what, why, next step), then the cluster-wide tables.

Text from the cluster is safe in Markdown: HTML entities escaped, Markdown syntax backslashed, newlines
folded (``md``). A command goes in a code span only when it holds nothing that could close the span or
read as HTML; otherwise it is escaped like any other text.
"""

from __future__ import annotations

import re
from typing import Any

from reports import localtime
from reports.report_data import ReportData
from reports.report_html import fmt

_MD_SPECIAL = re.compile(r"([\\`*\[\]|~]|(?<!\w)_|_(?!\w)|^#)")


def md(v: Any) -> str:
    """Text from the cluster, safe in Markdown: HTML entities escaped, Markdown syntax backslashed."""
    text = fmt(v) if not isinstance(v, str) else v
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return " ".join(text.split())  # no newlines: they would break tables


def code(cmd: str) -> str:
    if "`" in cmd or re.search(r"[<>\n]", cmd):
        return md(cmd)
    return f"`{cmd}`"


def _table(cols: list[str], rows: list[tuple[Any, ...]]) -> str:
    out = ["| " + " | ".join(md(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(md(fmt(v)) for v in r) + " |" for r in rows]
    return "\n".join(out)


def render(data: ReportData) -> str:
    with localtime.using(data.zone):
        return _render(data)


def _render(data: ReportData) -> str:
    m = [f"# gangscope root-cause report: cluster {md(data.cluster)}", "",
         f"Generated {md(fmt(data.generated_at))}. {len(data.flagged)} finding(s) need action; "
         f"{data.healthy_jobs} job(s) healthy. Times are {localtime.name()}.", "", "## Fleet", ""]
    fl = data.fleet
    if fl.built:
        line = f"- **{fl.total:,.1f} GPU-hours lost**"
        if fl.previous is not None:
            line += f" ({fl.change() or 0.0:+,.1f} against the previous report, {md(fl.previous_at)})"
        line += ": " + ", ".join(f"{md(c)} {h:,.1f}" for c, _, h in fl.lost) if fl.lost else ""
        m.append(line)
    else:
        m.append("- GPU-hours lost: model not built yet")
    m.append("- Nodes with most faults: " + ("; ".join(f"{md(n)} ({md(w)})" for n, w, _ in fl.nodes[:5])
                                            if fl.nodes else "none"))
    m.append("- ClusterQueues with the longest wait: " + ("; ".join(
        f"{md(q.get('cluster_queue'))} (p95 {float(q['wait_p95_s']) / 60:.0f} min, {md(q.get('pending'))} pending)"
        for q in fl.queues[:5] if isinstance(q.get("wait_p95_s"), int | float)) or "none"))
    m += ["", "## Jobs that need action", ""]
    if data.flagged:
        m.append(_table(["severity", "job", "root cause", "since"],
                        [(s.finding.get("severity"), f"{s.finding.get('namespace')}/{s.finding.get('job')}",
                          s.finding.get("root_cause"), s.finding.get("started_at")) for s in data.flagged]))
    else:
        m.append("No job needs action.")
    m += ["", "## Layered check per flagged job", ""]
    for s in data.flagged:
        f = s.finding
        m += [f"### {md(f.get('severity'))}: {md(f.get('namespace'))}/{md(f.get('job'))}: {md(f.get('root_cause'))}",
              "", f"**What:** {md(f.get('summary'))}  ",
              f"**Why:** {md(' '.join(s.explained.sentences) or '-')}  "]
        step = s.explained.steps[0] if s.explained.steps else None
        if step:
            m.append(f"**Next step:** {md(step.action)} Check: {code(step.check)}"
                     + (f" Act: {code(step.act)}" if step.act else ""))
        m.append("")
    m += ["## Findings by class", ""]
    m.append(_table(["root cause", "findings"], data.by_class) if data.by_class else "No findings.")
    m.append("")
    for t in data.tables:
        m += [f"## {md(t.title)}", "", f"_{md(t.note)}_", ""]
        if not t.missing:
            m.append(_table(t.cols, t.rows) if t.rows else "None.")
        m.append("")
    return "\n".join(m) + "\n"
