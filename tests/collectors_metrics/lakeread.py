"""Read what landed back from the lake: samples as comparable tuples (the replay, remote-write and backfill tests)
and any query's rows (the time-sanity test, bench/hostile.py)."""

from __future__ import annotations

import json
import math

from gangscope.config import Settings
from pipeline import lake

Sample = tuple[str, str, str, tuple[tuple[str, str], ...], int, str]  # job, instance, metric, labels, ts ms, value


def value_key(v: float | None) -> str:
    """A value as comparable text (NaN equals NaN; None is a value the collector marked missing)."""
    return "none" if v is None else "nan" if math.isnan(v) else repr(float(v))


def lake_query(settings: Settings, sql: str) -> list[tuple]:
    """Rows of ``sql`` on a read-only connection, closed again (a writer may be running beside it)."""
    con = lake.connect(settings, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def landed_samples(settings: Settings, where: str = "TRUE") -> list[Sample]:
    """Every sample in raw.metric_samples matching ``where``, sorted; duplicates kept (so they show)."""
    con = lake.connect(settings, read_only=True, create=False)
    try:
        rows = con.execute(f"SELECT job, instance, metric, labels, epoch_ms(ts), value FROM raw.metric_samples "
                           f"WHERE {where}").fetchall()
    finally:
        con.close()
    return sorted((j, i, m, tuple(sorted(json.loads(lb).items())), int(ts), value_key(v))
                  for j, i, m, lb, ts, v in rows)
