"""Consecutive ``consume.run`` calls in one process, and a first run on a data dir without a lake."""

from __future__ import annotations

import threading

import pytest

from gangscope import config
from gangscope.transport.publish import Publisher
from pipeline import consume, lake
from tests.pipeline.helpers import landed_counts, pod_event, publish

pytestmark = pytest.mark.both_brokers  # Kafka behaviour: on the embedded broker and on Apache Kafka


def _run_until(settings: config.Settings, acked: dict[tuple[str, int], int]) -> consume.ConsumeStats:
    """``run(until=...)`` with a safety net: a run that would hang is stopped and the test fails."""
    assert settings.kafka.bootstrap_servers
    stop = threading.Event()
    timer = threading.Timer(45, stop.set)
    timer.start()
    try:
        stats = consume.run(settings, settings.kafka.bootstrap_servers, until=acked, stop=stop)
    finally:
        timer.cancel()
    assert not stop.is_set(), "run(until=...) did not reach the acked offsets"
    return stats


def test_consecutive_runs_in_one_process_same_group(settings: config.Settings) -> None:
    assert not settings.lake_path.exists() and not settings.data.exists()  # a fresh data dir: no lake yet
    first = _run_until(settings, publish(settings, range(0, 60), range(0, 10)))
    assert (first.k8s_rows, first.scrapes, first.samples, first.dead) == (60, 10, 40, 0)
    # The same group again, right after the first consumer left: it must rejoin, not wait on a rebalance.
    second = _run_until(settings, publish(settings, range(60, 100), range(10, 15)))
    assert (second.k8s_rows, second.scrapes, second.skipped, second.dead) == (40, 5, 0, 0)
    third = _run_until(settings, publish(settings, range(100, 110)))
    assert (third.k8s_rows, third.scrapes) == (10, 0)
    assert landed_counts(settings) == (110, 110, 60, 60)  # nothing lost, nothing doubled


def test_run_once_creates_the_lake_on_a_fresh_data_dir(settings: config.Settings) -> None:
    assert settings.kafka.bootstrap_servers
    publish(settings, range(5))
    assert not settings.data.exists()
    stats = consume.run(settings, settings.kafka.bootstrap_servers, once=True)
    assert stats.k8s_rows == 5
    assert landed_counts(settings)[:2] == (5, 5)


def test_readers_get_a_clear_error_and_writers_a_complete_lake(offline_settings: config.Settings) -> None:
    import pytest

    from gangscope.errors import UserError

    with pytest.raises(UserError, match="no lake at"):
        lake.connect(offline_settings, read_only=True, create=False)
    offline_settings.data.mkdir(parents=True)
    offline_settings.lake_path.mkdir()
    lake.connect(offline_settings, create=False).close()  # a writer that does not create directories...
    con = lake.connect(offline_settings, read_only=True, create=False)
    try:  # ...still leaves the raw tables a reader expects
        assert con.execute("SELECT count(*) FROM raw.kafka_offsets").fetchone() == (0,)
    finally:
        con.close()


def test_idempotent_producer_keeps_order(settings: config.Settings) -> None:
    """The publisher's producer runs idempotent (a batch resent after a lost ack is not stored twice); the
    embedded broker accepts it, and one object's events land once each, in order."""
    import dataclasses
    from datetime import timedelta

    assert settings.kafka.bootstrap_servers
    base = pod_event(3)
    with Publisher(settings, settings.kafka.bootstrap_servers) as pub:
        for i in range(30):  # one object: one key, one partition
            pub.publish(dataclasses.replace(base, observed_at=base.observed_at + timedelta(seconds=i)))
        assert pub.flush(60)
        assert pub._producer.config["enable_idempotence"]
        acked = pub.acked_offsets()
    assert len(acked) == 1 and next(iter(acked.values())) == 30
    assert _run_until(settings, acked).k8s_rows == 30
    con = lake.connect(settings, read_only=True)
    try:
        rows = con.execute("SELECT kafka_offset, observed_at FROM raw.k8s_objects ORDER BY kafka_offset").fetchall()
    finally:
        con.close()
    assert [r[0] for r in rows] == list(range(30))
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)
