"""``gangscope capture metrics``: record live scrapes as a replay file.

The file is the replay format (CONTRACT section 2): Prometheus text, every sample with its
millisecond timestamp and its target's ``job`` and ``instance`` as labels, one scrape after
another in time order, so ``gangscope replay --metrics FILE`` reproduces the batches.
Failed scrapes have no samples and leave no lines (their health is not replayed).
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from typing import Any, TextIO

from collectors.metrics.parse import _LABEL_NAME, _NAME_OK
from collectors.metrics.scrape import serve
from gangscope.errors import UserError
from gangscope.records import ScrapeBatch

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1h``, ``500ms`` → seconds."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise UserError(f"bad duration {text!r}: expected a positive number with an optional unit ms, s, m or h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def _label_name(k: str) -> str:
    return k if _LABEL_NAME.fullmatch(k) else f'"{_escape(k)}"'


def write_batch(out: TextIO, b: ScrapeBatch) -> int:
    """Write one batch's samples in the replay format; returns the number of samples written. A name outside the
    legacy character set (Prometheus 3's UTF-8 names, e.g. ``http.status``) is written quoted, the metric's inside
    the braces (``{"http.status",job="..."}``), as the text format 1.0.0 does, so the file replays."""
    ident = f'job="{_escape(b.job)}",instance="{_escape(b.instance)}"'
    lines = []
    for s, ts, v in zip(b.sample_series, b.sample_ts_ms, b.sample_value, strict=True):
        labels = b.series_labels[s]
        rest = "".join(f',{_label_name(k)}="{_escape(val)}"' for k, val in labels.items()
                       if k not in ("job", "instance"))
        when = b.scraped_at_ms if ts is None else ts
        name = b.series_metric[s]
        head = f"{name}{{{ident}" if _NAME_OK.fullmatch(name) else f'{{"{_escape(name)}",{ident}'
        lines.append(f"{head}{rest}}} {format_value(v)} {when}\n")
    out.writelines(lines)
    return len(lines)


def capture(settings: Any, out_path: str, duration_s: float | None, stop: threading.Event | None = None,
            client: Any = None) -> tuple[int, int]:
    """Scrape the configured targets for ``duration_s`` (or until ``stop``) into ``out_path``.

    Returns (scrapes, samples) written.
    """
    from collectors.k8s.capture import stop_on_signals

    stop = stop or threading.Event()
    counts = [0, 0]
    try:
        out = open(out_path, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as e:
        raise UserError(f"cannot write {out_path}: {e.strerror}") from None

    def emit(b: ScrapeBatch) -> None:
        if b.up:
            counts[0] += 1
            counts[1] += write_batch(out, b)

    timer = threading.Timer(duration_s, stop.set) if duration_s else None
    try:
        if timer:
            timer.start()
        with stop_on_signals(stop):
            # Parse in this process: the file needs the samples, not their wire form.
            serve(dataclasses.replace(settings, metrics=dataclasses.replace(settings.metrics, parse_workers=0)),
                  emit, stop, client=client)
    finally:
        if timer:
            timer.cancel()
        out.close()
    return counts[0], counts[1]
