"""Fixtures for the Kubernetes collector tests: a fake API server and a topic reader."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import TopicPartition

from gangscope.config import Settings
from gangscope.transport import kafka as pkafka
from tests.fakes.k8s_api import FakeApiServer


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(bookmark_interval_s=0.1).start()
    yield server
    server.stop()


def read_k8s_topic(settings: Settings, expect: int, timeout_s: float = 20.0, settle_s: float = 1.0,
                   bootstrap: str | None = None) -> list[dict[str, Any]]:
    """Every record on the k8s topic (waits for ``expect`` records, then ``settle_s`` more for extras).

    Records come back with their partition/offset and in offset order per partition.
    """
    bootstrap = bootstrap or settings.kafka.bootstrap_servers
    assert bootstrap
    topic = pkafka.topics(settings)["k8s"]
    c = pkafka.consumer(settings, bootstrap, group_id=None, consumer_timeout_ms=500)
    try:
        deadline = time.monotonic() + timeout_s
        parts: set[int] | None = None
        while parts is None and time.monotonic() < deadline:
            parts = c.partitions_for_topic(topic)
            if parts is None:
                time.sleep(0.2)
        assert parts, f"topic {topic} never appeared"
        c.assign([TopicPartition(topic, p) for p in parts])
        c.seek_to_beginning()
        out: list[dict[str, Any]] = []
        settle_until = None
        while time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=300).values():
                for m in batch:
                    rec = json.loads(m.value)
                    rec["_partition"], rec["_offset"], rec["_key"] = m.partition, m.offset, m.key.decode()
                    out.append(rec)
            if len(out) >= expect:
                settle_until = settle_until or time.monotonic() + settle_s
                if time.monotonic() >= settle_until:
                    break
        return out
    finally:
        c.close()


def names(records: list[dict[str, Any]], etype: str | None = None, kind: str | None = None) -> list[str]:
    return [r["object"]["metadata"]["name"] for r in records
            if "object" in r and (etype is None or r["type"] == etype)
            and (kind is None or r["object"]["kind"] == kind)]
