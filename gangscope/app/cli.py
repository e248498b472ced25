"""The ``gangscope`` console script: one command group per module.

Each stage registers its own commands (``register(groups, common)`` in its ``cli``
module) and keeps heavy imports inside the handlers, so ``--help`` stays fast. A handler
is ``handler(settings, args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from gangscope import __version__
from gangscope.config import ConfigError, Settings, load
from gangscope.errors import UserError
from gangscope.secrets import redact

# Modules that register commands, in the order their commands appear in --help.
COMMAND_MODULES = (
    "gangscope.app.demo",
    "gangscope.app.service",
    "gangscope.app.check",
    "collectors.k8s.cli",
    "collectors.metrics.cli",
    "gangscope.app.replay",
    "gangscope.app.backfill",
    "collectors.simulate.cli",
    "gangscope.app.sandbox",
    "gangscope.app.evaluate",
    "pipeline.cli",
    "pipeline.models_cli",
    "reports.cli",
)

log = logging.getLogger("gangscope")


def common_options() -> argparse.ArgumentParser:
    """Settings every command shares (CONTRACT section 1)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("shared settings (flag > GANGSCOPE_* env > --config file > default)")
    g.add_argument("--config", metavar="FILE", help="YAML settings file (env GANGSCOPE_CONFIG)")
    g.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        help="Kafka brokers (env GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS); unset: an embedded in-memory broker "
        "for the life of the command",
    )
    g.add_argument("--data", metavar="DIR", help="data directory holding the lake (env GANGSCOPE_DATA; "
                   "default ./gangscope-data)")
    g.add_argument("--cluster", metavar="NAME", help="cluster name stamped on every record (env "
                   "GANGSCOPE_CLUSTER; default 'default')")
    g.add_argument("--catalog", metavar="URL", help="lake catalog: sqlite:PATH (default <data>/catalog.sqlite) "
                   "or postgres://... (env GANGSCOPE_CATALOG)")
    g.add_argument("--log-level", metavar="LEVEL", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    g.add_argument("--log-format", choices=("text", "json"), help="log line format (default text)")
    g.add_argument("--debug", action="store_true", help="print the traceback of an unexpected error")
    return p


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "data": getattr(args, "data", None),
        "cluster": getattr(args, "cluster", None),
        "catalog": getattr(args, "catalog", None),
        "kafka": {"bootstrap_servers": getattr(args, "bootstrap_servers", None)},
        "log": {"level": getattr(args, "log_level", None), "format": getattr(args, "log_format", None)},
        "report": {"timezone": getattr(args, "timezone", None)},
    }


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="gangscope",
        description="Why is a distributed training job stuck or slow? gangscope collects Kubernetes watch "
        "events and GPU/interconnect/Kueue/training telemetry into Kafka, lands them in a DuckDB lake and "
        "classifies each incident's root cause with SQL models.",
        epilog="Start with `gangscope demo`. Every command takes the shared settings; see `gangscope CMD --help`.",
    )
    parser.add_argument("--version", action="version", version=f"gangscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    groups: dict[str, Any] = {"root": sub}

    def group(name: str, help_text: str) -> Any:
        if name not in groups:
            gp = sub.add_parser(name, help=help_text, description=help_text)
            groups[name] = gp.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND", required=True)
        return groups[name]

    groups["group"] = group
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(groups, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    code = _main(argv)
    lake = sys.modules.get("pipeline.lake")
    if lake is not None and lake.abandoned():
        # A writer kept connections to a DuckDB instance that failed internally: destroying them at exit would abort
        # the process (pipeline.lake._ABANDONED), so it leaves without running destructors, its output flushed.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings: Settings = load(getattr(args, "config", None), _overrides(args))
    except ConfigError as e:
        print(redact(f"gangscope: config error: {e}"), file=sys.stderr)
        return 2
    from gangscope import logs

    logs.setup(settings.log.level, settings.log.format)
    from gangscope import clock

    clock.configure(settings.clock.sim_origin, settings.clock.wall_origin, settings.clock.speed)
    try:
        return int(args.handler(settings, args) or 0)
    except (UserError, ConfigError) as e:
        print(redact(f"gangscope: {e}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gangscope: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one line for the user; the traceback only with --debug (or at debug level)
        if getattr(args, "debug", False):
            traceback.print_exc()
        else:
            log.debug("failed", exc_info=True)
        print(redact(f"gangscope: error: {type(e).__name__}: {e}".splitlines()[0]), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
