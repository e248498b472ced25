"""``gangscope collect metrics`` and ``gangscope capture metrics``."""

from __future__ import annotations

import argparse
from typing import Any


def register(groups: dict[str, Any], common: argparse.ArgumentParser) -> None:
    p = groups["group"]("collect", "run one collector live").add_parser(
        "metrics", parents=[common], help="scrape Prometheus targets and publish to Kafka",
        description="Scrape the targets of metrics.targets (static: url, job, interval_s, timeout_s, "
        "bearer_token_file, ca_file/cert_file/key_file/insecure_skip_verify, labels, honor_labels) and of "
        "metrics.discovery "
        "(exporter pods listed from the API server: job, namespace, label_selector, port, path; presets for the "
        "jobs dcgm, node, kueue, scheduler, ray, training) at their intervals, and publish one record per scrape "
        "(samples plus up/duration/error) to the <prefix>metrics topic. Stops on SIGINT/SIGTERM. "
        "See docs/collectors-metrics.md.",
    )
    p.add_argument("--once", action="store_true", help="scrape every target once, publish, and exit")
    p.set_defaults(handler=collect)

    c = groups["group"]("capture", "record live inputs to replay files").add_parser(
        "metrics", parents=[common], help="record live scrapes to a timestamped Prometheus text replay file",
        description="Scrape the configured targets like `collect metrics` but write every sample, with its "
        "millisecond timestamp and job/instance labels, to FILE for `gangscope replay --metrics FILE`.",
    )
    c.add_argument("--out", metavar="FILE", required=True, help="file to write (overwritten)")
    c.add_argument("--duration", metavar="D", required=True, help="how long to record, e.g. 90s, 15m, 2h")
    c.set_defaults(handler=capture)


def collect(settings: Any, args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import threading

    from collectors.k8s.capture import stop_on_signals
    from collectors.metrics.scrape import Scraper, serve, target_source
    from gangscope.transport.broker import bootstrap_servers
    from gangscope.transport.publish import Publisher

    log = logging.getLogger("gangscope.metrics")
    targets = target_source(settings)  # validate before starting a broker
    with bootstrap_servers(settings) as bootstrap:
        publisher = Publisher(settings, bootstrap)
        try:
            if args.once:
                async def once() -> tuple[int, int]:
                    async with Scraper(settings.cluster, publisher.publish) as s:
                        await s.scrape_round(targets())
                        return s.samples, s.failures

                samples, failures = asyncio.run(once())
                log.info("scraped %d samples; %d scrape(s) failed", samples, failures)
            else:
                stop = threading.Event()
                with stop_on_signals(stop):
                    serve(settings, publisher.publish, stop)
        finally:
            publisher.flush(30.0)
            publisher.close()
    return 0


def capture(settings: Any, args: argparse.Namespace) -> int:
    import sys

    from collectors.metrics.capture import capture as run_capture
    from collectors.metrics.capture import parse_duration

    scrapes, samples = run_capture(settings, args.out, parse_duration(args.duration))
    print(f"capture: {scrapes} scrapes, {samples} samples written to {args.out}", file=sys.stderr)
    return 0
