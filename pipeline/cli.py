"""Commands of this module (placeholder until its issue lands)."""

from gangscope.errors import not_built


def register(groups, common) -> None:
    p = groups["root"].add_parser("pipeline", parents=[common], help="consume Kafka and land into the lake")
    p.add_argument("--once", action="store_true")
    p.set_defaults(handler=not_built("gangscope pipeline", 2))
