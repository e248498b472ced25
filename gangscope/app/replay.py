"""``gangscope replay``: publish captured inputs (``collectors.replay``), then land them (``pipeline``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from collectors.replay import ReplayStats, check_readable, publish, stderr_progress
from gangscope.config import Settings


def replay(
    settings: Settings,
    k8s_files: list[str],
    metrics_files: list[str],
    *,
    land: bool = True,
    job: str | None = None,
    instance: str | None = None,
    bootstrap: str | None = None,
    progress: Callable[[ReplayStats, bool], None] | None = stderr_progress,
    progress_interval_s: float = 2.0,
) -> ReplayStats:
    """Publish every record of the files, then (``land``) run the pipeline until all of them have landed.

    ``bootstrap`` overrides the settings' brokers; without either, an embedded broker lives
    for the call (so landing is the only way to keep the data).
    """
    check_readable(k8s_files, metrics_files)
    if bootstrap:
        return _replay(settings, bootstrap, k8s_files, metrics_files, land, job, instance, progress,
                       progress_interval_s)
    from gangscope.transport.broker import bootstrap_servers

    with bootstrap_servers(settings) as bs:
        return _replay(settings, bs, k8s_files, metrics_files, land, job, instance, progress, progress_interval_s)


def _replay(settings: Settings, bootstrap: str, k8s_files: list[str], metrics_files: list[str], land: bool,
            job: str | None, instance: str | None, progress: Callable[[ReplayStats, bool], None] | None,
            interval_s: float) -> ReplayStats:
    stats = publish(settings, bootstrap, k8s_files, metrics_files, job, instance, progress, interval_s)
    if land:
        land_published(settings, bootstrap, stats)
    return stats


def land_published(settings: Settings, bootstrap: str, stats: ReplayStats) -> None:
    """Run the pipeline until what ``stats`` says was published (its offsets) has landed."""
    if not stats.records:
        return
    from pipeline import consume

    start = time.monotonic() - stats.seconds
    consume.run(settings, bootstrap, until=stats.offsets)
    stats.landed = True
    stats.seconds = time.monotonic() - start



def register(groups: dict[str, Any], common: Any) -> None:
    p = groups["root"].add_parser(
        "replay", parents=[common], help="publish captured inputs to Kafka and wait until they have landed",
        description="Publish watch JSON Lines files (--k8s) and metrics files with a timestamp on every sample "
        "(--metrics: Prometheus text with ms timestamps, `promtool tsdb dump` output, OpenMetrics text; recognised "
        "by content) to Kafka, merged in timestamp order, then run the pipeline until every record has landed in "
        "the lake (unless --no-land). Without --bootstrap-servers an embedded broker lives for the command.",
    )
    p.add_argument("--k8s", action="append", metavar="FILE", default=[],
                   help="watch events, one JSON object per line (repeatable)")
    p.add_argument("--metrics", action="append", metavar="FILE", default=[],
                   help="samples with timestamps: Prometheus text (ms), promtool tsdb dump, OpenMetrics (repeatable)")
    p.add_argument("--no-land", action="store_true", help="publish only; do not wait for landing")
    p.add_argument("--job", metavar="J", help="job of --metrics samples (default: their job label, else the file "
                   "name without extension)")
    p.add_argument("--instance", metavar="I", help="instance of --metrics samples (default: their instance label, "
                   "else the file name without extension)")
    p.set_defaults(handler=_handler)


def _handler(settings: Settings, args: Any) -> int:
    stats = replay(settings, args.k8s, args.metrics, land=not args.no_land, job=args.job, instance=args.instance)
    what = "landed" if stats.landed else "published"
    print(f"replay: {stats.records} records {what} in {stats.seconds:.1f}s", file=sys.stderr)
    return 0
