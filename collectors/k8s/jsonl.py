"""The watch JSON Lines replay format of CONTRACT section 2: read it, write it.

One watch event per line, as the API's watch stream sends it, ``{"type": ..., "object":
{...}}``, optionally with ``"observedAt": "<RFC 3339>"``. Without it, the time is the
newest timestamp inside the object (see ``object_time``). ``BOOKMARK`` lines (a raw
stream capture may hold them) are skipped; anything else malformed is an error naming
the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from gangscope import clock
from gangscope.errors import UserError
from gangscope.records import WATCH_TYPES, K8sEvent, parse_rfc3339, rfc3339
from gangscope.timesanity import DEFAULT_SKEW_S, check_object, check_time

# events.k8s.io/v1 names core's lastTimestamp ``deprecatedLastTimestamp``.
_EVENT_FIELDS = ("lastTimestamp", "deprecatedLastTimestamp", "eventTime")


def _ts(value: Any) -> datetime | None:
    return parse_rfc3339(value) if isinstance(value, str) and value else None


def object_time(obj: dict[str, Any]) -> datetime | None:
    """The CONTRACT's time of an object without ``observedAt``.

    Events: the newest of ``lastTimestamp``/``eventTime``/``series.lastObservedTime``.
    Others (and Events without those): the newest of ``metadata.creationTimestamp``,
    ``metadata.deletionTimestamp`` and ``status.conditions[].lastTransitionTime``.
    """
    times: list[datetime] = []
    if obj.get("kind") == "Event":
        times = [t for t in (_ts(obj.get(f)) for f in _EVENT_FIELDS) if t]
        series = obj.get("series")
        if isinstance(series, dict) and (t := _ts(series.get("lastObservedTime"))):
            times.append(t)
        if times:
            return max(times)
    meta = obj.get("metadata") or {}
    times = [t for t in (_ts(meta.get("creationTimestamp")), _ts(meta.get("deletionTimestamp"))) if t]
    status = obj.get("status")
    conds = status.get("conditions") if isinstance(status, dict) else None
    if isinstance(conds, list):
        times += [t for t in (_ts(c.get("lastTransitionTime")) for c in conds if isinstance(c, dict)) if t]
    return max(times) if times else None


def parse_line(line: str, cluster: str, where: str, skew_s: float = DEFAULT_SKEW_S,
               max_bytes: int = 16 << 20) -> K8sEvent | None:
    """One line to an event (None for blank and BOOKMARK lines); UserError naming ``where``.

    A line the pipeline must not land but that is no reason to stop the replay (a time that fails time
    sanity, a line larger than ``max_bytes`` or nested too deep to parse) becomes an event carrying its
    ``rejected`` reason, which lands in ``raw.dead_letters``.
    """
    if not line.strip():
        return None
    now = clock.now()  # received now: on a sandbox's clock, its time line
    if len(line) > max_bytes:
        return K8sEvent(cluster, "ADDED", now, rejected=f"{where}: line of {len(line)} bytes exceeds "
                                                         f"kafka.max_record_bytes ({max_bytes})")
    try:
        ev = json.loads(line)
    except RecursionError:
        return K8sEvent(cluster, "ADDED", now, rejected=f"{where}: JSON nested too deep to read")
    except ValueError as e:
        raise UserError(f"{where}: not JSON: {e}") from None
    if not isinstance(ev, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(ev).__name__}")
    etype = ev.get("type")
    if etype == "BOOKMARK":
        return None
    if etype not in WATCH_TYPES:
        raise UserError(f"{where}: type must be one of {', '.join(WATCH_TYPES)}, got {etype!r}")
    obj = ev.get("object")
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise UserError(f"{where}: 'object' must be a Kubernetes object with metadata")
    if not obj.get("kind") or not obj.get("apiVersion"):
        raise UserError(f"{where}: object has no apiVersion/kind")
    raw = ev.get("observedAt")
    try:
        if raw is not None and not isinstance(raw, str):
            raise ValueError(f"observedAt must be an RFC 3339 string, got {raw!r}")
        observed = _ts(raw)
    except (ValueError, TypeError) as e:
        raise UserError(f"{where}: bad timestamp: {e}") from None
    reason = check_time("observedAt", observed, now, skew_s) if observed else None
    try:
        reason = reason or check_object(obj, now, skew_s)
    except RecursionError:
        reason = "object nested too deep to read"
    if reason:
        return K8sEvent(cluster, etype, observed or now, obj, rejected=f"{where}: {reason}")
    if observed is None:
        observed = object_time(obj)  # every time in it parsed above
    if observed is None:
        raise UserError(f"{where}: no observedAt and no timestamp in the object to take the time from")
    return K8sEvent(cluster, etype, observed, obj)


def read_events(path: str | Path, cluster: str, skew_s: float = DEFAULT_SKEW_S,
                max_bytes: int = 16 << 20) -> Iterator[K8sEvent]:
    """Stream the events of a replay file, in file order."""
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the with below
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    lineno = 0
    with f:
        try:
            for lineno, line in enumerate(f, 1):  # noqa: B007 - lineno is read after the loop
                ev = parse_line(line, cluster, f"{path}:{lineno}", skew_s, max_bytes)
                if ev is not None:
                    yield ev
        except UnicodeDecodeError as e:
            raise UserError(f"{path}:{_first_bad_line(path, lineno)}: not UTF-8 text: {e.reason} "
                            f"(byte 0x{e.object[e.start]:02x})") from None


def _first_bad_line(path: str | Path, after: int) -> int:
    """The first line after ``after`` that is not UTF-8 (the text reader decodes ahead, in chunks)."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if n > after:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    return n
    return after + 1


class Writer:
    """Appends watch events with ``observedAt`` (what ``capture`` writes, what replay reads)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.count = 0

    def write(self, ev: K8sEvent) -> None:
        if ev.object is None:
            return  # relist markers have no place in the format
        line = {"type": ev.type, "object": ev.object, "observedAt": rfc3339(ev.observed_at)}
        self.out.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.count += 1

    def flush(self) -> None:
        self.out.flush()
