"""Scale-out: two pipeline processes, one consumer group, one PostgreSQL-catalogued lake.

One process is killed with SIGKILL while records are flowing; the other takes over its
partitions. Every record must land exactly once: none lost, none doubled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gangscope import config
from gangscope.records import K8sEvent
from gangscope.transport import kafka as pkafka
from gangscope.transport.publish import Publisher
from pipeline import lake

pytest.importorskip("pipeline.consume", reason="the consume loop (pipeline/consume.py, issue #2) has not landed")

ROOT = Path(__file__).resolve().parents[2]
N_AFTER_KILL = 3000


def _event(i: int) -> K8sEvent:
    obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": "ns", "uid": f"uid-{i:06d}", "resourceVersion": str(i),
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": f"node-{i % 16}"}, "status": {"phase": "Running"},
    }
    return K8sEvent(cluster="c1", type="ADDED", observed_at=datetime.now(UTC), object=obj)


def _spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        # SIGUSR1 prints every thread's stack to the log: a writer that stops making progress shows where it is.
        [sys.executable, "-c", "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1); "
         "from gangscope.app.cli import main; sys.exit(main())", "pipeline"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )


def _count(settings: config.Settings) -> int:
    con = lake.connect(settings, read_only=True, create=False)
    try:
        return con.execute("SELECT count(*) FROM raw.k8s_objects").fetchone()[0]
    finally:
        con.close()


def _owns_k8s_partitions(log: Path, topic: str) -> bool:
    """The writer's latest assignment (pipeline/consume.py logs each one) includes partitions of ``topic``."""
    assigned = [line for line in log.read_text().splitlines() if "assigned" in line and "partition(s)" in line]
    return bool(assigned) and f"{topic}[" in assigned[-1]


def _wait(cond, timeout_s: float, what: str, logs: list[Path], procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGUSR1)
    time.sleep(1)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-6000:]}" for p in logs)
    pytest.fail(f"timed out waiting for {what}\n{tails}")


@pytest.mark.both_brokers
def test_two_writers_kill9_exactly_once(settings: config.Settings, pg_catalog: str, tmp_path: Path) -> None:
    settings.catalog = pg_catalog
    settings.pipeline.batch_records = 200  # many small commits: the kill lands between or inside one
    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap
    pkafka.ensure_topics(settings, bootstrap)
    lake.connect(settings).close()  # create the lake once, before the writers race to

    env = {k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")}
    env.update({
        "GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "GANGSCOPE_KAFKA_TOPIC_PREFIX": settings.kafka.topic_prefix,
        "GANGSCOPE_KAFKA_PARTITIONS": str(settings.kafka.partitions),
        "GANGSCOPE_PIPELINE_GROUP_ID": settings.pipeline.group_id,
        "GANGSCOPE_PIPELINE_FLUSH_SECONDS": "0.3",
        "GANGSCOPE_PIPELINE_BATCH_RECORDS": "200",
        "GANGSCOPE_DATA": str(settings.data),
        "GANGSCOPE_CATALOG": pg_catalog,
        "GANGSCOPE_SERVER_LISTEN": "127.0.0.1:0",
        "GANGSCOPE_LOG_LEVEL": "INFO",
    })
    logs = [tmp_path / "writer-a.log", tmp_path / "writer-b.log"]
    victim, survivor = _spawn(env, logs[0]), _spawn(env, logs[1])
    procs = [victim, survivor]
    try:
        sent = [0]
        stop = threading.Event()

        def stream() -> None:
            """Publish until told to stop, so the kill always falls while records are still arriving."""
            with Publisher(settings, bootstrap) as pub:
                while not stop.is_set():
                    for _ in range(250):
                        pub.publish(_event(sent[0]))
                        sent[0] += 1
                    pub.flush(30)
                    time.sleep(0.2)
                assert pub.flush(60)

        topic = pkafka.topics(settings)["k8s"]
        _wait(lambda: all(_owns_k8s_partitions(p, topic) for p in logs), 60, "both writers to own partitions",
              logs, procs)
        streamer = threading.Thread(target=stream)
        streamer.start()
        _wait(lambda: _count(settings) >= 600, 90, "the first records to land", logs, procs)
        assert victim.poll() is None and survivor.poll() is None
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        at_kill = sent[0]
        # the survivor must take over the victim's partitions while the stream goes on
        _wait(lambda: sent[0] >= at_kill + N_AFTER_KILL, 120, f"{N_AFTER_KILL} more records published", logs, procs)
        stop.set()
        streamer.join(120)
        assert not streamer.is_alive()
        total = sent[0]
        _wait(lambda: _count(settings) >= total, 120, f"{total} records to land", logs, procs)
        time.sleep(2 * settings.pipeline.flush_seconds + 1)  # a late duplicate would show up by now
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(60) == 0, logs[1].read_text()[-2000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)

    con = lake.connect(settings, read_only=True, create=False)
    try:
        rows, uids, positions = con.execute(
            "SELECT count(*), count(DISTINCT uid), count(DISTINCT (kafka_partition, kafka_offset)) FROM raw.k8s_objects"
        ).fetchone()
        landed = {r[0] for r in con.execute("SELECT uid FROM raw.k8s_objects").fetchall()}
        dupes = con.execute("SELECT uid, count(*) FROM raw.k8s_objects GROUP BY uid HAVING count(*) > 1 LIMIT 5"
                            ).fetchall()
        partitions = con.execute("SELECT count(DISTINCT kafka_partition) FROM raw.k8s_objects").fetchone()[0]
    finally:
        con.close()
    assert dupes == [], f"records landed twice: {dupes}"
    assert landed == {f"uid-{i:06d}" for i in range(total)}, f"lost {total - len(landed)} records"
    assert rows == uids == positions == total
    assert partitions == settings.kafka.partitions
