"""``gangscope models build``."""

from __future__ import annotations


def _build(settings, args) -> int:
    from pipeline import lake, models

    lake.require(settings)
    stats = models.build(settings, full=args.full)
    inc = f", {len(stats.incremental)} incremental" if stats.incremental else ""
    kept = f", {len(stats.kept)} kept (nothing they read changed)" if stats.kept else ""
    print(f"built {stats.models} models in {stats.seconds:.1f}s{inc}{kept}")
    return 0


def register(groups, common) -> None:
    p = groups["group"]("models", "SQL models").add_parser(
        "build", parents=[common], help="build the SQL models in sql/",
        description="Build the SQL models of sql/ (staging, intermediate, marts) into the lake, in the order "
        "their references give. Models over append-only inputs are built incrementally; a model with nothing "
        "new to read since the last build is kept as it is (docs/models.md).",
    )
    p.add_argument("--full", action="store_true",
                   help="rebuild every model from scratch (incremental ones too; none kept)")
    p.set_defaults(handler=_build)
