"""Commands of this module (placeholder until its issue lands)."""

from gangscope.errors import not_built


def register(groups, common) -> None:
    p = groups["root"].add_parser("report", parents=[common], help="write a root-cause report")
    p.set_defaults(handler=not_built("gangscope report", 7))
    p = groups["root"].add_parser("sql", parents=[common], help="read-only SQL over the lake")
    p.set_defaults(handler=not_built("gangscope sql", 7))
    b = groups["group"]("baseline", "migration baseline")
    for name in ("snapshot", "compare"):
        b.add_parser(name, parents=[common]).set_defaults(handler=not_built(f"gangscope baseline {name}", 7))
