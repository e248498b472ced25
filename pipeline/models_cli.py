"""Commands of this module (placeholder until its issue lands)."""

from gangscope.errors import not_built


def register(groups, common) -> None:
    p = groups["group"]("models", "SQL models").add_parser(
        "build", parents=[common], help="build the SQL models in sql/"
    )
    p.set_defaults(handler=not_built("gangscope models build", 6))
    p = groups["root"].add_parser("diagnose", parents=[common], help="root-cause findings")
    p.set_defaults(handler=not_built("gangscope diagnose", 6))
