"""Commands of this module (placeholder until its issue lands)."""

from gangscope.errors import not_built


def register(groups, common) -> None:
    p = groups["root"].add_parser(
        "replay", parents=[common], help="publish captured inputs to Kafka and wait until they have landed"
    )
    p.add_argument("--k8s", action="append", metavar="FILE", default=[])
    p.add_argument("--metrics", action="append", metavar="FILE", default=[])
    p.add_argument("--no-land", action="store_true")
    p.set_defaults(handler=not_built("gangscope replay", 3))
