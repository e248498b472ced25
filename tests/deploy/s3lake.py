"""What the object-storage tests share (tests/deploy/test_object_storage.py and test_object_storage_faults.py, two
files so that two workers run them): the lake's settings on SeaweedFS with the catalog in PostgreSQL, gangscope
processes spawned and waited on, a stream of numbered records published while faults happen, and the checks that
each landed exactly once and that the bucket holds exactly what the catalog knows. Their fixtures (``home``,
``s3_home``, ``procs``) are in tests/deploy/conftest.py."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from kafka import TopicPartition

from gangscope import config
from gangscope.app import service
from gangscope.records import K8sEvent, ScrapeBatch
from gangscope.transport import kafka as pkafka
from gangscope.transport.publish import Publisher
from pipeline import compaction, consume, lake
from tests.servers.s3 import Credentials, S3Server

ROOT = Path(__file__).resolve().parents[2]


def _secret(home: Path, server: S3Server, creds: Credentials) -> None:
    """A DuckDB persistent secret for the bucket in ``home``'s secret directory (what an operator makes once); one
    made for an earlier server there (the same test on the other broker) is replaced."""
    con = duckdb.connect(config={"secret_directory": str(home / ".duckdb" / "stored_secrets")})
    try:
        lake.load_extensions(con, ("httpfs",))
        con.execute(server.duckdb_secret(creds=creds, persistent=True, or_replace=True))
    finally:
        con.close()


def _lake_settings(tmp_path: Path, server: S3Server, catalog: str, **kafka: object) -> config.Settings:
    """Parquet under a prefix of its own in the bucket, the catalog in PostgreSQL."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    over: dict[str, object] = {"data": str(tmp_path / "data"), "catalog": catalog,
                               "lake_data_path": f"s3://{server.bucket}/{prefix}/"}
    if kafka:
        over["kafka"] = {"topic_prefix": f"{prefix}.", "partitions": 4, **kafka}
        over["pipeline"] = {"group_id": f"{prefix}-pipeline", "flush_seconds": 0.5, "idle_seconds": 3.0}
    return config.load(overrides=over, environ={})


def _prefix(settings: config.Settings) -> str:
    """The data path's key prefix in the bucket."""
    return lake.data_path(settings).split("/", 3)[3]


def _analyst(settings: config.Settings, server: S3Server) -> duckdb.DuckDBPyConnection:
    """What docs/scaling.md has an analyst type: a plain DuckDB session, a secret of its own (the read-only identity,
    scoped to the lake's prefix, so it wins over the persistent read-write one) and a read-only attach."""
    con = duckdb.connect()
    lake.load_extensions(con, lake.catalog_extensions(settings))
    secret = server.duckdb_secret(name="analyst", creds=server.reader, scope=lake.data_path(settings))
    con.execute(secret.replace("CREATE SECRET", "CREATE TEMPORARY SECRET"))
    con.execute(lake.attach_sql(settings, read_only=True))
    con.execute(f"USE {lake.ALIAS}")
    return con


def _live_objects(con: duckdb.DuckDBPyConnection, settings: config.Settings) -> set[str]:
    """Keys of every file the catalog knows (live data and delete files, files awaiting deletion)."""
    meta = f"__ducklake_metadata_{lake.ALIAS}"
    base = lake.data_path(settings)
    live = " UNION ALL ".join(f"""
        SELECT CASE WHEN f.path_is_relative THEN coalesce(s.path, '') || coalesce(t.path, '') || f.path
                    ELSE f.path END
        FROM {meta}.{files} f JOIN {meta}.ducklake_table t USING (table_id)
        JOIN {meta}.ducklake_schema s USING (schema_id)
        WHERE f.end_snapshot IS NULL AND t.end_snapshot IS NULL""" for files in ("ducklake_data_file",
                                                                                  "ducklake_delete_file"))
    rows = con.execute(f"{live} UNION ALL SELECT path FROM {meta}.ducklake_files_scheduled_for_deletion").fetchall()
    out = set()
    for (path,) in rows:
        full = path if "://" in path else base + path
        out.add(full.split("/", 3)[3])
    return out


def _bucket(server: S3Server, settings: config.Settings) -> set[str]:
    """Objects under the lake's prefix as S3 lists them, the write check left out."""
    prefix = _prefix(settings)
    return {k for k in server.objects(prefix) if not k.endswith(lake.WRITE_CHECK)}


