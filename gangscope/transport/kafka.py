"""Kafka client settings in one place: producers, consumers and topic creation."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import KafkaConnectionError, KafkaTimeoutError, TopicAlreadyExistsError
from kafka.net.compat import KafkaNetClient

from gangscope.config import Settings
from gangscope.errors import UserError
from gangscope.records import topic_names

log = logging.getLogger(__name__)


def _security(settings: Settings) -> dict[str, Any]:
    return dict(settings.kafka.security)


def topics(settings: Settings) -> dict[str, str]:
    return topic_names(settings.kafka.topic_prefix)


# What kafka-python logs when a connection fails for a reason no retry can fix.
_FATAL = {
    "SaslAuthenticationFailedError": "authentication failed (check the SASL user, password and mechanism)",
    "UnsupportedSaslMechanismError": "the broker does not offer this SASL mechanism",
    "CERTIFICATE_VERIFY_FAILED": "TLS certificate not trusted (check ssl_cafile)",
    "WRONG_VERSION_NUMBER": "TLS to a listener that does not speak TLS (check security_protocol)",
}


_RETRY_NOISE = ("Bootstrap", "Connection failed", "Connection lost", "not ready", *_FATAL)


class _FirstFailure(logging.Handler):
    """Keeps the first connection failure kafka-python logs; it retries even refused logins until its timeout.

    A broker that refuses a SASL login answers with an error and closes the connection about 100 ms later
    (``connection.failed.authentication.delay.ms``). When the client reads late (a loaded machine), the
    answer and the close arrive in one read and kafka-python 3.0 drops the answer: all that is logged is
    "socket disconnected". So a connection lost after the client sent its SASL proof and before
    "Connected", ``_SASL_DROPS`` times in a row, is also taken for a refused login (it needs kafka-python's
    DEBUG records, made only while ``admin`` connects).
    """

    def __init__(self, sasl: bool) -> None:
        super().__init__(logging.NOTSET)
        self.reason: str | None = None
        self.done = threading.Event()
        self.sasl = sasl
        self._in_sasl = False
        self._sasl_drops = 0

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        for marker, reason in _FATAL.items():
            if marker in msg and self.reason is None:
                self.reason = reason
                self.done.set()
        if self.sasl:
            self._follow_sasl(msg)
        # While connecting, the "kafka" logger does not propagate: its retries of a broker that does not
        # answer (a dozen ERROR lines) are said once, by the UserError; anything else goes on to the root
        # (DEBUG and INFO records are made here only to follow the SASL exchange).
        if record.levelno >= logging.WARNING and not any(noise in msg for noise in _RETRY_NOISE):
            logging.getLogger().handle(record)

    def _follow_sasl(self, msg: str) -> None:
        if msg.startswith("node=") and "Sending request" in msg and "SaslAuthenticateRequest" in msg:
            self._in_sasl = True
        elif msg.endswith(": Connected"):
            self._in_sasl, self._sasl_drops = False, 0
        elif self._in_sasl and "Connection lost" in msg:
            self._in_sasl = False
            self._sasl_drops += 1
            if self._sasl_drops >= _SASL_DROPS and self.reason is None:
                self.reason = _FATAL["SaslAuthenticationFailedError"].replace(
                    "(check", "(the broker closed every connection during SASL authentication; check")
                self.done.set()


_SASL_DROPS = 3


def admin(settings: Settings, bootstrap: str, timeout_s: float = 15.0) -> KafkaAdminClient:
    """An admin client with the configured security settings. A refused login or an untrusted certificate
    is a one-line ``UserError`` as soon as kafka-python logs it (it would retry it until its bootstrap
    timeout, then say only "Unable to bootstrap"); no broker within ``timeout_s`` is one too."""
    seen = _FirstFailure(sasl=str(settings.kafka.security.get("security_protocol", "")).startswith("SASL"))
    clients: list[KafkaNetClient] = []
    made: list[KafkaAdminClient | BaseException] = []

    def client(**configs: Any) -> KafkaNetClient:  # kafka-python's documented ``kafka_client`` hook
        clients.append(KafkaNetClient(**configs))
        return clients[-1]

    def connect() -> None:
        try:
            made.append(KafkaAdminClient(bootstrap_servers=bootstrap, bootstrap_timeout_ms=int(timeout_s * 1000),
                                         kafka_client=client, **_security(settings)))
        except BaseException as e:  # handed to the caller's thread
            made.append(e)
        seen.done.set()

    kafka_log = logging.getLogger("kafka")
    kafka_log.addHandler(seen)
    propagate, kafka_log.propagate = kafka_log.propagate, False
    level = kafka_log.level
    if seen.sasl:
        kafka_log.setLevel(logging.DEBUG)
    try:
        connecting = threading.Thread(target=connect, name="kafka-connect", daemon=True)
        connecting.start()
        seen.done.wait()
        if seen.reason is not None:  # stop kafka-python's retries before saying why
            for c in clients:
                with contextlib.suppress(Exception):
                    c.close()
            connecting.join(5)
    finally:
        kafka_log.removeHandler(seen)
        kafka_log.propagate = propagate
        kafka_log.setLevel(level)
    if seen.reason is not None:
        if made and isinstance(made[0], KafkaAdminClient):
            made[0].close()
        raise UserError(f"Kafka at {bootstrap}: {seen.reason}")
    if isinstance(made[0], KafkaAdminClient):
        return made[0]
    if isinstance(made[0], (KafkaTimeoutError, KafkaConnectionError)):
        raise UserError(f"Kafka at {bootstrap}: no answer within {timeout_s:.0f} s")
    raise made[0]


# A record travels in a batch of its own at worst: batch header, record header, key (up to ~400 bytes).
BATCH_OVERHEAD = 1024
_said_no_limit: set[str] = set()  # brokers already reported as not answering DescribeConfigs


def ensure_topics(settings: Settings, bootstrap: str) -> dict[str, int]:
    """Create gangscope's topics with the configured partition count if they are missing; return, per topic,
    the largest record (bytes, uncompressed) to send it (``record_limits``)."""
    admin_client = admin(settings, bootstrap)
    # Tansu closes the connection on DescribeConfigs; kafka-python's ERROR lines about it (also from its metadata
    # refresh, until the client is closed) are not logged: the limit falls back to the setting, said once.
    with _muted(_DESCRIBE_NOISE):
        try:
            existing = set(admin_client.list_topics())
            new = [NewTopic(t, settings.kafka.partitions, 1) for t in topics(settings).values() if t not in existing]
            if new:
                with contextlib.suppress(TopicAlreadyExistsError):
                    admin_client.create_topics(new)
            return record_limits(settings, bootstrap, admin_client)
        finally:
            admin_client.close()


def record_limits(settings: Settings, bootstrap: str, admin_client: KafkaAdminClient) -> dict[str, int]:
    """Per topic: the smaller of ``kafka.max_record_bytes`` and the topic's ``max.message.bytes`` (DescribeConfigs,
    less ``BATCH_OVERHEAD``), so a record the broker would refuse is a dead letter here rather than retried.
    A broker that does not answer (the embedded Tansu closes the connection) leaves the setting, said once."""
    own = settings.kafka.max_record_bytes
    names = list(topics(settings).values())
    try:
        described = admin_client.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, configs={"max.message.bytes": None}) for t in names],
            config_filter="all")
        found = described.get("topic", {})
        broker = {t: int(found[t]["max.message.bytes"]["value"]) for t in names}
    except Exception as e:  # noqa: BLE001 - any failure means: not known
        if bootstrap not in _said_no_limit:
            _said_no_limit.add(bootstrap)
            # Debug: the embedded broker never answers, so at INFO every start said it, with an exception text.
            log.debug("Kafka at %s did not tell its topics' max.message.bytes (%s: %s); records are checked against "
                     "kafka.max_record_bytes (%d) only", bootstrap, type(e).__name__, str(e)[:200], own)
        return dict.fromkeys(names, own)
    limits = {t: min(own, max(1, v - BATCH_OVERHEAD)) for t, v in broker.items()}
    for t, v in broker.items():
        if limits[t] < own:
            log.info("topic %s: max.message.bytes is %d; records over %d bytes go to the dead letter", t, v, limits[t])
    return limits


_DESCRIBE_NOISE = ("socket disconnected", "Abort", "Connection lost", "Metadata refresh: failed KafkaConnectionError")


@contextlib.contextmanager
def _muted(noise: tuple[str, ...]) -> Iterator[None]:
    """kafka-python's connection ERROR lines (``noise``) not logged while the block runs; anything else is."""
    class Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not any(n in record.getMessage() for n in noise)

    drop = Drop()
    loggers = [logging.getLogger(n) for n in ("kafka.net.transport", "kafka.net.connection", "kafka.cluster")]
    for lg in loggers:
        lg.addFilter(drop)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(drop)


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
        # A broker may park a fetch for its whole wait though another partition has records (the embedded
        # broker did: bench/ingest.py's raw read took 0.23 or 0.68-0.90 s by chance with kafka-python's
        # 500 ms, 0.20-0.40 s with 50 ms); 100 ms bounds that stall, at ten fetches a second when idle.
        fetch_max_wait_ms=100,
        # A member that joins just after the topics were created may see no partitions yet; with
        # kafka-python's default (5 min) it would hold none that long. Fresh metadata makes it rejoin.
        metadata_max_age_ms=5000,
        **_security(settings),
    )
    opts.update(overrides)
    return KafkaConsumer(**opts)
