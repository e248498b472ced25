"""The time zone a report shows its times in (``report.timezone``, ``--timezone``; default UTC).

Lake times are UTC; only what a reader sees is converted. The zone is set for the duration of one report
(``using``) in a context variable, so the formatters deep inside charts and next steps need no extra
argument and two reports written at once in different threads (hourly, daily) do not mix their zones.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, tzinfo

_ZONE: ContextVar[tzinfo] = ContextVar("report_zone", default=UTC)


@contextmanager
def using(zone: tzinfo) -> Iterator[None]:
    token = _ZONE.set(zone)
    try:
        yield
    finally:
        _ZONE.reset(token)


def zone() -> tzinfo:
    return _ZONE.get()


def name() -> str:
    """The zone's IANA name (``UTC`` for UTC)."""
    z = _ZONE.get()
    return "UTC" if z is UTC else str(getattr(z, "key", z))


def local(t: datetime) -> datetime:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(_ZONE.get())


def hm(t: datetime) -> str:
    return local(t).strftime("%H:%M")


def clock(t: datetime) -> str:
    """``14:05 UTC`` / ``16:05 CEST``: the abbreviation in force at that instant."""
    lt = local(t)
    return lt.strftime("%H:%M ") + ("UTC" if _ZONE.get() is UTC else lt.strftime("%Z"))


def stamp(t: datetime) -> str:
    lt = local(t)
    return lt.strftime("%Y-%m-%d %H:%M:%SZ") if _ZONE.get() is UTC else lt.strftime("%Y-%m-%d %H:%M:%S %Z")


def axis_label(t0: datetime, t1: datetime) -> str:
    """``time (UTC, 2026-03-29)``; across a DST change or midnight ``time (Europe/Berlin, CET→CEST, …)``."""
    a, b = local(t0), local(t1)
    day = a.strftime("%Y-%m-%d") + ("" if a.date() == b.date() else " to " + b.strftime("%Y-%m-%d"))
    if _ZONE.get() is UTC:
        return f"time (UTC, {day})"
    abbrev = a.strftime("%Z") + ("" if a.strftime("%Z") == b.strftime("%Z") else "→" + b.strftime("%Z"))
    return f"time ({name()}, {abbrev}, {day})"
