"""Inline SVG charts for the HTML report: no scripts, fonts or network, every label escaped.

A job's chart is one time line: a lane of its layers (queued, admitted, gang assembling, starting up, running,
evicted) as coloured bands, then panels (throughput against its baseline, the bandwidth of its worst
node) on the same time axis, with the finding's onset as a dashed line across all of them, so cause and
effect line up by eye. Every chart has a ``<title>``, a ``<desc>`` (its text alternative), a labelled
time axis and a labelled value axis with units. Colours are the Okabe-Ito palette (safe for the common
colour-vision deficiencies), and lines also differ by dash, so no meaning rests on colour alone.
Times are shown in the report's zone (``localtime``), named on the time axis.
Each chart is drawn for a given width: the report draws it twice (phone and desktop) and shows one.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import UTC, datetime

from reports import localtime

# Okabe & Ito (2008): distinguishable with protanopia, deuteranopia and tritanopia.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
LANE_COLOURS = {"queued": "#E69F00", "admitted": "#56B4E9", "gang assembling": "#CC79A7", "gang incomplete": "#CC79A7",
                "starting up": "#F0E442", "running": "#009E73", "evicted": "#D55E00"}
DASHES = ("", "6,3", "2,2", "8,3,2,3")


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


@dataclass
class Series:
    name: str
    points: list[tuple[datetime, float]]
    dashed: bool = False


@dataclass
class Panel:
    title: str  # what is plotted, e.g. "throughput"
    unit: str = ""  # e.g. "items/s"; the value axis is labelled "<title> (<unit>)"
    series: list[Series] = field(default_factory=list)


@dataclass
class Band:
    label: str  # queued | admitted | gang assembling | starting up | running | evicted
    start: datetime
    end: datetime
    kind: str = ""


@dataclass
class Marker:
    label: str
    at: datetime


def _fmt_value(v: float) -> str:
    a = abs(v)
    for div, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{p}"
    return f"{v:.3g}"


def _head(width: int, height: int, uid: str, title: str, desc: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-labelledby="{uid}-t {uid}-d" font-family="sans-serif" class="chart" '
            'style="max-width:100%;height:auto">',
            f'<title id="{uid}-t">{esc(title)}</title><desc id="{uid}-d">{esc(desc)}</desc>',
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>']


def time_chart(panels: list[Panel], bands: list[Band] | None = None, markers: list[Marker] | None = None,
               width: int = 760, title: str = "", desc: str = "", uid: str = "c", narrow: bool = False) -> str:
    """The job time line: a lane of bands, then line panels sharing one time axis; returns an ``<svg>``."""
    bands, markers = bands or [], markers or []
    fs = 11 if narrow else 12
    times = [p[0].timestamp() for pa in panels for s in pa.series for p in s.points]
    times += [b.start.timestamp() for b in bands] + [b.end.timestamp() for b in bands]
    times += [m.at.timestamp() for m in markers]
    left, right = (40, 8) if narrow else (56, 16)
    plot_w = width - left - right
    if not times:
        out = _head(width, 40, uid, title, desc or "no samples")
        out.append(f'<text x="4" y="24" font-size="{fs}">{esc(title)}: no samples</text></svg>')
        return "".join(out)
    t0, t1 = min(times), max(times)
    t1 = t1 if t1 > t0 else t0 + 60

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * plot_w

    panel_h = 100 if narrow else 120
    y = 22 + fs  # below the title
    body: list[str] = [f'<text x="4" y="{fs + 4}" font-size="{fs + 1}" font-weight="bold">{esc(title)}</text>']
    if bands:  # the lane of layers
        body.append(f'<text x="4" y="{y}" font-size="{fs}" class="y-label">layers</text>')
        lane_y = y + 4
        for b in bands:
            x0, x1 = x(b.start.timestamp()), x(b.end.timestamp())
            colour = LANE_COLOURS.get(b.label, "#999999")
            body.append(f'<rect x="{x0:.1f}" y="{lane_y}" width="{max(x1 - x0, 1.5):.1f}" height="18" fill="{colour}">'
                        f'<title>{esc(b.label)} {localtime.hm(b.start)}-{esc(localtime.clock(b.end))}</title></rect>')
            if x1 - x0 > len(b.label) * fs * 0.6 + 6:
                body.append(f'<text x="{x0 + 3:.1f}" y="{lane_y + 13}" font-size="{fs}" fill="#000">'
                            f'{esc(b.label)}</text>')
        # A legend line for the bands too narrow to carry their label.
        lx = left
        ly = lane_y + 18 + fs + 4
        for label in dict.fromkeys(b.label for b in bands):
            w = len(label) * fs * 0.6 + 18
            if lx + w > width - right:
                lx, ly = left, ly + fs + 4
            body.append(f'<rect x="{lx:.1f}" y="{ly - fs + 2}" width="10" height="10" '
                        f'fill="{LANE_COLOURS.get(label, "#999999")}"/>'
                        f'<text x="{lx + 13:.1f}" y="{ly}" font-size="{fs}">{esc(label)}</text>')
            lx += w
        y = ly + 10
    top_of_plots = y
    first_py: float | None = None
    for panel in panels:
        values = [v for s in panel.series for _, v in s.points if v is not None]
        vmax = max(values) if values else 1.0
        vmax = vmax if vmax > 0 else 1.0
        label = f"{panel.title} ({panel.unit})" if panel.unit else panel.title
        y += fs + 6
        body.append(f'<text x="4" y="{y}" font-size="{fs}" class="y-label">{esc(label)}</text>')
        # legend of the panel's series, after its label on the same line or the next
        lx, ly = 4 + len(label) * fs * 0.6 + 14, y
        for si, s in enumerate(panel.series):
            w = len(s.name) * fs * 0.6 + 30
            if lx + w > width - right:
                lx, ly = 4, ly + fs + 4
            colour = PALETTE[si % len(PALETTE)]
            dash = "4,3" if s.dashed else ""
            body.append(f'<line x1="{lx:.1f}" y1="{ly - 4}" x2="{lx + 20:.1f}" y2="{ly - 4}" stroke="{colour}" '
                        f'stroke-width="2.5" stroke-dasharray="{dash}"/>'
                        f'<text x="{lx + 24:.1f}" y="{ly}" font-size="{fs}">{esc(s.name)}</text>')
            lx += w
        py = ly + 8
        first_py = py if first_py is None else first_py
        body.append(f'<rect x="{left}" y="{py}" width="{plot_w}" height="{panel_h}" fill="none" stroke="#888"/>')
        for frac in (0.0, 0.5, 1.0):
            gy = py + panel_h - frac * (panel_h - 6)
            body.append(f'<line x1="{left}" y1="{gy:.1f}" x2="{left + plot_w}" y2="{gy:.1f}" stroke="#ddd"/>'
                        f'<text x="{left - 4}" y="{gy + 4:.1f}" font-size="{fs - 1}" text-anchor="end">'
                        f'{esc(_fmt_value(vmax * frac))}</text>')
        if not values:
            body.append(f'<text x="{left + plot_w / 2:.0f}" y="{py + panel_h / 2:.0f}" font-size="{fs}" fill="#555" '
                        'text-anchor="middle">no samples in this window</text>')
        for si, s in enumerate(panel.series):
            pts = sorted((p for p in s.points if p[1] is not None), key=lambda p: p[0])
            if not pts:
                continue
            path = " ".join(f"{x(t.timestamp()):.1f},{py + panel_h - v / vmax * (panel_h - 6):.1f}" for t, v in pts)
            dash = ' stroke-dasharray="6,4"' if s.dashed else ""
            body.append(f'<polyline points="{path}" fill="none" stroke="{PALETTE[si % len(PALETTE)]}" '
                        f'stroke-width="{1.6 if s.dashed else 2}"{dash}><title>{esc(s.name)}</title></polyline>')
        y = py + panel_h
    bottom = y
    for i, m in enumerate(markers):  # labels one under the other: markers close in time would print over each other
        mx = x(m.at.timestamp())
        body.append(f'<line x1="{mx:.1f}" y1="{top_of_plots}" x2="{mx:.1f}" y2="{bottom}" stroke="#000" '
                    f'stroke-width="1.5" stroke-dasharray="5,3"><title>{esc(m.label)}</title></line>')
        anchor = "end" if mx > left + plot_w * 0.6 else "start"
        ly = (first_py or top_of_plots) + (i + 1) * (fs + 2)
        body.append(f'<text x="{mx + (-3 if anchor == "end" else 3):.1f}" y="{ly}" font-size="{fs}" '
                    f'text-anchor="{anchor}" font-weight="bold">{esc(m.label)}</text>')
    ticks = 3 if narrow else 5
    for i in range(ticks):
        t = t0 + (t1 - t0) * i / (ticks - 1)
        anchor = "start" if i == 0 else ("end" if i == ticks - 1 else "middle")
        body.append(f'<text x="{x(t):.1f}" y="{bottom + fs + 3}" font-size="{fs - 1}" text-anchor="{anchor}">'
                    f'{esc(localtime.hm(datetime.fromtimestamp(t, tz=UTC)))}</text>')
    axis = localtime.axis_label(datetime.fromtimestamp(t0, tz=UTC), datetime.fromtimestamp(t1, tz=UTC))
    # A long zone name does not fit a phone's width on one line: the zone, then abbreviation and date below it.
    head, _, rest = axis.partition(", ")
    lines = [axis] if len(axis) * fs * 0.58 <= width - 8 or not rest else [head + ",", rest]
    body.append(f'<text x="{width / 2:.0f}" y="{bottom + 2 * fs + 8}" font-size="{fs}" text-anchor="middle" '
                'class="x-label">' + "".join(f'<tspan x="{width / 2:.0f}" dy="{0 if i == 0 else fs + 3}">{esc(line)}'
                                             "</tspan>" for i, line in enumerate(lines)) + "</text>")
    height = bottom + 2 * fs + 14 + (len(lines) - 1) * (fs + 3)
    return "".join(_head(width, height, uid, title, desc) + body + ["</svg>"])


def bar_chart(items: list[tuple[str, float]], width: int = 560, title: str = "", unit: str = "", uid: str = "b",
              colours: dict[str, str] | None = None, desc: str = "", narrow: bool = False,
              category: str = "category") -> str:
    """Horizontal bars, one per (label, value), labels above the bars on a phone; returns an ``<svg>``."""
    colours = colours or {}
    fs = 11 if narrow else 12
    bar_h = 14 if narrow else 16
    left = 4 if narrow else 200
    row = bar_h + (fs + 10 if narrow else 8)
    height = 30 + fs + max(1, len(items)) * row + 2 * fs + 10
    vmax = max([v for _, v in items] + [1e-9])
    plot_w = width - left - 60
    out = _head(width, height, uid, title, desc)
    out.append(f'<text x="4" y="{fs + 4}" font-size="{fs + 1}" font-weight="bold">{esc(title)}</text>')
    out.append(f'<text x="{4 if narrow else left - 6}" y="{24 + fs // 2}" font-size="{fs - 1}" '
               f'text-anchor="{"start" if narrow else "end"}" class="y-label" fill="#555">'
               f'{esc(category)}</text>')
    y = 30 + (fs if narrow else 0)
    for i, (label, v) in enumerate(items):
        w = plot_w * (v / vmax) if vmax > 0 else 0
        colour = colours.get(label, PALETTE[i % len(PALETTE)])
        if narrow:
            out.append(f'<text x="4" y="{y + fs}" font-size="{fs}">{esc(label)}</text>')
            by = y + fs + 4
        else:
            out.append(f'<text x="{left - 6}" y="{y + bar_h - 3}" font-size="{fs}" text-anchor="end">'
                       f'{esc(label)}</text>')
            by = y
        out.append(f'<rect x="{left}" y="{by}" width="{max(w, 1):.1f}" height="{bar_h}" fill="{colour}">'
                   f'<title>{esc(label)}: {esc(_fmt_value(v))} {esc(unit)}</title></rect>')
        out.append(f'<text x="{left + w + 4:.1f}" y="{by + bar_h - 3}" font-size="{fs}">{esc(_fmt_value(v))}</text>')
        y += row
    out.append(f'<line x1="{left}" y1="{y}" x2="{left + plot_w}" y2="{y}" stroke="#888"/>')
    out.append(f'<text x="{left}" y="{y + fs + 2}" font-size="{fs - 1}">0</text>'
               f'<text x="{left + plot_w}" y="{y + fs + 2}" font-size="{fs - 1}" text-anchor="end">'
               f'{esc(_fmt_value(vmax))}</text>')
    out.append(f'<text x="{left + plot_w / 2:.0f}" y="{y + 2 * fs + 6}" font-size="{fs}" text-anchor="middle" '
               f'class="x-label">{esc(unit)}</text>')
    out.append("</svg>")
    return "".join(out)
