"""kill -9 the pipeline in the middle of batches, again and again: the lake ends with each record once."""

from __future__ import annotations

import random
import time

import duckdb
import pytest

from gangscope import config
from gangscope.transport.publish import Publisher
from pipeline import lake
from pipeline.land import stored_offsets
from tests.pipeline.helpers import dcgm_scrape, pod_event, start_pipeline

pytestmark = pytest.mark.both_brokers  # Kafka behaviour: on the embedded broker and on Apache Kafka

N_EVENTS, N_SCRAPES = 600, 100  # 600 k8s rows + 400 samples, each with a unique key


def _stored(settings: config.Settings) -> int:
    """Records landed so far (a writer connection: it also rolls back a crashed commit's journal)."""
    con = lake.connect(settings)
    try:
        return sum(stored_offsets(con).values())
    finally:
        con.close()


class _Watch:
    """An analyst's read-only view, kept open across polls. Right after a kill -9 the SQLite catalog
    may hold a hot journal that only a writer can roll back; until the next writer has opened it a
    read-only reader gets an error, so the watcher reconnects then."""

    def __init__(self, settings: config.Settings) -> None:
        self.settings = settings
        self.con = lake.connect(settings, read_only=True)

    def progress(self) -> int | None:
        try:
            return sum(stored_offsets(self.con).values())
        except duckdb.Error:
            self.con.close()
            self.con = lake.connect(self.settings, read_only=True)
            return None


def test_kill_9_mid_batch_repeatedly_then_restart_lands_exactly_once(settings: config.Settings) -> None:
    assert settings.kafka.bootstrap_servers
    with Publisher(settings, settings.kafka.bootstrap_servers) as pub:
        for i in range(N_EVENTS):
            pub.publish(pod_event(i))
        for i in range(N_SCRAPES):
            pub.publish(dcgm_scrape(i))
        assert pub.flush(60)
    lake.connect(settings).close()
    watch = _Watch(settings)
    rng = random.Random(7)
    kills = []
    total = N_EVENTS + N_SCRAPES
    for cycle in range(3):
        before = kills[-1] if kills else 0
        # Kill once a random share of what is left has landed (not after a random time: a fast machine
        # lands everything within any fixed delay); the kill then falls inside the next batches.
        target = before + max(1, int((total - before) * rng.uniform(0.1, 0.5)))
        # A fresh group per life: the dead member's session need not expire first; the lake, not
        # the group's committed offsets, says where to resume.
        proc = start_pipeline(settings, "--once", batch_records=10, group_id=f"{settings.pipeline.group_id}-{cycle}")
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (watch.progress() or 0) < target and proc.poll() is None:
                time.sleep(0.01)
        finally:
            proc.kill()  # SIGKILL: no cleanup, no flush
            proc.wait()
        kills.append(_stored(settings))
    assert any(0 < k < total for k in kills), kills  # at least one kill landed in the middle
    watch.con.close()
    final = start_pipeline(settings, "--once", group_id=f"{settings.pipeline.group_id}-final")
    out, _ = final.communicate(timeout=120)
    assert final.returncode == 0, out.decode()[-2000:]
    con = lake.connect(settings, read_only=True)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT uid) FROM raw.k8s_objects").fetchone() == (
            N_EVENTS, N_EVENTS)
        assert con.execute("SELECT count(*), count(DISTINCT (labels->>'seq', metric, labels->>'gpu')) "
                           "FROM raw.metric_samples").fetchone() == (4 * N_SCRAPES, 4 * N_SCRAPES)
        assert con.execute("SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)) "
                           "FROM raw.scrapes").fetchone() == (N_SCRAPES, N_SCRAPES)
        assert con.execute("SELECT count(*) FROM raw.dead_letters").fetchone() == (0,)
    finally:
        con.close()
