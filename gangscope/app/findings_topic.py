"""The ``<prefix>findings`` topic: each finding change, keyed by its finding id (docs/findings.md)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from gangscope.config import Settings
from gangscope.transport import kafka as pkafka


def topic(settings: Settings) -> str:
    return f"{settings.kafka.topic_prefix}findings"


class FindingsTopic:
    """A callable that publishes changes and waits until Kafka acknowledged every one (or raises)."""

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self.settings, self.bootstrap, self.topic = settings, bootstrap, topic(settings)
        self._producer: Any = None

    def __call__(self, changes: list[dict[str, Any]]) -> None:
        if self._producer is None:
            self._producer = pkafka.producer(self.settings, self.bootstrap)
        futures = [self._producer.send(self.topic, key=c["finding_id"].encode(),
                                       value=json.dumps(c, separators=(",", ":")).encode()) for c in changes]
        self._producer.flush(timeout=30)
        for fut in futures:
            fut.get(timeout=30)

    def close(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=5)
            self._producer = None
