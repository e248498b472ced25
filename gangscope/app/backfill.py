"""``gangscope backfill``: a past window from Prometheus (``collectors.prom.backfill``), landed like a replay."""

from __future__ import annotations

import math
import sys
import time
from datetime import UTC, datetime
from typing import Any

from collectors.prom.backfill import Source, read_window, redacted, signal_selector
from collectors.replay import ReplayStats, publish_records, stderr_progress
from gangscope.app.replay import land_published
from gangscope.config import Settings
from gangscope.errors import UserError
from gangscope.timesanity import DEFAULT_SKEW_S, check_epoch, check_time


def parse_time(text: str, what: str, skew_s: float = DEFAULT_SKEW_S) -> int:
    """RFC 3339 (``2026-11-30T08:00:00Z``) or Unix seconds, to epoch milliseconds; a time that fails time
    sanity (before 2000, in the future, milliseconds given for seconds) is a ``UserError`` naming the flag."""
    now_ms = int(time.time() * 1000)
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        why = check_epoch(what, seconds, "seconds", now_ms, skew_s) if math.isfinite(seconds) else f"{what} {text}"
        if why:
            raise UserError(f"{why}: give RFC 3339 (2026-11-30T08:00:00Z) or Unix seconds")
        return round(seconds * 1000)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"{what}: expected RFC 3339 (2026-11-30T08:00:00Z) or Unix seconds, got {text!r}") from None
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    if why := check_time(what, dt, datetime.fromtimestamp(now_ms / 1000, UTC), skew_s):
        raise UserError(why)
    return round(dt.timestamp() * 1000)


def backfill(settings: Settings, source: Source, start_ms: int, end_ms: int, selectors: list[str] | None = None,
             *, land: bool = True, window_ms: int = 600_000, progress: Any = stderr_progress) -> ReplayStats:
    """Publish the window's samples (``selectors``, default: every metric of the signal map), then land them."""
    if not selectors:
        from pipeline.signals import signal_map

        selectors = [signal_selector(signal_map(settings))]
    records = read_window(source, selectors, start_ms, end_ms, settings.cluster, window_ms=window_ms,
                          skew_s=settings.clock_skew_s)
    from gangscope.transport.broker import bootstrap_servers

    with bootstrap_servers(settings) as bootstrap:
        stats = publish_records(settings, bootstrap, records, progress)
        if land:
            land_published(settings, bootstrap, stats)
    return stats


def register(groups: dict[str, Any], common: Any) -> None:
    p = groups["root"].add_parser(
        "backfill", parents=[common], help="land a past window of Prometheus' samples (the signals gangscope uses)",
        description="Read the raw samples Prometheus stored between --start and --end (range-vector queries, each "
        "sample with its own timestamp) for the metrics of the signal map, or the --match selectors, publish them "
        "to Kafka and land them like a replay, so an incident from before gangscope was installed can be diagnosed. "
        "See docs/collectors-metrics.md.")
    p.add_argument("--prometheus", metavar="URL", required=True, help="Prometheus base URL, e.g. http://prom:9090")
    p.add_argument("--start", metavar="T", required=True, help="RFC 3339 or Unix seconds")
    p.add_argument("--end", metavar="T", required=True, help="RFC 3339 or Unix seconds")
    p.add_argument("--match", action="append", metavar="SELECTOR", default=[],
                   help="series selector, e.g. '{job=\"node\"}' (repeatable; default: the signal map's metrics)")
    p.add_argument("--window", metavar="D", default="10m", help="one query per window of this length (default 10m)")
    p.add_argument("--no-land", action="store_true", help="publish only; do not wait for landing")
    auth = p.add_argument_group("authentication and TLS (as for scrape targets)")
    auth.add_argument("--bearer-token-file", metavar="FILE")
    auth.add_argument("--username", metavar="USER", help="basic auth user (password from --password-file)")
    auth.add_argument("--password-file", metavar="FILE")
    auth.add_argument("--ca-file", metavar="FILE")
    auth.add_argument("--cert-file", metavar="FILE")
    auth.add_argument("--key-file", metavar="FILE")
    auth.add_argument("--insecure-skip-verify", action="store_true")
    p.set_defaults(handler=_handler)


def _handler(settings: Settings, args: Any) -> int:
    from collectors.metrics.capture import parse_duration

    if bool(args.cert_file) != bool(args.key_file):
        raise UserError("--cert-file and --key-file go together")
    if args.bearer_token_file and args.username is not None:
        raise UserError("--bearer-token-file and --username are two kinds of authentication; give one")
    if not args.prometheus.startswith(("http://", "https://")):
        raise UserError(f"--prometheus: expected http(s)://host:port, got {redacted(args.prometheus)!r}")
    source = Source(args.prometheus, bearer_token_file=args.bearer_token_file, username=args.username,
                    password_file=args.password_file, ca_file=args.ca_file, cert_file=args.cert_file,
                    key_file=args.key_file, insecure_skip_verify=args.insecure_skip_verify)
    start_ms = parse_time(args.start, "--start", settings.clock_skew_s)
    stats = backfill(settings, source, start_ms, parse_time(args.end, "--end", settings.clock_skew_s),
                     args.match, land=not args.no_land, window_ms=round(parse_duration(args.window) * 1000))
    what = "landed" if stats.landed else "published"
    print(f"backfill: {stats.metric_samples} samples in {stats.metric_batches} records {what} in "
          f"{stats.seconds:.1f}s", file=sys.stderr)
    return 0
