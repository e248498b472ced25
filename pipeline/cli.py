"""``gangscope pipeline [--once]``: consume Kafka and land into the lake."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

from gangscope.config import Settings

log = logging.getLogger(__name__)


def register(groups: dict[str, Any], common: argparse.ArgumentParser) -> None:
    p = groups["root"].add_parser(
        "pipeline", parents=[common], help="consume Kafka and land into the lake",
        description="Consume the k8s and metrics topics in micro-batches and land raw rows into the lake, "
        "exactly once (each partition's next offset is stored with the rows). SIGTERM/SIGINT land the batch "
        "in hand and exit 0. Tuning: pipeline.flush_seconds, pipeline.batch_records, pipeline.batch_bytes, "
        "pipeline.group_id (GANGSCOPE_PIPELINE_*).")
    p.add_argument("--once", action="store_true",
                   help="drain what is in Kafka and exit (after pipeline.idle_seconds with nothing new)")
    p.set_defaults(handler=run_pipeline)


def run_pipeline(settings: Settings, args: argparse.Namespace) -> int:
    from gangscope.transport.broker import bootstrap_servers
    from pipeline import consume

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("%s: landing the batch in hand, then exiting", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    with bootstrap_servers(settings) as bootstrap:
        stats = consume.run(settings, bootstrap, once=args.once, stop=stop)
    log.info("pipeline done: %d record(s) in %d batch(es), %d samples, %d scrapes, %d k8s rows, %d dead letters, "
             "%d already landed, %.1fs", stats.records, stats.batches, stats.samples, stats.scrapes, stats.k8s_rows,
             stats.dead, stats.skipped, stats.elapsed_s)
    return 0
