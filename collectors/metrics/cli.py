"""Commands of this module (placeholder until its issue lands)."""

from gangscope.errors import not_built


def register(groups, common) -> None:
    p = groups["group"]("collect", "run one collector live").add_parser(
        "metrics", parents=[common], help="scrape Prometheus targets and publish to Kafka"
    )
    p.set_defaults(handler=not_built("gangscope collect metrics", 4))