@dataclasses.dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def assigned(self) -> bool:
        return any("assigned" in ln and "partition(s)" in ln for ln in self.text().splitlines())


def _env(settings: config.Settings, data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GANGSCOPE_", "AWS_", "DUCKDB_"))}
    env.update({
        "PYTHONPATH": str(ROOT), "GANGSCOPE_DATA": str(data), "GANGSCOPE_CATALOG": settings.catalog or "",
        "GANGSCOPE_LAKE_DATA_PATH": settings.lake_data_path or "",
        "GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers or "",
        "GANGSCOPE_KAFKA_TOPIC_PREFIX": settings.kafka.topic_prefix,
        "GANGSCOPE_KAFKA_PARTITIONS": str(settings.kafka.partitions),
        "GANGSCOPE_PIPELINE_GROUP_ID": settings.pipeline.group_id, "GANGSCOPE_PIPELINE_FLUSH_SECONDS": "0.5",
        "GANGSCOPE_PIPELINE_BATCH_RECORDS": "200", "GANGSCOPE_LOG_LEVEL": "INFO", **extra})
    return env


def _spawn(name: str, args: list[str], env: dict[str, str], tmp_path: Path) -> Proc:
    log = tmp_path / f"{name}.log"
    popen = subprocess.Popen(
        [sys.executable, "-c", "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1); "
         "from gangscope.app.cli import main; sys.exit(main())", *args],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Proc(name, popen, log)


def _wait(cond: Callable[[], bool], timeout_s: float, what: str, procs: list[Proc]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.5)
    for p in procs:
        if p.popen.poll() is None:
            p.popen.send_signal(signal.SIGUSR1)
    time.sleep(1)
    tails = "\n".join(f"--- {p.name} (exit {p.popen.poll()})\n{p.text()[-5000:]}" for p in procs)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tails}")


def _stop(procs: list[Proc], timeout_s: float = service.LAND_GRACE_S + 120.0) -> None:
    """SIGTERM, then wait as long as `gangscope run` may take by design: it keeps its pipeline landing what its
    collectors published for up to LAND_GRACE_S, then joins it (CI once: a run whose group member was rejoining
    after two rebalances stopped cleanly after 122 s, past the 120 s this allowed before)."""
    for p in procs:
        if p.popen.poll() is None:
            p.popen.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.popen.send_signal(signal.SIGUSR1)
            time.sleep(1)
            p.popen.kill()
            p.popen.wait(10)
            pytest.fail(f"{p.name} did not stop on SIGTERM:\n{p.text()[-5000:]}")


def _event(i: int) -> K8sEvent:
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"s3-pod-{i}", "namespace": "s3test", "uid": f"s3-uid-{i:06d}",
                        "resourceVersion": str(i), "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"nodeName": f"node-{i % 8}"}, "status": {"phase": "Running"}}
    return K8sEvent(cluster="s3test", type="ADDED", observed_at=datetime.now(UTC), object=obj)


def _scrape(i: int) -> ScrapeBatch:
    """A 64-sample dcgm scrape: metric batches make Parquet files on S3 (k8s rows alone mostly inline)."""
    b = ScrapeBatch(cluster="s3test", target=f"http://node-{i % 8}:9400/metrics", job="dcgm",
                    instance=f"node-{i % 8}:9400", scraped_at_ms=int(time.time() * 1000))
    for gpu in range(8):
        for m in range(8):
            b.add_sample(b.add_series(f"DCGM_FI_S3_{m}", {"gpu": str(gpu), "Hostname": f"node-{i % 8}"}),
                         float(i + gpu + m))
    return b


class Stream:
    """Publishes numbered k8s events and scrapes in bursts until stopped: the records arrive while faults happen."""

    def __init__(self, settings: config.Settings, burst: int = 50, pause_s: float = 0.3) -> None:
        self.settings, self.burst, self.pause_s = settings, burst, pause_s
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            with Publisher(self.settings, self.settings.kafka.bootstrap_servers) as pub:
                while not self.stop.is_set():
                    for _ in range(self.burst):
                        pub.publish(_event(self.sent))
                        pub.publish(_scrape(self.sent))
                        self.sent += 1
                    assert pub.flush(60), "Kafka did not acknowledge a burst"
                    time.sleep(self.pause_s)
                assert pub.flush(60)
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.error = e

    def start(self) -> Stream:
        self.thread.start()
        return self

    def finish(self) -> int:
        self.stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive() and self.error is None, self.error
        return self.sent


def _kafka_positions(settings: config.Settings) -> dict[str, set[tuple[int, int]]]:
    """Every (partition, offset) each topic holds (by topic name), read back from Kafka: what was published."""
    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap
    topics = list(pkafka.topics(settings).values())
    parts = {TopicPartition(t, p) for t in topics for p in range(settings.kafka.partitions)}
    ends = consume.end_offsets(settings, bootstrap, parts)
    out: dict[str, set[tuple[int, int]]] = {t: set() for t in topics}
    reader = pkafka.consumer(settings, bootstrap, group_id=None)
    try:
        reader.assign(sorted(parts))
        reader.seek_to_beginning()
        deadline = time.monotonic() + 120
        while any(reader.position(tp) < ends[(tp.topic, tp.partition)] for tp in parts):
            assert time.monotonic() < deadline, "could not read the topics back"
            for tp, recs in reader.poll(timeout_ms=500).items():
                out[tp.topic].update((r.partition, r.offset) for r in recs)
    finally:
        reader.close()
    return out


def _healthz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:  # noqa: S310 - loopback
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:  # noqa: S310 - loopback
        return r.read().decode()


def _landed(con: duckdb.DuckDBPyConnection) -> int:
    """The test's events landed, as the fewer of objects and scrapes: each event is one of each, on two topics whose
    partitions another writer may hold; waiting on the objects alone stopped the writers with scrapes still unread
    (left in Kafka, not lost, but the count then failed)."""
    return con.execute("SELECT least((SELECT count(*) FROM raw.k8s_objects WHERE cluster = 's3test'), "
                       "(SELECT count(*) FROM raw.scrapes WHERE cluster = 's3test'))").fetchone()[0]


def _exactly_once(con: duckdb.DuckDBPyConnection, sent: int, settings: config.Settings | None = None) -> None:
    """The test's events by uid, and (with ``settings``) every record its topics hold by (partition, offset), read
    back from Kafka: each landed once, none missing."""
    dupes = con.execute("SELECT uid, count(*) FROM raw.k8s_objects WHERE cluster = 's3test' GROUP BY uid "
                        "HAVING count(*) > 1 LIMIT 5").fetchall()
    assert dupes == [], f"records landed twice: {dupes}"
    uids = {r[0] for r in con.execute("SELECT uid FROM raw.k8s_objects WHERE cluster = 's3test'").fetchall()}
    missing = {f"s3-uid-{i:06d}" for i in range(sent)} - uids
    assert not missing and len(uids) == sent, f"{len(missing)} of {sent} events lost, e.g. {sorted(missing)[:3]}"
    assert con.execute("SELECT count(*) FROM raw.scrapes WHERE cluster = 's3test'").fetchone()[0] == sent
    if settings is None:
        return
    kafka = _kafka_positions(settings)
    prefix = settings.kafka.topic_prefix
    for kind, table in ((f"{prefix}k8s", "raw.k8s_objects"), (f"{prefix}metrics", "raw.scrapes")):
        assert kind in kafka
        rows = con.execute(f"SELECT kafka_partition, kafka_offset FROM {table} UNION ALL "
                           'SELECT "partition", "offset" FROM raw.dead_letters WHERE topic = ?', [kind]).fetchall()
        assert len(rows) == len(set(rows)), f"{kind}: {len(rows) - len(set(rows))} positions landed twice"
        assert set(rows) == kafka[kind], (f"{kind}: {len(kafka[kind] - set(rows))} of {len(kafka[kind])} records "
                                          f"not landed, {len(set(rows) - kafka[kind])} landed that Kafka lacks")


def _final_compaction(settings: config.Settings, server: S3Server) -> tuple[compaction.CompactionStats, set[str]]:
    """With every writer stopped: compact with no window (nothing runs that could need a file), then the bucket under
    the prefix must hold exactly the files the catalog knows: no orphan left, none missing."""
    con = lake.connect(settings)
    try:
        stats = compaction.compact(con, keep=timedelta(0), orphan_age=timedelta(0))
        live = _live_objects(con, settings)
    finally:
        con.close()
    listed = _bucket(server, settings)
    assert listed == live, (f"orphans in the bucket: {sorted(listed - live)[:5]}; "
                            f"missing from it: {sorted(live - listed)[:5]}")
    return stats, listed
