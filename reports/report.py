"""The root-cause report (CONTRACT section 5): one self-contained HTML file, or Markdown.

The report reads the marts through a read-only connection, so it can be written while the pipeline
lands data (``report_data.collect``); ``report_html`` and ``report_md`` format it. Each report leaves a
one-line summary in its directory, which the next report of the same kind compares its fleet figures with.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gangscope.config import Settings, report_zone
from reports import fleet, report_html, report_md
from reports.lakeread import forget
from reports.report_data import collect


def default_path(settings: Settings, fmt: str, when: datetime | None = None) -> Path:
    when = when or datetime.now(UTC)
    base = Path(settings.schedule.reports_dir) if settings.schedule.reports_dir else settings.data / "reports"
    return base / f"gangscope-report-{when:%Y%m%dT%H%M%SZ}.{'html' if fmt == 'html' else 'md'}"


def write_report(settings: Settings, fmt: str = "html", out: Path | None = None,
                 since: datetime | None = None, kind: str = "report") -> Path:
    """Write the report as ``fmt`` (html or md) to ``out`` (default ``<data>/reports/...``); return its path.

    ``kind`` (``report``, ``hourly``, ``daily``) picks the previous report the fleet trend compares with.
    """
    from gangscope.errors import UserError
    from reports.sqlshell import connect_read_only

    if fmt not in ("html", "md"):
        raise UserError(f"unknown report format {fmt!r} (choose html or md)")
    out = Path(out) if out else default_path(settings, fmt)
    con = connect_read_only(settings)
    try:
        data = collect(con, settings.cluster, since=since, zone=report_zone(settings.report.timezone))
    finally:
        forget(con)
        con.close()
    data.fleet.previous, data.fleet.previous_at = fleet.previous(out.parent, settings.cluster, kind, fmt)
    text = report_html.render(data) if fmt == "html" else report_md.render(data)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)  # a reader never sees half a report
    if data.fleet.built:
        fleet.record(out.parent, settings.cluster, kind, fmt, out, data.generated_at, data.fleet.figures())
    return out
