"""The live page of ``gangscope run`` as HTML: the overview (``/``) and one page per job (``/jobs/NS/JOB``).

Made like the report (``report_html``, whose CSS, tables, next steps, fleet view and charts it reuses): rendered
on the server, no external asset, charts as inline SVG, stacked tables on a phone, every value from the cluster
through ``html.escape``, links percent-encoded, and a Content-Security-Policy that allows one script: the few
lines below, by their hash, which ask the same URL with ``?live=1`` every ``server.page_poll_s`` and swap in the
parts that changed (server-rendered and escaped like the rest). With JavaScript off the page is the same, and
simply does not update itself. Links are relative, so the page also works behind a path prefix (``kubectl proxy``).
There is no form and no button: nothing on it writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from reports import explain as explain_mod
from reports import localtime
from reports.charts import esc
from reports.lakeread import as_dt
from reports.nextsteps import duration
from reports.page_data import FLEET_HOURS, FleetView, JobView, Published
from reports.report_html import CSS, fleet_section, step_html

PAGE_CSS = """
header,main{overflow-wrap:anywhere}
header{border-bottom:2px solid #ccc;margin-bottom:8px}
#fresh p{margin:4px 0}.behind{background:#fdecea;border-left:4px solid #b3261e;padding:6px 10px}
.keeping{color:#1b6e3a}
body[data-offline] #fresh::after{content:"This page cannot reach gangscope now: it shows what it last saw.";
display:block;background:#fff4e5;border-left:4px solid #8a5a00;padding:6px 10px;margin:4px 0}
.finding{border:1px solid #ccc;border-radius:6px;padding:8px 12px;margin:10px 0}
.finding h3{margin:2px 0 4px;overflow-wrap:anywhere}a{color:#0b5394;overflow-wrap:anywhere}
.v{font-weight:700;font-size:13px}.v-problem{color:#b3261e}.v-waiting,.v-recovered{color:#8a5a00}
.v-ok{color:#1b6e3a}.v-not-applicable,.v-no-data{color:#555}
tr.v-row-problem{background:#fdecea}
"""

# The only script the page runs (its CSP names it by hash): poll ``?live=1&v=<version>``; replace #fresh always,
# #live when the server says the content changed; mark the page offline while gangscope cannot be reached.
SCRIPT = (
    "(function(){var b=document.body,v=b.getAttribute('data-v'),ms=1000*(+b.getAttribute('data-poll')||5);"
    "function put(id,h){var e=document.getElementById(id);if(e&&typeof h==='string'){e.innerHTML=h;}}"
    "function tick(){fetch(location.pathname+'?live=1&v='+encodeURIComponent(v),{cache:'no-store',"
    "credentials:'same-origin'}).then(function(r){if(!r.ok){throw new Error('HTTP '+r.status);}return r.json();})"
    ".then(function(d){put('fresh',d.fresh);if(typeof d.body==='string'){put('live',d.body);v=d.v;"
    "b.setAttribute('data-v',v);}b.removeAttribute('data-offline');})"
    ".catch(function(){b.setAttribute('data-offline','1');}).then(function(){setTimeout(tick,ms);});}"
    "setTimeout(tick,ms);})();"
)
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
CSP = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src '{SCRIPT_HASH}'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'")
HEADERS = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store",
           "Content-Security-Policy": CSP + "; frame-ancestors 'none'", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}


@dataclass
class Freshness:
    """How fresh the page's data is, and what is behind (sentences the service wrote)."""

    now: float  # wall clock (unix s)
    last_landing: float | None = None  # the pipeline's last commit
    last_build: float | None = None  # the last model build that succeeded
    data_as_of: datetime | None = None  # the newest time the models saw (the cluster's clock)
    behind: list[str] = field(default_factory=list)


def job_href(namespace: Any, job: Any, root: str = "") -> str:
    """The relative link to a job's page (``root`` leads back to the page's root), each segment
    percent-encoded, so any name is one path segment; escape it again in the attribute."""
    return f"{root}jobs/{quote(str(namespace), safe='')}/{quote(str(job), safe='')}"


def version(body: str) -> str:
    return hashlib.sha1(body.encode()).hexdigest()[:16]


def _ago(now: float, t: float | None) -> str:
    if not t:
        return "never"
    at = localtime.local(datetime.fromtimestamp(t, UTC))
    return f"{duration(max(0.0, now - t))} ago ({at:%H:%M:%S} {'UTC' if localtime.name() == 'UTC' else f'{at:%Z}'})"


def freshness(f: Freshness) -> str:
    """The ``#fresh`` block: last landing, last build, the data's end, and plainly what is behind."""
    data = (f" · data up to {esc(localtime.stamp(f.data_as_of))} (the cluster's clock)" if f.data_as_of else "")
    h = [f"<p>Last landing {esc(_ago(f.now, f.last_landing))} · last model build {esc(_ago(f.now, f.last_build))}"
         f"{data}</p>"]
    if f.behind:
        h += [f'<p class="behind"><b>Behind:</b> {esc(s)}</p>' for s in f.behind]
    else:
        h.append('<p class="keeping">The pipeline and the model builds are keeping up.</p>')
    return "".join(h)


def shell(title: str, heading: str, body: str, fresh: str, poll_s: float, nav: str = "") -> str:
    """The whole page: head with the CSP, the heading, ``#fresh`` and ``#live`` (what the poll replaces)."""
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
        f'<meta name="referrer" content="no-referrer"><title>{esc(title)}</title><style>{CSS}{PAGE_CSS}</style>'
        "</head>",
        f'<body data-v="{esc(version(body))}" data-poll="{poll_s:g}"><header>{nav}<h1>{heading}</h1>',
        f'<div id="fresh" role="status">{fresh}</div>',
        "<noscript><p class=\"muted\">JavaScript is off: this page does not update itself; reload it to see "
        "changes.</p></noscript></header>",
        f'<main id="live">{body}</main>',
        '<footer><p class="muted">Read-only: gangscope never changes the cluster from here; the commands are for '
        "you to run.</p></footer>",
        f"<script>{SCRIPT}</script></body></html>"])


def live_json(body: str, fresh: str, since: str) -> bytes:
    """The poll's answer: the fresh block always, the body only when its version is not ``since``."""
    v = version(body)
    return json.dumps({"v": v, "fresh": fresh, "body": None if v == since else body}).encode()


# --- the overview ------------------------------------------------------------------------------------------------

def _when(t: Any) -> str:
    d = as_dt(t)
    return f'<time datetime="{esc(t)}">{esc(localtime.stamp(d))}</time>' if d else "–"


def _finding(f: dict[str, Any], now: datetime) -> str:
    sev = str(f.get("severity") or "info")
    start = as_dt(f.get("started_at"))
    lasting = f" ({esc(duration((now - start).total_seconds()))})" if start and now > start else ""
    nodes = f" · nodes {esc(', '.join(map(str, f.get('nodes') or [])))}" if f.get("nodes") else ""
    steps = f.get("next_steps") or []
    h = [f'<article class="finding" data-finding-id="{esc(f.get("finding_id"))}" '
         f'data-job="{esc(f.get("namespace"))}/{esc(f.get("job"))}" data-cause="{esc(f.get("root_cause"))}">',
         f'<h3><span class="badge {esc(sev) if sev in ("critical", "warning", "info") else "info"}">{esc(sev)}</span> '
         f'<a href="{esc(job_href(f.get("namespace"), f.get("job")))}">{esc(f.get("namespace"))}/{esc(f.get("job"))}'
         f"</a>: {esc(f.get('root_cause'))}</h3>",
         f'<p class="muted">since {_when(f.get("started_at"))}{lasting}{nodes}</p>',
         f"<p>{esc(f.get('summary'))}</p>"]
    if steps:
        s = steps[0]
        h.append(step_html(s.get("action"), s.get("check"), s.get("act")))
    h.append("</article>")
    return "".join(h)


def _resolved(rows: list[dict[str, Any]]) -> str:
    cols = ("job", "root cause", "severity", "from", "to", "summary")
    head = "".join(f'<th scope="col">{c}</th>' for c in cols)
    body = []
    for f in rows:
        cells = [f'<a href="{esc(job_href(f.get("namespace"), f.get("job")))}">{esc(f.get("namespace"))}/'
                 f'{esc(f.get("job"))}</a>', esc(f.get("root_cause")), esc(f.get("severity")),
                 _when(f.get("started_at")), _when(f.get("ended_at")), esc(f.get("summary"))]
        body.append(f'<tr data-finding-id="{esc(f.get("finding_id"))}">'
                    + "".join(f'<td data-label="{c}">{v}</td>' for c, v in zip(cols, cells, strict=True)) + "</tr>")
    return (f'<table class="stack" id="resolved-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}'
            "</tbody></table>")


def overview_body(found: Published, fv: FleetView | None, now: datetime, resolved_hours: float) -> str:
    """Open findings first, then those resolved in the last hours, then the fleet."""
    h = [f'<section id="open"><h2>Open findings ({found.open_total})</h2>']
    if not found.read:
        h.append("<p>No model build has published findings yet.</p>")
    elif not found.open:
        h.append("<p>Nothing is wrong right now: no finding is open.</p>")
    h += [_finding(f, now) for f in found.open]
    if found.open_total > len(found.open):
        h.append(f'<p class="muted">{found.open_total - len(found.open)} more not shown (the least severe, oldest).'
                 "</p>")
    h.append(f'</section><section id="resolved"><h2>Resolved in the last {resolved_hours:g} h '
             f"({found.resolved_total})</h2>")
    h.append(_resolved(found.resolved) if found.resolved else "<p>None.</p>")
    h.append("</section>")
    if fv is None:
        h.append('<section id="fleet"><h2>Fleet</h2><p>Reading the marts…</p></section>')
    elif not fv.fleet.built:
        h.append('<section id="fleet"><h2>Fleet</h2><p>model not built yet</p></section>')
    else:
        span = f" since {esc(localtime.stamp(fv.since))}" if fv.since else ""
        intro = (f"<p><b>{fv.fleet.total:,.1f} GPU-hours</b> lost by incidents that started in the last "
                 f"{FLEET_HOURS} h of data{span}.</p>")
        h += fleet_section(fv.fleet, intro, heading=f"GPU-hours lost (last {FLEET_HOURS} h)", changes=False)
    return "".join(h)


def overview(cluster: str, body: str, fresh: str, poll_s: float) -> str:
    return shell(f"gangscope: {cluster}", f"gangscope: what is wrong now in cluster {esc(cluster)}", body, fresh,
                 poll_s)


# --- one job -----------------------------------------------------------------------------------------------------

def job_body(jv: JobView) -> str:
    """``gangscope explain`` as a page: the job, its verdict, the layers, its time line, findings and next steps."""
    e = jv.explanation
    h = [f'<p class="facts">{esc(explain_mod.facts_line(e))}</p>',
         f'<p class="verdict"><b>{esc(explain_mod.verdict_line(e))}</b></p>',
         '<section id="layers"><h2>Layered check</h2><table class="stack layers"><thead><tr>'
         '<th scope="col">#</th><th scope="col">layer</th><th scope="col">verdict</th>'
         '<th scope="col">what we saw</th></tr></thead><tbody>']
    for i, layer in enumerate(e.layers, 1):
        cls = layer.verdict.replace(" ", "-")
        evidence = json.dumps(layer.evidence, indent=1, default=str, sort_keys=True)
        h.append(f'<tr class="v-row-{esc(cls)}" data-layer="{esc(layer.key)}" data-verdict="{esc(layer.verdict)}">'
                 f'<td data-label="#">{i}</td><td data-label="layer">{esc(layer.title)}</td>'
                 f'<td data-label="verdict"><span class="v v-{esc(cls)}">{esc(layer.verdict.upper())}</span></td>'
                 f'<td data-label="what we saw">{esc(layer.summary)}'
                 + (f"<details><summary>evidence</summary><pre>{esc(evidence)}</pre></details>" if layer.evidence
                    else "") + "</td></tr>")
    h.append("</tbody></table></section>")
    h.append('<section id="timeline"><h2>Time line</h2>')
    if jv.chart:
        h.append(f'<figure><div class="wide-only">{jv.chart.wide}</div><div class="narrow-only">{jv.chart.narrow}'
                 f"</div><figcaption>{esc(jv.chart.text)}</figcaption></figure>")
    else:
        h.append("<p>No samples to chart.</p>")
    h.append('</section><section id="findings"><h2>Findings and next steps</h2>')
    flagged = [x for x in e.findings if x.get("root_cause") != "healthy"]
    for x in flagged:
        h.append(f'<article class="finding" data-cause="{esc(x.get("root_cause"))}" '
                 f'data-state="{"resolved" if x.get("ended_at") else "open"}">'
                 f"<h3>{esc(explain_mod.finding_line(x))}</h3><p>{esc(x.get('summary'))}</p>")
        if x.get("evidence_text"):
            h.append("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in x["evidence_text"]) + "</ul>")
        h += [step_html(s.get("action"), s.get("check"), s.get("act"), first=i == 0)
              for i, s in enumerate(x.get("next_steps") or [])]
        h.append("</article>")
    if not flagged:
        h.append(f"<p>{esc(explain_mod.no_finding_line(e))}</p>")
    h.append("</section>")
    return "".join(h)


def _back() -> str:
    return '<nav><a href="../../">← what is wrong now</a></nav>'


def job_page(namespace: str, job: str, kind: str | None, body: str, fresh: str, poll_s: float) -> str:
    title = f"{namespace}/{job}" + (f" ({kind})" if kind else "")
    return shell(f"gangscope: {title}", esc(title), body, fresh, poll_s, nav=_back())


def unknown_job(namespace: str, job: str, closest: list[str]) -> str:
    """The page of a job the lake does not hold, with links to the closest names."""
    links = "".join(f'<li><a href="{esc(job_href(*c.split("/", 1), root="../../"))}">{esc(c)}</a></li>'
                    for c in closest if "/" in c)
    body = (f"<p>No job {esc(namespace)}/{esc(job)} in the lake (yet).</p>"
            + (f"<p>Closest names:</p><ul>{links}</ul>" if links else ""))
    return shell("gangscope: unknown job", "Unknown job", body, "", 3600, nav=_back())
