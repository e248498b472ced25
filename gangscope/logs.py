"""Logging setup: text or JSON lines, with credentials scrubbed from every message."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from gangscope.secrets import redact


def scrub(text: str) -> str:
    """Credentials out of a log line (gangscope/secrets.py)."""
    return redact(text)


class _Text(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


class _Json(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": scrub(record.getMessage()),
        }
        if record.exc_info:
            out["exc"] = scrub(self.formatException(record.exc_info))
        return json.dumps(out)


def setup(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json() if fmt == "json" else _Text("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("kafka", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # apscheduler's INFO ("Adding job tentatively", "Scheduler started", one line per job) only at debug.
    logging.getLogger("apscheduler").setLevel(logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING)
    # kafka-python's "task ran for 0.3s" event-loop notices: about our own CPU load, not the broker.
    logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)
    # ... and its "Metadata refresh: failed Cancelled" ERROR when a client closes while a refresh is pending:
    # every replay ended with it though nothing was wrong.
    # ... and its "Error receiving network data" traceback (AttributeError on the socket it had just set to None),
    # or "Unhandled exception in task" (a read waiting on a socket already closed: fd -1), when a connection is
    # closed while its I/O thread reads: races inside kafka-python 3.0, met at start and at shutdown.
    # ... and its "Rebalance listener ... took 1.9s" WARNING: our listener reads the lake's offsets (a claim) while the
    # partitions are assigned, which takes a second or two on a busy machine; a first `gangscope run` printed it.
    # Heartbeats are late by that much (the session is 6 s, gangscope/transport/kafka.py): said from
    # SLOW_REBALANCE_S on.
    for name in ("kafka.cluster", "kafka.net.transport", "kafka.net.selector", "kafka.coordinator.consumer"):
        noisy = logging.getLogger(name)
        if not any(isinstance(f, _ClosingNoise) for f in noisy.filters):
            noisy.addFilter(_ClosingNoise())


SLOW_REBALANCE_S = 10.0  # a rebalance listener this slow is worth a warning (a quarter of the session timeout)


class _ClosingNoise(logging.Filter):
    """Drops what kafka-python logs about a client closing, not about the broker, and its warning about a rebalance
    listener a few seconds slow (see ``setup``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if record.name == "kafka.net.transport":
            return not (isinstance(exc, AttributeError) and "(closed)" in record.getMessage())
        if record.name == "kafka.coordinator.consumer":
            args = record.args if isinstance(record.args, tuple) else ()
            took = args[3] if str(record.msg).startswith("Rebalance listener") and len(args) > 3 else None
            return not (isinstance(took, float) and took < SLOW_REBALANCE_S)
        if record.name == "kafka.net.selector":
            return not (isinstance(exc, ValueError) and "Invalid file descriptor: -1" in str(exc))
        return "Cancelled" not in record.getMessage()
