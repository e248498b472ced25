"""Commands of this module (placeholder until its issue lands)."""

from gangscope.errors import not_built


def register(groups, common) -> None:
    p = groups["root"].add_parser("simulate", parents=[common], help="simulate a GPU cluster with injected faults")
    p.set_defaults(handler=not_built("gangscope simulate", 5))
