"""Publisher against the real embedded broker: delivery, order, outages, the bound."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime

import pytest

from gangscope import config
from gangscope.records import K8sEvent, ScrapeBatch
from gangscope.transport import kafka as pkafka
from gangscope.transport.broker import EmbeddedBroker, free_port
from gangscope.transport.publish import Publisher


def _event(i: int, name: str = "p") -> K8sEvent:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ns", "name": f"{name}{i % 3}"},
           "seq": i}
    return K8sEvent("c", "MODIFIED", datetime(2026, 1, 1, tzinfo=UTC), obj)


def _scrape(i: int) -> ScrapeBatch:
    b = ScrapeBatch("c", f"http://n{i % 2}:9400/metrics", "dcgm", f"n{i % 2}:9400", 1_700_000_000_000 + i)
    s = b.add_series("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "seq": str(i)})
    b.add_sample(s, float(i))
    return b


def _read_all(settings: config.Settings, bootstrap: str, expect: int, timeout_s: float = 20) -> list:
    c = pkafka.consumer(settings, bootstrap, group_id=None)
    c.subscribe(list(pkafka.topics(settings).values()))
    out: list = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for recs in c.poll(500).values():
            out.extend(recs)
        if len(out) >= expect:
            # a little longer to catch duplicates
            for recs in c.poll(1000).values():
                out.extend(recs)
            break
    c.close()
    return out


def _settings_for(tmp_path, bootstrap: str) -> config.Settings:
    return config.load(overrides={"data": str(tmp_path / "d"), "kafka": {
        "bootstrap_servers": bootstrap, "topic_prefix": f"p{uuid.uuid4().hex[:6]}.", "partitions": 2}}, environ={})


@pytest.mark.both_brokers
def test_publish_delivers_both_kinds_with_keys_and_offsets(settings: config.Settings) -> None:
    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap
    with Publisher(settings, bootstrap) as pub:
        for i in range(30):
            pub.publish(_event(i))
            pub.publish(_scrape(i))
        assert pub.flush(30)
        assert pub.published == 60 and pub.dropped == 0 and pub.buffered == 0
        acked = pub.acked_offsets()
    recs = _read_all(settings, bootstrap, 60)
    assert len(recs) == 60
    topics = pkafka.topics(settings)
    assert {r.topic for r in recs} == set(topics.values())
    for r in recs:
        if r.topic == topics["k8s"]:
            assert r.key.startswith(b"v1/Pod/ns/p")
        else:
            assert r.key.startswith(b"http://n")
    # acked offsets: per partition, last offset + 1
    last: dict[tuple[str, int], int] = {}
    for r in recs:
        last[(r.topic, r.partition)] = max(last.get((r.topic, r.partition), 0), r.offset + 1)
    assert acked == last
    # per-key order
    by_key: dict[bytes, list[int]] = {}
    for r in sorted(recs, key=lambda r: (r.topic, r.partition, r.offset)):
        if r.topic == topics["k8s"]:
            by_key.setdefault(r.key, []).append(int(r.value.split(b'"seq":')[1].split(b"}")[0]))
    for seqs in by_key.values():
        assert seqs == sorted(seqs)


def test_publish_rejects_non_records(settings: config.Settings) -> None:
    assert settings.kafka.bootstrap_servers
    with Publisher(settings, settings.kafka.bootstrap_servers) as pub, pytest.raises(TypeError):
        pub.publish({"not": "a record"})  # type: ignore[arg-type]


def test_broker_down_for_a_while_nothing_lost_under_bound(tmp_path) -> None:
    port = free_port()
    b = EmbeddedBroker(port).start()
    settings = _settings_for(tmp_path, b.bootstrap)
    pub = Publisher(settings, b.bootstrap, max_buffered=1000)
    try:
        pub.publish(_event(-1))
        assert pub.flush(30)
        b.stop()
        for i in range(200):
            pub.publish(_event(i))
        time.sleep(1.0)
        assert pub.buffered > 0  # waiting, not lost, not raised
        # The in-memory broker comes back empty: the publisher must recreate the topics.
        b = EmbeddedBroker(port).start()
        assert pub.flush(90), f"still buffered: {pub.buffered}"
        assert pub.dropped == 0
        recs = _read_all(settings, b.bootstrap, 200)
        seqs = [int(r.value.split(b'"seq":')[1].split(b"}")[0]) for r in recs]
        assert sorted(seqs) == list(range(200))  # all once (the pre-outage record went with the old broker)
        by_key: dict[bytes, list[int]] = {}
        for r, s in sorted(zip(recs, seqs, strict=True), key=lambda x: (x[0].partition, x[0].offset)):
            by_key.setdefault(r.key, []).append(s)
        for ks in by_key.values():
            assert ks == sorted(ks)
    finally:
        pub.close(5)
        b.stop()


def test_bound_drops_oldest_and_logs_count(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    settings = _settings_for(tmp_path, f"127.0.0.1:{port}")
    caplog.set_level(logging.WARNING, logger="gangscope.transport.publish")
    pub = Publisher(settings, f"127.0.0.1:{port}", max_buffered=10)
    pub.drop_log_interval_s = 0.0
    b = None
    try:
        for i in range(25):
            pub.publish(_event(i, name="q"))
        assert pub.dropped == 15
        assert pub.buffered == 10
        logged = [m for r in caplog.records if "dropped" in (m := r.getMessage())]
        assert logged and logged[-1].endswith("15 in total")
        b = EmbeddedBroker(port).start()
        assert pub.flush(90)
        recs = _read_all(settings, b.bootstrap, 10)
        seqs = sorted(int(r.value.split(b'"seq":')[1].split(b"}")[0]) for r in recs)
        # The newest ten, each once; but a window the sender had already handed to Kafka when the burst
        # came (up to 5 records here) is not dropped: then the oldest of the newest make room for it.
        in_flight = [s for s in seqs if s < 15]
        first = in_flight[0] if in_flight else 0
        assert len(in_flight) <= 5 and in_flight == list(range(first, first + len(in_flight)))
        assert seqs == in_flight + list(range(15 + len(in_flight), 25))
    finally:
        pub.close(5)
        if b:
            b.stop()


def test_an_outage_is_retried_with_backoff_not_once_per_record(tmp_path) -> None:
    port = free_port()
    pub = Publisher(_settings_for(tmp_path, f"127.0.0.1:{port}"), f"127.0.0.1:{port}")
    attempts: list[float] = []
    connect = pub._connect
    pub._connect = lambda: (attempts.append(time.monotonic()), connect())[1]  # type: ignore[method-assign]
    try:
        for i in range(150):  # a record every 10 ms for 1.5 s, no broker
            pub.publish(_event(i))
            time.sleep(0.01)
        # backoff 0.1, 0.2, 0.4, 0.8 s: about five attempts, not one per record
        assert 2 <= len(attempts) <= 7
        assert pub.dropped == 0 and pub.buffered == 150
    finally:
        pub.close(0)


@pytest.mark.both_brokers
def test_records_over_the_brokers_limit_are_dead_letters_not_retries(settings: config.Settings, broker,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Apache Kafka: topics whose max.message.bytes (64 KiB) is below kafka.max_record_bytes (16 MiB); read at
    connect (DescribeConfigs), the smaller one decides. Tansu does not answer DescribeConfigs: the setting
    decides, said once in the log. Either way the oversize record is a dead letter naming the limit, and
    records that fit, batched together past the limit, all land."""
    from kafka.admin import NewTopic

    from pipeline import consume, lake

    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap
    limit = 64 << 10
    k8s_topic = pkafka.topics(settings)["k8s"]
    tansu = isinstance(broker, EmbeddedBroker)
    if tansu:
        settings.kafka.max_record_bytes = limit
        pkafka._said_no_limit.discard(bootstrap)  # said once per process: earlier tests used this broker
    else:
        admin = pkafka.admin(settings, bootstrap)
        try:
            admin.create_topics([NewTopic(t, 2, 1, topic_configs={"max.message.bytes": str(limit)})
                                 for t in pkafka.topics(settings).values()])
        finally:
            admin.close()
    caplog.set_level(logging.DEBUG, logger="gangscope.transport.kafka")  # the broker probe speaks at debug

    def pod(name: str, size: int) -> K8sEvent:
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ns", "name": name,
                                                               "annotations": {"a": "x" * size}}}
        return K8sEvent("c", "ADDED", datetime(2026, 1, 1, tzinfo=UTC), obj)

    with Publisher(settings, bootstrap) as pub:
        for i in range(5):
            pub.publish(pod(f"fits{i}", 40_000))
        pub.publish(pod("huge", 100_000))
        for i in range(5, 10):
            pub.publish(pod(f"fits{i}", 40_000))
        assert pub.flush(60)  # acknowledged, not retried: the huge one travelled as its reason
        assert pub.published == 11
    consume.run(settings, bootstrap, once=True)
    con = lake.connect(settings, read_only=True)
    try:
        names = sorted(r[0] for r in con.execute("SELECT name FROM raw.k8s_objects").fetchall())
        dead = [r[0] for r in con.execute("SELECT reason FROM raw.dead_letters").fetchall()]
    finally:
        con.close()
    assert names == [f"fits{i}" for i in range(10)]
    assert len(dead) == 1 and "'v1/Pod/ns/huge'" in dead[0], dead
    said = [r.getMessage() for r in caplog.records if "max.message.bytes" in r.getMessage()]
    if tansu:
        assert dead[0].endswith(f"exceeds kafka.max_record_bytes ({limit})")
        assert len(said) == 1 and "did not tell" in said[0] and f"({limit}) only" in said[0]
        assert [r.levelno for r in caplog.records if "did not tell" in r.getMessage()] == [logging.DEBUG]
    else:
        assert dead[0].endswith(f"exceeds the broker's max.message.bytes of {k8s_topic} "
                                f"({limit - pkafka.BATCH_OVERHEAD})")
        assert not [m for m in said if "did not tell" in m]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
