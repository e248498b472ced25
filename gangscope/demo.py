"""Commands of this module (placeholder until its issue lands)."""

from gangscope.errors import not_built


def register(groups, common) -> None:
    p = groups["root"].add_parser(
        "demo", parents=[common], help="whole chain on this machine: simulator, broker, pipeline, models, report"
    )
    p.add_argument("--out", metavar="DIR")
    p.set_defaults(handler=not_built("gangscope demo", 5))
