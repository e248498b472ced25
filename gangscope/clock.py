"""The time gangscope stamps on what it observes: the wall clock, or a sandbox's faster one.

``gangscope sandbox --speed N`` plays a simulated cluster N times faster than real time; the
objects and samples it serves carry simulated times. A collector that stamped them with the
wall clock would mix two time lines (``observed_at`` against ``creationTimestamp``), so the
sandbox writes a ``clock`` setting and every observation time goes through :func:`now`.
Without that setting, :func:`now` is the wall clock.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

_sim_origin: datetime | None = None
_wall_origin = 0.0
_speed = 1.0


def configure(sim_origin: str | datetime | None, wall_origin: float = 0.0, speed: float = 1.0) -> None:
    """Run on a clock that read ``sim_origin`` at unix time ``wall_origin`` and goes ``speed`` x real time.

    ``None`` goes back to the wall clock.
    """
    global _sim_origin, _wall_origin, _speed
    if isinstance(sim_origin, str):
        sim_origin = datetime.fromisoformat(sim_origin.replace("Z", "+00:00"))
    if speed <= 0:
        raise ValueError(f"clock speed must be positive, got {speed}")
    _sim_origin, _wall_origin, _speed = sim_origin, wall_origin, speed


def now() -> datetime:
    """The current time on gangscope's clock (UTC)."""
    if _sim_origin is None:
        return datetime.now(UTC)
    return _sim_origin + timedelta(seconds=(time.time() - _wall_origin) * _speed)


def now_ms() -> int:
    return int(now().timestamp() * 1000)


def speed() -> float:
    """How many clock seconds pass per wall second (1 without a sandbox clock)."""
    return _speed if _sim_origin is not None else 1.0
