"""Commands: ``diagnose``, ``explain``, ``report``, ``sql``, ``baseline snapshot|compare`` (heavy imports inside
handlers)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from gangscope.errors import UserError


def parse_time(text: str | None) -> datetime | None:
    """RFC 3339 / ISO 8601 (a date alone means midnight UTC); naive times are UTC."""
    if not text:
        return None
    try:
        d = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"not a time: {text!r} (use RFC 3339, e.g. 2026-11-20T08:00:00Z)") from None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def diagnose_time(value: str) -> datetime:
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


def _build_stale(settings, con) -> None:
    """Build stale models first. When another writer (a running ``gangscope run``) keeps this build from committing
    (its own builds and landings win the catalog; seen 3 of 3 times on a loaded machine), read the models as they
    were last built and say so, instead of failing."""
    import duckdb

    from pipeline import lake, models

    try:
        models.build(settings, con, only_stale=True)
    except duckdb.Error as e:
        if not (lake.is_conflict(e) or isinstance(e, duckdb.TransactionException)):
            raise
        built = None
        with contextlib.suppress(duckdb.Error):
            built = con.execute(f"SELECT max(built_at) FROM {models.STATE_TABLE}").fetchone()[0]
        when = f"as last built at {built:%Y-%m-%d %H:%M:%S %Z}" if built else "as they are"
        print(f"note: models not rebuilt: another process is writing the lake ({str(e).splitlines()[0][:120]}); "
              f"reading them {when}", file=sys.stderr)


def _diagnose(settings, args) -> int:
    from pipeline import lake
    from reports import diagnose

    if args.since and args.until and args.since > args.until:
        raise UserError("--since is after --until")
    lake.require(settings)
    con = lake.connect(settings)
    try:
        if not args.no_build:
            _build_stale(settings, con)
        rows = diagnose.findings(con, since=args.since, until=args.until, include_healthy=args.all)
    finally:
        con.close()
    out = diagnose.to_json(rows) if args.format == "json" else diagnose.to_table(rows)
    sys.stdout.write(out + ("\n" if not out.endswith("\n") else ""))
    return 0


def _explain(settings, args) -> int:
    import json as _json

    from pipeline import lake
    from reports import explain
    from reports.localtime import using

    lake.require(settings)
    con = lake.connect(settings)
    try:
        if not args.no_build:
            _build_stale(settings, con)
        try:
            from gangscope.config import report_zone

            with using(report_zone(settings.report.timezone)):
                e = explain.explain(con, args.job)
                out = _json.dumps(e.to_dict(), indent=2) if args.format == "json" else explain.to_text(e)
        except explain.UnknownJob as err:
            raise UserError(str(err)) from None
    finally:
        con.close()
    sys.stdout.write(out + "\n")
    return 0


def _build_models(settings) -> None:
    try:
        from pipeline import models
    except ImportError:
        return
    models.build(settings, only_stale=True)


def _report(settings, args) -> int:
    from pipeline import lake
    from reports.report import write_report

    lake.require(settings)
    if not args.no_build:
        _build_models(settings)
    path = write_report(settings, args.format, Path(args.out) if args.out else None, since=parse_time(args.since))
    print(path)
    return 0


def _sql(settings, args) -> int:
    from reports import sqlshell

    out = Path(args.out) if args.out else None
    if args.query is None:
        if not sys.stdin.isatty():  # piped statements: run each line-joined statement
            text = sys.stdin.read().strip()
            if not text:
                raise UserError("no query: pass QUERY, or run in a terminal for the interactive shell")
            return sqlshell.run_once(settings, text.rstrip(";"), args.format, out)
        return sqlshell.shell(settings)
    return sqlshell.run_once(settings, args.query.strip().rstrip(";"), args.format, out)


def _snapshot(settings, args) -> int:
    from pipeline import lake
    from reports import baseline

    lake.require(settings)
    snap = baseline.snapshot(settings, Path(args.out), parse_time(args.since), parse_time(args.until))
    o = snap["overall"]
    print(f"{args.out}: {o['jobs']} jobs, {snap['window']['since']} .. {snap['window']['until']}, "
          f"queue={','.join(snap['systems']['queue']) or '-'} gang={','.join(snap['systems']['gang']) or '-'}")
    return 0


def _compare(settings, args) -> int:
    from reports import baseline

    result = baseline.compare_file(settings, Path(args.file), parse_time(args.since), parse_time(args.until),
                                   Path(args.against) if args.against else None)
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        sys.stdout.write(baseline.format_table(result))
    return 0


def register(groups, common) -> None:
    p = groups["root"].add_parser(
        "diagnose", parents=[common], help="root-cause findings",
        description="Root-cause findings per job and incident (CONTRACT section 4), newest first, each with its "
        "next step and the kubectl command that shows the evidence (table: one 'next:' line per finding; json: "
        "evidence_text and next_steps). Builds the models first when anything landed since the last build.",
    )
    p.add_argument("--since", type=diagnose_time, metavar="T", help="only findings still holding at or after T "
                   "(RFC 3339, or relative like -2h)")
    p.add_argument("--until", type=diagnose_time, metavar="T", help="only findings that started at or before T")
    p.add_argument("--all", action="store_true", help="also list jobs found healthy")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    p.add_argument("--no-build", action="store_true", help="read the marts as they are, without building stale models")
    p.set_defaults(handler=_diagnose)

    p = groups["root"].add_parser(
        "explain", parents=[common], help="one job's layered check, its findings and next steps",
        description="The layered check for one job, healthy or not, in the order an operator looks: queue and "
        "admission, topology (assignment and actual spread), gang assembly, start-up, throughput against its "
        "baseline, interconnect / GPUs / nodes; each with its verdict, evidence and times, then the job's findings "
        "with their evidence and next steps. An unknown job gets the closest names. Builds stale models first.")
    p.add_argument("job", metavar="NAMESPACE/JOB", help="the job (top-level owner), e.g. ml-research/llama-70b-sft")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    p.add_argument("--no-build", action="store_true", help="read the models as they are, without building stale ones")
    p.set_defaults(handler=_explain)

    p = groups["root"].add_parser(
        "report", parents=[common], help="write a root-cause report (HTML or Markdown)",
        description="Write a root-cause report: the fleet view (GPU-hours lost by root cause and the trend against "
        "the previous report, nodes ranked by faults, ClusterQueues by wait), jobs that need action with their next "
        "step, what happened, a time line and the layered check (queue, topology, gang, throughput), findings by "
        "class, idle GPU-hours, nodes ranked by interconnect trouble, nodes missing topology labels. Builds stale "
        "models first. Prints the file's path.")
    p.add_argument("--format", choices=("html", "md"), default="html", help="html (one self-contained file, "
                   "charts inline) or md (default html)")
    p.add_argument("--out", metavar="PATH", help="output file (default <data>/reports/gangscope-report-<time>.<ext>)")
    p.add_argument("--since", metavar="T", help="only findings still open at or after T (RFC 3339)")
    p.add_argument("--no-build", action="store_true", help="do not build stale models first")
    p.add_argument("--timezone", metavar="ZONE", help="IANA time zone of the report's times and chart axes, e.g. "
                   "Europe/Berlin (env GANGSCOPE_REPORT_TIMEZONE, config report.timezone; default UTC)")
    p.set_defaults(handler=_report)

    p = groups["root"].add_parser(
        "sql", parents=[common], help="read-only SQL over the lake (query or interactive shell)",
        description="Read-only SQL over the lake, safe while the pipeline writes. With QUERY: run it and print the "
        "result; without: an interactive shell with history (<data>/sql_history). Only reads are accepted "
        "(SELECT, WITH, VALUES, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN, read-only PRAGMA); anything else is refused. "
        "Tables: raw.*, staging.*, intermediate.*, marts.* (docs/tables.md).")
    p.add_argument("query", nargs="?", metavar="QUERY", help="one read statement, e.g. "
                   "\"SELECT root_cause, count(*) FROM marts.findings GROUP BY ALL\"")
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table",
                   help="output format (default table; parquet needs --out)")
    p.add_argument("--out", metavar="FILE", help="write the result to FILE instead of stdout")
    p.set_defaults(handler=_sql)

    b = groups["group"]("baseline", "migration baseline: KPIs of a window, before/after comparison")
    p = b.add_parser("snapshot", parents=[common], help="write the KPIs of a window to a JSON file",
                     description="Write one JSON file: window, cluster, queue and gang systems seen, and per "
                     "ClusterQueue, per API family (kueue_coscheduling, native) and overall: admission wait "
                     "p50/p95/p99, gang assembly p50/p95, gang timeout rate, topology compliance rate, throughput "
                     "per GPU per job name, idle GPU-hours, findings by class.")
    p.add_argument("--out", metavar="FILE", required=True, help="JSON file to write")
    p.add_argument("--since", metavar="T", help="jobs created at or after T (RFC 3339; default: all)")
    p.add_argument("--until", metavar="T", help="jobs created before T (RFC 3339; default: all)")
    p.set_defaults(handler=_snapshot)
    p = b.add_parser("compare", parents=[common], help="compare a baseline file with a later window",
                     description="Print each KPI of the baseline FILE beside a later window (default: jobs "
                     "created after the baseline's window, from the lake; or --against FILE2), with the delta and "
                     "whether it got better or worse.")
    p.add_argument("file", metavar="FILE", help="a file written by `gangscope baseline snapshot`")
    p.add_argument("--against", metavar="FILE2", help="compare with this snapshot instead of the lake")
    p.add_argument("--since", metavar="T", help="current window start (default: end of the baseline's window)")
    p.add_argument("--until", metavar="T", help="current window end (default: now)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    p.set_defaults(handler=_compare)
