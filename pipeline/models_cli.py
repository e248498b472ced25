"""``gangscope models build`` and ``gangscope diagnose``."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from gangscope.errors import UserError


def _time(value: str) -> datetime:
    """RFC 3339 (``2026-01-02T03:04:05Z``) or a relative ``-2h`` / ``-30m`` / ``-1d``."""
    v = value.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if v.startswith("-") and v[-1:] in units and v[1:-1].isdigit():
        from datetime import timedelta

        return datetime.now(UTC) - timedelta(seconds=int(v[1:-1]) * units[v[-1]])
    try:
        t = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {value!r} (RFC 3339 like 2026-01-02T03:04:05Z, or -2h)") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _build(settings, args) -> int:
    from pipeline import lake, models

    lake.require(settings)
    stats = models.build(settings, full=args.full)
    inc = f", {len(stats.incremental)} incremental" if stats.incremental else ""
    print(f"built {stats.models} models in {stats.seconds:.1f}s{inc}")
    return 0


def _diagnose(settings, args) -> int:
    from pipeline import lake, models
    from reports import diagnose

    if args.since and args.until and args.since > args.until:
        raise UserError("--since is after --until")
    lake.require(settings)
    con = lake.connect(settings)
    try:
        if not args.no_build:
            models.build(settings, con, only_stale=True)
        rows = diagnose.findings(con, since=args.since, until=args.until, include_healthy=args.all)
    finally:
        con.close()
    out = diagnose.to_json(rows) if args.format == "json" else diagnose.to_table(rows)
    sys.stdout.write(out + ("\n" if not out.endswith("\n") else ""))
    return 0


def register(groups, common) -> None:
    p = groups["group"]("models", "SQL models").add_parser(
        "build", parents=[common], help="build the SQL models in sql/",
        description="Build the SQL models of sql/ (staging, intermediate, marts) into the lake, in the order "
        "their references give. Models over append-only inputs are built incrementally.",
    )
    p.add_argument("--full", action="store_true", help="rebuild incremental models from scratch")
    p.set_defaults(handler=_build)
    p = groups["root"].add_parser(
        "diagnose", parents=[common], help="root-cause findings",
        description="Root-cause findings per job and incident (CONTRACT section 4), newest first. Builds the "
        "models first when anything landed since the last build.",
    )
    p.add_argument("--since", type=_time, metavar="T", help="only findings still holding at or after T "
                   "(RFC 3339, or relative like -2h)")
    p.add_argument("--until", type=_time, metavar="T", help="only findings that started at or before T")
    p.add_argument("--all", action="store_true", help="also list jobs found healthy")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    p.add_argument("--no-build", action="store_true", help="read the marts as they are, without building stale models")
    p.set_defaults(handler=_diagnose)
