"""Replay files: samples with their own timestamps, in the formats users have (CONTRACT section 2).

Recognised by content, no flag: Prometheus text (0.0.4) with millisecond timestamps (a
capture, a simulator file, a raw exporter dump with timestamps); the output of
``promtool tsdb dump`` (the same, with the name inside the braces); and OpenMetrics text
(timestamps in seconds, ``# EOF``, exemplars and ``_created`` dropped), which is also what
``promtool tsdb dump-openmetrics`` prints. A file is OpenMetrics when its first slice has a
``# EOF``/``# UNIT`` line, an OpenMetrics-only type, or a first timestamp in seconds.

The file is read in slices of lines and parsed with the same fast parser as live scrapes,
so a multi-GB file streams in bounded memory. Samples are grouped into one ``ScrapeBatch``
per (job, instance, timestamp). The target identity comes from each sample's ``job`` and
``instance`` labels, else from the ``job``/``instance`` arguments, else from the file's name
without its extension (``node-7.prom`` is job and instance ``node-7``: a raw dump named
after its node joins to that node by the ``instance`` rule). The arguments win over the
labels. Those two labels are target labels, so they leave the sample's label set (as in a
live scrape, where they are columns of the batch, not labels).

Batches come out in timestamp order. A batch is held until the file has moved past its
timestamp, so within a bounded window (``max_buffered_samples``) the file need not be
sorted (e.g. each series listed with all its timestamps in turn, as ``promtool tsdb dump``
does); past it, the oldest batches are released, and a sample older than something already
released is an error naming file and line: sort such a file first (or dump a shorter window).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from itertools import islice

from collectors.metrics.parse import Parsed, parse_text
from gangscope import clock
from gangscope.errors import UserError
from gangscope.records import ScrapeBatch
from gangscope.timesanity import DEFAULT_SKEW_S, EARLIEST_MS, check_ms

SLICE_LINES = 20_000
_OM_ONLY = re.compile(r'^# (EOF\s*$|UNIT |TYPE (\S+|"(?:[^"\\]|\\.)*") (info|stateset|unknown)\s*$)', re.M)


def _first_timestamp(head: str) -> str | None:
    for line in head.split("\n"):
        line = line.strip()
        if not line or line[0] == "#":
            continue
        parts = (line[line.rfind("}") + 1:] if "{" in line else line.split(None, 1)[-1]).split()
        return parts[1] if len(parts) >= 2 else None
    return None


def sniff_format(head: str) -> str:
    """``openmetrics`` or ``text``, from the first lines of a file (see the module docstring)."""
    if _OM_ONLY.search(head):
        return "openmetrics"
    ts = _first_timestamp(head)
    try:
        if ts is not None and ("." in ts or "e" in ts.lower() or abs(float(ts)) < 1e11):
            return "openmetrics"
    except ValueError:
        pass
    return "text"


def parse_slice(text: str, fmt: str, first_line: int, require_timestamps: bool = True) -> Parsed:
    """How a replay file's slice of lines is parsed: as a live scrape is, except that every sample needs its
    timestamp, ``# HELP``/``# TYPE`` may repeat (a file holds many scrapes) and ``# EOF`` ends the file, not
    the slice."""
    return parse_text(text, require_timestamps=require_timestamps, first_line=first_line, fmt=fmt,
                      eof_required=False, one_exposition=False)


def _batch_key(b: ScrapeBatch) -> tuple[int, str, str]:
    return (b.scraped_at_ms, b.job, b.instance)


def read_metrics_file(
    path: str | os.PathLike[str],
    cluster: str,
    job: str | None = None,
    instance: str | None = None,
    max_buffered_samples: int = 500_000,
    skew_s: float = DEFAULT_SKEW_S,
) -> Iterator[ScrapeBatch]:
    """Yield the file's samples as ScrapeBatches, one per (job, instance, timestamp), in time order.

    Raises ``UserError("<path>:<line>: ...")`` for a sample without a timestamp, a broken line,
    or one too far out of time order; ``UserError`` for OpenMetrics without its ``# EOF``. Samples whose
    time fails time sanity (gangscope/timesanity.py) leave, per slice of lines, in one batch carrying
    the reason (``rejected``, naming file and line), which lands in ``raw.dead_letters``.
    """
    path = os.fspath(path)
    default_id = os.path.basename(path).split(".", 1)[0] or "replay"
    try:
        # Bytes that are not UTF-8 stay surrogates: the parser names the exact line that holds them.
        f = open(path, encoding="utf-8", errors="surrogateescape", newline="\n")  # noqa: SIM115 - `with f` below
    except OSError as e:
        raise UserError(f"{path}: cannot open: {e.strerror}") from None
    pending: dict[tuple[str, str, int], ScrapeBatch] = {}
    buffered = 0
    released_ms: int | None = None  # newest timestamp already yielded
    latest_ms: int | None = None

    def release(upto_ms: int | None) -> Iterator[ScrapeBatch]:
        """Yield pending batches older than ``upto_ms`` (all when None), oldest first."""
        nonlocal buffered, released_ms
        ready = [b for b in pending.values() if upto_ms is None or b.scraped_at_ms < upto_ms]
        ready.sort(key=_batch_key)
        for b in ready:
            del pending[(b.job, b.instance, b.scraped_at_ms)]
            buffered -= len(b.sample_value)
            released_ms = b.scraped_at_ms
            yield b

    with f:
        first_line = 1
        fmt: str | None = None
        eof_line = 0  # OpenMetrics: line of the # EOF seen so far (nothing may follow it)
        while True:
            lines = list(islice(f, SLICE_LINES))
            if not lines:
                break
            # A line of the slice may end without "\n" only at end of file; join keeps numbering exact.
            text = "".join(line.rstrip("\n") + "\n" for line in lines)
            if fmt is None:
                fmt = sniff_format(text)
            if eof_line and text.strip():
                raise UserError(f"{path}:{eof_line}: content after # EOF")
            parsed = parse_slice(text, fmt, first_line)
            if fmt == "openmetrics":
                last = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), None)
                if last is not None and lines[last].strip() == "# EOF":
                    eof_line = first_line + last
            first_line += len(lines)
            if parsed.errors:
                line, reason = parsed.errors[0]
                raise UserError(f"{path}:{line}: {reason}")
            now_ms = clock.now_ms()  # received now: on a sandbox's clock, its time line
            latest_ok = now_ms + int(skew_s * 1000)
            refused: ScrapeBatch | None = None
            for name, labels, value, ts, line in zip(parsed.metric, parsed.labels, parsed.value, parsed.ts_ms,
                                                     parsed.line, strict=True):
                assert ts is not None
                j = job or labels.get("job") or default_id
                inst = instance or labels.get("instance") or default_id
                if not EARLIEST_MS <= ts <= latest_ok:
                    if refused is None:
                        why = check_ms("sample timestamp", ts, now_ms, skew_s)
                        refused = ScrapeBatch(cluster=cluster, target=inst, job=j, instance=inst, scraped_at_ms=now_ms,
                                              rejected=f"{path}:{line}: {why}")
                    refused.add_sample(refused.add_series(name, labels), value, ts)
                    continue
                if released_ms is not None and ts < released_ms:
                    raise UserError(f"{path}:{line}: timestamp {ts} is older than samples already replayed "
                                    f"({released_ms}); sort the file by timestamp")
                if "job" in labels or "instance" in labels:
                    labels = {k: v for k, v in labels.items() if k not in ("job", "instance")}
                key = (j, inst, ts)
                b = pending.get(key)
                if b is None:
                    b = pending[key] = ScrapeBatch(cluster=cluster, target=inst, job=j, instance=inst,
                                                   scraped_at_ms=ts)
                b.add_sample(b.add_series(name, labels), value, ts)
                buffered += 1
                if latest_ms is None or ts > latest_ms:
                    latest_ms = ts
            if refused is not None:
                if len(refused.sample_value) > 1:
                    refused.rejected += f" (and {len(refused.sample_value) - 1} more such samples in lines up to " \
                                        f"{first_line - 1})"
                yield refused
            if buffered > max_buffered_samples:
                # Release what the file has moved past; if that is not enough, the oldest of the rest.
                yield from release(latest_ms)
                while buffered > max_buffered_samples and pending:
                    oldest = min(pending.values(), key=_batch_key).scraped_at_ms
                    yield from release(oldest + 1)
    if fmt == "openmetrics" and not eof_line:
        raise UserError(f"{path}:{first_line - 1}: OpenMetrics file does not end with # EOF (is it cut short?)")
    yield from release(None)

