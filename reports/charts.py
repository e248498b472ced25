"""Inline SVG charts for the HTML report: no scripts, fonts or network, every label escaped.

A job's time chart stacks panels (throughput, then its nodes' bandwidth) on one shared
time axis, with admission and gang phases as shaded bands and the finding's onset as a
vertical line across all panels, so cause and effect line up by eye.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import UTC, datetime

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
BAND_COLOURS = {"admission": "#fde2a7", "gang": "#cfe3f7", "running": "#d8f0d2"}


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


@dataclass
class Series:
    name: str
    points: list[tuple[datetime, float]]


@dataclass
class Panel:
    title: str  # e.g. "throughput (tokens/s)"
    series: list[Series] = field(default_factory=list)


@dataclass
class Band:
    label: str
    start: datetime
    end: datetime
    kind: str = "gang"  # admission | gang | running


@dataclass
class Marker:
    label: str
    at: datetime


def _ts(d: datetime) -> float:
    return d.timestamp()


def _fmt_value(v: float) -> str:
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.1f}G"
    if a >= 1e6:
        return f"{v / 1e6:.1f}M"
    if a >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.3g}"


def time_chart(panels: list[Panel], bands: list[Band] | None = None, markers: list[Marker] | None = None,
               width: int = 760, panel_height: int = 130, title: str = "") -> str:
    """Stacked line panels sharing one time axis; returns an ``<svg>`` element."""
    bands, markers = bands or [], markers or []
    times = [_ts(t) for p in panels for s in p.series for t, _ in s.points]
    times += [_ts(b.start) for b in bands] + [_ts(b.end) for b in bands] + [_ts(m.at) for m in markers]
    if not times:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="30" role="img">' \
               f'<text x="4" y="20" font-size="12">{esc(title)}: no samples</text></svg>'
    t0, t1 = min(times), max(times)
    if t1 <= t0:
        t1 = t0 + 60
    left, right, top, gap = 64, 150, 22, 26
    plot_w = width - left - right
    height = top + len(panels) * (panel_height + gap) + 20
    x = lambda t: left + (t - t0) / (t1 - t0) * plot_w  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}" font-family="sans-serif">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{left}" y="14" font-size="12" font-weight="bold">{esc(title)}</text>']
    body_top, body_bottom = top, top + len(panels) * (panel_height + gap) - gap
    for b in bands:
        x0, x1 = x(_ts(b.start)), x(_ts(b.end))
        colour = BAND_COLOURS.get(b.kind, "#eeeeee")
        out.append(f'<rect x="{x0:.1f}" y="{body_top}" width="{max(x1 - x0, 1):.1f}" '
                   f'height="{body_bottom - body_top}" fill="{colour}" opacity="0.7">'
                   f'<title>{esc(b.label)}</title></rect>')
        out.append(f'<text x="{x0 + 2:.1f}" y="{body_bottom - 3}" font-size="9" fill="#555">{esc(b.label)}</text>')
    colour_i = 0
    for pi, panel in enumerate(panels):
        py = top + pi * (panel_height + gap)
        values = [v for s in panel.series for _, v in s.points if v is not None]
        vmax = max(values) if values else 1.0
        vmax = vmax if vmax > 0 else 1.0
        y = lambda v, py=py, vmax=vmax: py + panel_height - (v / vmax) * (panel_height - 8)  # noqa: E731
        if not values:
            out.append(f'<text x="{left + plot_w / 2:.0f}" y="{py + panel_height / 2:.0f}" font-size="11" '
                       'fill="#999" text-anchor="middle">no samples in this window</text>')
        out.append(f'<rect x="{left}" y="{py}" width="{plot_w}" height="{panel_height}" fill="none" stroke="#999"/>')
        out.append(f'<text x="{left - 4}" y="{py + 10}" font-size="9" text-anchor="end">{esc(_fmt_value(vmax))}</text>')
        out.append(f'<text x="{left - 4}" y="{py + panel_height}" font-size="9" text-anchor="end">0</text>')
        out.append(f'<text x="{left + 4}" y="{py + 11}" font-size="10" fill="#333">{esc(panel.title)}</text>')
        for si, s in enumerate(panel.series):
            colour = PALETTE[colour_i % len(PALETTE)]
            colour_i += 1
            pts = sorted((p for p in s.points if p[1] is not None), key=lambda p: p[0])
            if pts:
                path = " ".join(f"{x(_ts(t)):.1f},{y(v):.1f}" for t, v in pts)
                out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.6">'
                           f'<title>{esc(s.name)}</title></polyline>')
            ly = py + 12 + si * 12
            if ly < py + panel_height:
                out.append(f'<rect x="{left + plot_w + 8}" y="{ly - 8}" width="10" height="3" fill="{colour}"/>')
                out.append(f'<text x="{left + plot_w + 22}" y="{ly - 4}" font-size="9">{esc(s.name[:24])}</text>')
    for m in markers:
        mx = x(_ts(m.at))
        out.append(f'<line x1="{mx:.1f}" y1="{body_top - 4}" x2="{mx:.1f}" y2="{body_bottom}" stroke="#d62728" '
                   f'stroke-width="2" stroke-dasharray="5,3"><title>{esc(m.label)}</title></line>')
        out.append(f'<text x="{mx + 3:.1f}" y="{body_top + 2}" font-size="10" fill="#d62728">{esc(m.label)}</text>')
    axis_y = body_bottom + 12
    for i in range(5):
        t = t0 + (t1 - t0) * i / 4
        label = datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M")
        out.append(f'<text x="{x(t):.1f}" y="{axis_y}" font-size="9" text-anchor="middle">{esc(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def bar_chart(items: list[tuple[str, float]], width: int = 520, bar_h: int = 18, title: str = "",
              colours: dict[str, str] | None = None) -> str:
    """Horizontal bars, one per (label, value); returns an ``<svg>`` element."""
    colours = colours or {}
    height = 24 + max(1, len(items)) * (bar_h + 6)
    vmax = max([v for _, v in items] + [1e-9])
    left, right = 190, 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}" font-family="sans-serif">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="4" y="14" font-size="12" font-weight="bold">{esc(title)}</text>']
    for i, (label, v) in enumerate(items):
        y = 22 + i * (bar_h + 6)
        w = (width - left - right) * (v / vmax) if vmax > 0 else 0
        colour = colours.get(label, PALETTE[i % len(PALETTE)])
        out.append(f'<text x="{left - 6}" y="{y + bar_h - 5}" font-size="11" text-anchor="end">{esc(label)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" fill="{colour}">'
                   f'<title>{esc(label)}: {esc(_fmt_value(v))}</title></rect>')
        out.append(f'<text x="{left + w + 4:.1f}" y="{y + bar_h - 5}" font-size="11">{esc(_fmt_value(v))}</text>')
    out.append("</svg>")
    return "".join(out)
