"""Time sanity: the one rule set every input time is checked against, once, at the edge (CONTRACT section 2).

A time is refused when it is before 2000-01-01, further than the allowed clock skew (setting
``clock_skew_s``, default 10 min) in the future of when the collector received it, not an RFC 3339
time, or (for millisecond timestamps) implausible in its unit: seconds, microseconds or nanoseconds
where milliseconds are expected, or negative. A refused record is never shifted: it travels with its
reason (``rejected`` in the envelope, docs/records.md) and lands in ``raw.dead_letters``; each one is
counted (by the publisher) in ``gangscope_rejected_at_edge_total``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from gangscope.records import ScrapeBatch

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
EARLIEST_MS = int(EARLIEST.timestamp() * 1000)
DEFAULT_SKEW_S = 600.0

# Object fields holding times: keys ending in these, outside labels/annotations/managedFields (user text).
_TIME_SUFFIXES = ("Timestamp", "Time", "At")
_SKIP = frozenset({"labels", "annotations", "managedFields"})


def _plausible_ms(ts_ms: float, received_ms: int, skew_s: float) -> bool:
    return EARLIEST_MS <= ts_ms <= received_ms + skew_s * 1000


_MS_PER = {"seconds": 1000, "milliseconds": 1, "microseconds": 1e-3, "nanoseconds": 1e-6}


def check_epoch(field: str, value: float, unit: str, received_ms: int, skew_s: float = DEFAULT_SKEW_S) -> str | None:
    """Why a time given as a number of ``unit`` since 1970 is refused, or None when it is sane."""
    if _plausible_ms(value * _MS_PER[unit], received_ms, skew_s):
        return None
    field = f"{field} {int(value) if math.isfinite(value) and value == int(value) else value}"
    if value < 0:
        return f"{field} is negative ({unit} since 1970 expected)"
    for other, factor in _MS_PER.items():
        if other != unit and _plausible_ms(value * factor, received_ms, skew_s):
            return f"{field} looks like {other} ({unit} since 1970 expected)"
    if value * _MS_PER[unit] < EARLIEST_MS:
        return f"{field} is before 2000-01-01"
    return f"{field} is more than {skew_s:g} s in the future of its receipt at {received_ms}"


def check_ms(field: str, ts_ms: int, received_ms: int, skew_s: float = DEFAULT_SKEW_S) -> str | None:
    """Why a millisecond timestamp is refused, or None when it is sane."""
    return check_epoch(field, ts_ms, "milliseconds", received_ms, skew_s)


def check_time(field: str, ts: datetime, received: datetime, skew_s: float = DEFAULT_SKEW_S) -> str | None:
    """Why a time is refused, or None when it is sane."""
    if ts < EARLIEST:
        return f"{field} {ts.isoformat()} is before 2000-01-01"
    if (ts - received).total_seconds() > skew_s:
        return f"{field} {ts.isoformat()} is more than {skew_s:g} s in the future of its receipt at " \
               f"{received.isoformat(timespec='seconds')}"
    return None


def parse_time(text: str) -> datetime:
    """RFC 3339 as Kubernetes writes it; ValueError otherwise (dates alone and bare numbers included)."""
    if len(text) < 20 or text[10] not in "Tt ":
        raise ValueError("not an RFC 3339 date-time")
    dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def object_times(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every time field in a Kubernetes object (``status.conditions[0].lastTransitionTime``)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str) or k in _SKIP:
                continue
            p = f"{path}.{k}" if path else k
            if k.endswith(_TIME_SUFFIXES) and not isinstance(v, (dict, list)):
                if v is not None and v != "":
                    yield p, v
            elif isinstance(v, (dict, list)):
                yield from object_times(v, p)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if isinstance(v, (dict, list)):
                yield from object_times(v, f"{path}[{i}]")


def check_object(obj: dict[str, Any], received: datetime, skew_s: float = DEFAULT_SKEW_S) -> str | None:
    """Why an object's times are refused (the first bad field), or None."""
    for path, value in object_times(obj):
        if not isinstance(value, str):
            continue  # numbers and flags under a time-like name are not times the models read
        try:
            ts = parse_time(value)
        except ValueError:
            return f"{path} {value[:60]!r} is not an RFC 3339 time"
        if reason := check_time(path, ts, received, skew_s):
            return reason
    return None


def split_refused(batch: ScrapeBatch, received_ms: int, skew_s: float = DEFAULT_SKEW_S,
                  where: str = "") -> ScrapeBatch | None:
    """Take the samples whose own timestamp fails time sanity out of ``batch`` (in place); return them as a
    batch carrying the reason (``rejected``), or None when every sample is sane. Samples without a
    timestamp are at ``received_ms`` and always sane."""
    hi = received_ms + int(skew_s * 1000)
    bad = [j for j, t in enumerate(batch.sample_ts_ms) if t is not None and not EARLIEST_MS <= t <= hi]
    if not bad:
        return None
    first = bad[0]
    reason = check_ms("sample timestamp", batch.sample_ts_ms[first], received_ms, skew_s)
    name = batch.series_metric[batch.sample_series[first]]
    more = f" (and {len(bad) - 1} more such samples)" if len(bad) > 1 else ""
    out = ScrapeBatch(cluster=batch.cluster, target=batch.target, job=batch.job, instance=batch.instance,
                      scraped_at_ms=received_ms, rejected=f"{where}{name}: {reason}{more}")
    for j in bad:
        s = batch.sample_series[j]
        out.add_sample(out.add_series(batch.series_metric[s], batch.series_labels[s]), batch.sample_value[j],
                       batch.sample_ts_ms[j])
    drop = set(bad)
    keep = [j for j in range(len(batch.sample_ts_ms)) if j not in drop]
    used = sorted({batch.sample_series[j] for j in keep})  # series left without samples leave too
    new = {old: i for i, old in enumerate(used)}
    batch.series_metric = [batch.series_metric[i] for i in used]
    batch.series_labels = [batch.series_labels[i] for i in used]
    batch.sample_series = [new[batch.sample_series[j]] for j in keep]
    batch.sample_ts_ms = [batch.sample_ts_ms[j] for j in keep]
    batch.sample_value = [batch.sample_value[j] for j in keep]
    return out
