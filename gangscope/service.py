"""Commands of this module (placeholder until its issue lands)."""

from gangscope.errors import not_built


def register(groups, common) -> None:
    p = groups["root"].add_parser(
        "run", parents=[common], help="long-running service: collectors, pipeline, scheduled jobs"
    )
    p.set_defaults(handler=not_built("gangscope run", 7))
