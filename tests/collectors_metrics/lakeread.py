"""Read landed samples back from the lake as comparable tuples (the replay, remote-write and backfill tests)."""

from __future__ import annotations

import json
import math

from gangscope.config import Settings
from pipeline import lake

Sample = tuple[str, str, str, tuple[tuple[str, str], ...], int, str]  # job, instance, metric, labels, ts ms, value


def value_key(v: float | None) -> str:
    """A value as comparable text (NaN equals NaN; None is a value the collector marked missing)."""
    return "none" if v is None else "nan" if math.isnan(v) else repr(float(v))


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
