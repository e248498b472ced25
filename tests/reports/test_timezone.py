"""``report.timezone``: every time a report shows is in the configured IANA zone, named on the axis."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from gangscope import config
from reports import charts, localtime
from reports.nextsteps import clock
from reports.report import write_report

BERLIN = ZoneInfo("Europe/Berlin")
# 2026-03-29 01:00 UTC: Berlin goes from 02:00 CET (+1) to 03:00 CEST (+2).
DST = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)


def _chart(zone) -> str:
    points = [(DST + timedelta(minutes=m), 100.0 + m) for m in range(0, 121, 10)]
    bands = [charts.Band("running", DST, DST + timedelta(hours=2))]
    with localtime.using(zone):
        return charts.time_chart([charts.Panel("throughput", "items/s", [charts.Series("job", points)])], bands,
                                 [charts.Marker("onset", DST + timedelta(hours=1))], title="t", uid="x")


def _ticks(svg: str) -> list[str]:
    return re.findall(r'<text [^>]*text-anchor="(?:start|middle|end)">(\d\d:\d\d)</text>', svg)


def _axis(svg: str) -> list[str]:
    label = re.search(r'class="x-label">(.*?)</text>', svg)
    assert label, svg
    return re.findall(r"<tspan[^>]*>([^<]*)</tspan>", label.group(1))


def test_long_zone_name_wraps_on_a_phone() -> None:
    zone = ZoneInfo("America/Argentina/ComodRivadavia")
    points = [(DST + timedelta(minutes=m), 1.0) for m in range(0, 121, 30)]
    with localtime.using(zone):
        narrow = charts.time_chart([charts.Panel("throughput", "items/s", [charts.Series("job", points)])],
                                   width=340, narrow=True, title="t", uid="n")
        wide = charts.time_chart([charts.Panel("throughput", "items/s", [charts.Series("job", points)])],
                                 width=760, title="t", uid="w")
    assert _axis(narrow) == ["time (America/Argentina/ComodRivadavia,", "-03, 2026-03-28)"]
    assert _axis(wide) == ["time (America/Argentina/ComodRivadavia, -03, 2026-03-28)"]


def test_axis_labels_shift_across_a_dst_change() -> None:
    utc, berlin = _chart(UTC), _chart(BERLIN)
    assert _ticks(utc) == ["00:00", "00:30", "01:00", "01:30", "02:00"]
    # 00:00Z is 01:00 CET; 01:00Z is 03:00 CEST (02:00-03:00 local never happens that night).
    assert _ticks(berlin) == ["01:00", "01:30", "03:00", "03:30", "04:00"]
    assert _axis(utc) == ["time (UTC, 2026-03-29)"]
    assert _axis(berlin) == ["time (Europe/Berlin, CET→CEST, 2026-03-29)"]
    assert "running 01:00-04:00 CEST</title>" in berlin and "running 00:00-02:00 UTC</title>" in utc


def test_axis_names_both_dates_across_local_midnight() -> None:
    t0 = datetime(2026, 7, 1, 21, 30, tzinfo=UTC)  # 23:30 CEST; the window ends 01:30 CEST the next day
    with localtime.using(BERLIN):
        assert (localtime.axis_label(t0, t0 + timedelta(hours=2))
                == "time (Europe/Berlin, CEST, 2026-07-01 to 2026-07-02)")
        assert clock(t0) == "23:30 CEST" and localtime.stamp(t0) == "2026-07-01 23:30:00 CEST"
    assert clock(t0) == "21:30 UTC" and localtime.stamp(t0) == "2026-07-01 21:30:00Z"


@pytest.mark.parametrize("bad", ["Mars/Olympus_Mons", "Europe", "", "../../etc/passwd", "/etc/localtime", "CEST+2"])
def test_bad_zone_is_a_config_error_naming_the_key(bad: str) -> None:
    with pytest.raises(config.ConfigError, match=r"^report\.timezone: unknown time zone"):
        config.load(overrides={"report": {"timezone": bad}}, environ={})
    with pytest.raises(config.ConfigError, match=r"^report\.timezone: "):
        config.load(environ={"GANGSCOPE_REPORT_TIMEZONE": bad})


def test_cli_flag_sets_the_zone(tmp_path) -> None:
    from gangscope.app import cli

    args = cli.build_parser().parse_args(["report", "--timezone", "Asia/Kolkata", "--data", str(tmp_path)])
    s = config.load(overrides=cli._overrides(args), environ={"GANGSCOPE_REPORT_TIMEZONE": "Europe/Berlin"})
    assert s.report.timezone == "Asia/Kolkata"  # flag beats environment
    assert config.load(environ={"GANGSCOPE_REPORT_TIMEZONE": "Europe/Berlin"}).report.timezone == "Europe/Berlin"


def test_report_times_in_the_configured_zone(report_lake, tmp_path) -> None:
    """The same lake, UTC and Asia/Kolkata (+05:30, no DST): tables, sentences and axes all move by 5:30."""
    utc = write_report(report_lake, "html", tmp_path / "utc.html").read_text()
    settings = config.load(overrides={"data": str(report_lake.data), "report": {"timezone": "Asia/Kolkata"}},
                           environ={})
    ist = write_report(settings, "html", tmp_path / "ist.html").read_text()
    md = write_report(settings, "md", tmp_path / "ist.md").read_text()
    assert "Times are UTC." in utc and "Times are Asia/Kolkata." in ist and "Times are Asia/Kolkata." in md
    body = utc.split("Times are UTC.", 1)[1]  # past the time it was generated (differs between the two runs)
    stamps = re.findall(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)Z", body)
    assert stamps
    for s in stamps[:20]:
        local = (datetime.fromisoformat(s + "+00:00") + timedelta(hours=5, minutes=30)).strftime("%F %T")
        assert f"{local} IST" in ist, s
    assert not re.search(r"\d\d:\d\d:\d\dZ", ist)  # no UTC time left in the page
    assert "time (Asia/Kolkata, IST, " in ist and "time (UTC, " not in ist
