"""Kafka client settings in one place: producers, consumers and topic creation."""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from gangscope.config import Settings
from gangscope.errors import UserError
from gangscope.records import topic_names

log = logging.getLogger(__name__)


def _security(settings: Settings) -> dict[str, Any]:
    return dict(settings.kafka.security)


def check_reachable(bootstrap: str, timeout_s: float = 10.0) -> None:
    """Fail fast, naming the address, when no bootstrap broker accepts a TCP connection.

    Without it an unreachable broker surfaced only after the publisher's retries (126 s for a replay).
    """
    tried: list[str] = []
    deadline = time.monotonic() + timeout_s
    for addr in [a.strip() for a in bootstrap.split(",") if a.strip()]:
        host, _, port = addr.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)),
                                          timeout=max(0.5, min(5.0, deadline - time.monotonic()))):
                return
        except (OSError, ValueError) as e:
            tried.append(f"{addr} ({getattr(e, 'strerror', None) or e})")
    raise UserError(f"Kafka is unreachable: tried {', '.join(tried) or repr(bootstrap)}; check --bootstrap-servers")


def topics(settings: Settings) -> dict[str, str]:
    return topic_names(settings.kafka.topic_prefix)


def ensure_topics(settings: Settings, bootstrap: str) -> None:
    """Create gangscope's topics with the configured partition count if they are missing."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **_security(settings))
    try:
        existing = set(admin.list_topics())
        new = [NewTopic(t, settings.kafka.partitions, 1) for t in topics(settings).values() if t not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(new)
    finally:
        admin.close()


def producer(settings: Settings, bootstrap: str, **overrides: Any) -> KafkaProducer:
    """acks=all, compressed, batched; retries keep per-key order (one in flight)."""
    comp = None if settings.kafka.compression == "none" else settings.kafka.compression
    opts: dict[str, Any] = dict(
        bootstrap_servers=bootstrap,
        acks="all",
        compression_type=comp,
        linger_ms=20,
        batch_size=1 << 20,
        max_request_size=max(settings.kafka.max_record_bytes, 1 << 20) + (64 << 10),  # + batch overhead
        retries=10,
        max_in_flight_requests_per_connection=1,
        # A batch resent after a lost ack is dropped by the broker (producer id + sequence), not stored
        # twice; the embedded Tansu broker grants producer ids (checked with kafka-python 3.0.12).
        enable_idempotence=True,
        **_security(settings),
    )
    opts.update(overrides)
    return KafkaProducer(**opts)


def consumer(settings: Settings, bootstrap: str, **overrides: Any) -> KafkaConsumer:
    """Group member with manual commit; offsets of record are the ones stored in the lake."""
    opts: dict[str, Any] = dict(
        bootstrap_servers=bootstrap,
        group_id=settings.pipeline.group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        max_partition_fetch_bytes=16 << 20,
        fetch_max_bytes=64 << 20,
        **_security(settings),
    )
    opts.update(overrides)
    return KafkaConsumer(**opts)
