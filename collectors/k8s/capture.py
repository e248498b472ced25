"""``gangscope capture k8s``: record a live cluster's watch events to a replay file.

Writes the JSON Lines format of CONTRACT section 2 with ``observedAt`` on every line,
so an incident recorded on a real cluster replays here with ``gangscope replay --k8s``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from collectors.k8s.client import Client
from collectors.k8s.collector import K8sCollector, locked
from collectors.k8s.jsonl import Writer
from gangscope.config import Settings
from gangscope.errors import UserError

log = logging.getLogger(__name__)

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h`` to seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text or "")
    if not m:
        raise UserError(f"--duration: expected a number with an optional unit s, m or h, got {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set ``stop`` (in the main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def capture(settings: Settings, client: Client, out: Path, duration_s: float | None,
            stop: threading.Event | None = None) -> int:
    """Watch until ``duration_s`` passes (or ``stop``); returns the number of events written."""
    stop = stop or threading.Event()
    try:
        # Line-buffered: a capture cut short (kill, crash) keeps every event written so far.
        f = open(out, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed below
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror}") from None
    writer = Writer(f)
    collector = K8sCollector(settings, client, locked(writer.write))
    timer = threading.Timer(duration_s, stop.set) if duration_s else None
    try:
        if timer:
            timer.daemon = True
            timer.start()
        with stop_on_signals(stop):
            collector.run(stop)
    finally:
        if timer:
            timer.cancel()
        collector.close()
        f.close()
    return writer.count
