"""The lake on object storage, for real: Parquet on SeaweedFS over S3 (DuckDB's httpfs, no mock on either side),
the catalog in PostgreSQL, several writers, and the faults a platform team meets there.

* The deployment at once: two `gangscope pipeline` writers and `gangscope run` (collectors on the sandbox, its own
  pipeline, scheduled builds, compaction and retention) in one consumer group, an analyst attached read-only with
  read-only S3 credentials, one writer killed with SIGKILL mid-run. Every record Kafka holds lands exactly once (by
  (partition, offset) against the topics, and by uid for the test's own events), and the S3 secret (the canary)
  reaches no log, lake table, catalog row, report, /metrics or /healthz.
* The object store stopped for 60 s and started again; the catalog restarted; a bucket the credentials may only read.
* Retention and compaction delete the objects they retire (the bucket is listed over S3 to prove it), and none a
  reader's snapshot still needs within the documented window.

Credentials reach DuckDB only as a DuckDB persistent secret in the processes' HOME (what docs/scaling.md tells an
operator to create once) or as a secret the analyst creates in its own session.
"""

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
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml
from kafka import TopicPartition

from gangscope import config
from gangscope.app import service
from gangscope.records import K8sEvent, ScrapeBatch
from gangscope.transport import kafka as pkafka
from gangscope.transport.publish import Publisher
from pipeline import compaction, consume, lake, retention
from pipeline.land import insert_samples
from tests.servers import postgres
from tests.servers.postgres import PASSWORD as PG_PASSWORD
from tests.servers.process import free_port
from tests.servers.s3 import Credentials, S3Server

pytestmark = pytest.mark.s3
ROOT = Path(__file__).resolve().parents[2]


# --- the pieces ---------------------------------------------------------------------------------------------------


def _secret(home: Path, server: S3Server, creds: Credentials) -> None:
    """A DuckDB persistent secret for the bucket in ``home``'s secret directory (what an operator makes once); one
    made for an earlier server there (the same test on the other broker) is replaced."""
    con = duckdb.connect(config={"secret_directory": str(home / ".duckdb" / "stored_secrets")})
    try:
        lake.load_extensions(con, ("httpfs",))
        con.execute(server.duckdb_secret(creds=creds, persistent=True, or_replace=True))
    finally:
        con.close()


@pytest.fixture(scope="module")
def home(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A HOME whose DuckDB secret directory holds the read-write S3 secret; every process of these tests runs with
    it (the test process too, see ``_home``)."""
    path = tmp_path_factory.mktemp("home")
    _secret(path, s3_server, s3_server.admin)
    return path


@pytest.fixture(autouse=True)
def _home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(home))


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


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        if p.popen.poll() is None:
            p.popen.kill()
            p.popen.wait(10)


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


# --- the deployment at once -------------------------------------------------------------------------------------


@pytest.mark.both_brokers
@pytest.mark.timeout(900)
def test_deployment_on_object_storage(broker, s3_server: S3Server, pg_catalog: str, postgres_server,
                                      tmp_path: Path, procs: list[Proc]) -> None:
    from collectors.simulate.sandbox import Sandbox

    settings = _lake_settings(tmp_path, s3_server, pg_catalog, bootstrap_servers=broker.bootstrap)
    pkafka.ensure_topics(settings, broker.bootstrap)
    lake.connect(settings).close()  # the lake made once, before the writers race to
    sb = Sandbox(tmp_path / "sandbox", "gpu_fault", speed=10.0, interval=15.0).start()
    try:
        cfg = yaml.safe_load(sb.config.read_text())
        cfg["pipeline"] = {"flush_seconds": 0.5}
        cfg["schedule"] = {"models_build": "interval:15", "compaction": "interval:20", "retention": "interval:30",
                           "report_hourly": "interval:45", "report_daily": "off"}
        run_cfg = tmp_path / "run.yaml"
        run_cfg.write_text(yaml.safe_dump(cfg))
        port = free_port()
        writers = [_spawn(f"writer-{c}", ["pipeline"], _env(settings, tmp_path / f"data-{c}"), tmp_path)
                   for c in "ab"]
        run = _spawn("run", ["run", "--config", str(run_cfg)],
                     _env(settings, tmp_path / "data-run", GANGSCOPE_SERVER_LISTEN=f"127.0.0.1:{port}"), tmp_path)
        procs += [*writers, run]
        _wait(lambda: all(p.assigned() for p in procs), 120, "three members with partitions", procs)
        analyst = _analyst(settings, s3_server)
        seen: list[int] = []

        def count() -> int:
            seen.append(_landed(analyst))
            return seen[-1]

        stream = Stream(settings).start()
        _wait(lambda: count() >= 300, 120, "the first events to land", procs)
        assert all(p.popen.poll() is None for p in procs)
        writers[0].popen.send_signal(signal.SIGKILL)
        assert writers[0].popen.wait(10) == -signal.SIGKILL
        at_kill = stream.sent
        _wait(lambda: stream.sent >= at_kill + 1200 and count() > 0, 180, "1,200 more events published", procs)
        sent = stream.finish()
        _wait(lambda: count() >= sent, 180, f"{sent} events to land", procs)
        # Builds, compaction and retention ran meanwhile; the collectors' records landed too.
        _wait(lambda: all(s in run.text() for s in ("compaction: merged", "retention: deleted", "built ")), 120,
              "a build, a compaction and a retention run", procs)
        assert seen == sorted(seen), f"the analyst saw rows vanish: {seen}"
        with pytest.raises(duckdb.Error):
            analyst.execute("INSERT INTO raw.scrapes (cluster) VALUES ('analyst')")
        status, health = _healthz(port)
        metrics = _get(port, "/metrics")
        assert status == 200 and health["status"] == "ok", health
        report = tmp_path / "report.md"
        made = subprocess.run([sys.executable, "-m", "gangscope.app.cli", "report", "--format", "md", "--out",
                               str(report)], env=_env(settings, tmp_path / "data-report"), cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr[-3000:]
        time.sleep(2)  # a late duplicate would show by now
        _stop([writers[1], run])
    finally:
        sb.stop()
    assert writers[1].popen.returncode == 0, writers[1].text()[-3000:]
    assert run.popen.returncode == 0, run.text()[-3000:]
    try:
        _exactly_once(analyst, sent, settings)
        collected = analyst.execute("SELECT count(*) FROM raw.k8s_objects WHERE cluster <> 's3test'").fetchone()[0]
        scraped = analyst.execute("SELECT count(*) FROM raw.scrapes WHERE cluster <> 's3test' AND up").fetchone()[0]
        findings = analyst.execute("SELECT count(*) FROM marts.jobs").fetchone()[0]
        texts = {"report": report.read_text(), "/metrics": metrics, "/healthz": json.dumps(health)}
        texts.update({p.name: p.text() for p in procs})
        for schema, table in analyst.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                                             f"WHERE database_name = '{lake.ALIAS}'").fetchall():
            hits = analyst.execute(f'SELECT count(*) FROM "{schema}"."{table}" AS t '
                                   "WHERE contains(CAST(t AS VARCHAR), ?) OR contains(CAST(t AS VARCHAR), ?)",
                                   [s3_server.admin.secret_key, s3_server.reader.secret_key]).fetchone()[0]
            assert hits == 0, f"the S3 secret landed in {schema}.{table}"
    finally:
        analyst.close()
    assert collected > 0 and scraped > 0 and findings > 0  # the collectors' records and the models, on S3
    dump = subprocess.run([str(postgres_server.directory / "bin" / "pg_dump"), "-h", postgres_server.host, "-p",
                           str(postgres_server.port), "-U", postgres_server.user, pg_catalog.rsplit("/", 1)[1]],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PGPASSWORD": PG_PASSWORD})
    assert dump.returncode == 0 and "ducklake_data_file" in dump.stdout, dump.stderr
    texts["catalog"] = dump.stdout
    for where, text in texts.items():
        for secret in (s3_server.admin.secret_key, s3_server.reader.secret_key, PG_PASSWORD):
            assert secret not in text, f"a secret leaked into {where}"
    _, objects = _final_compaction(settings, s3_server)
    assert any("/raw/metric_points/" in k or "metric_points" in k for k in objects), sorted(objects)[:10]


# --- faults ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def own_s3(tmp_path: Path, home: Path) -> Iterator[S3Server]:
    """A SeaweedFS of this test's own (it is stopped mid-test), with the same credentials the module's secret names."""
    from tests.servers import s3

    server = s3.start()
    try:
        _secret(home / "own", server, server.admin)
        yield server
    finally:
        server.remove()


OUTAGE_S = 60.0


@pytest.mark.both_brokers
@pytest.mark.timeout(900)
def test_object_store_away_for_a_minute(broker, own_s3: S3Server, pg_catalog: str, home: Path,
                                        tmp_path: Path, procs: list[Proc], monkeypatch: pytest.MonkeyPatch) -> None:
    """SeaweedFS stopped for 60 s under two writers and `gangscope run`: they wait and retry (no crash), /healthz says
    degraded meanwhile and ok after, nothing is lost or doubled, and compaction leaves no orphan object behind."""
    monkeypatch.setenv("HOME", str(home / "own"))
    settings = _lake_settings(tmp_path, own_s3, pg_catalog, bootstrap_servers=broker.bootstrap)
    pkafka.ensure_topics(settings, broker.bootstrap)
    lake.connect(settings).close()
    port = free_port()
    env = {"HOME": str(home / "own")}
    writers = [_spawn(f"writer-{c}", ["pipeline"], _env(settings, tmp_path / f"data-{c}", **env), tmp_path)
               for c in "ab"]
    run = _spawn("run", ["run"], _env(settings, tmp_path / "data-run", GANGSCOPE_SERVER_LISTEN=f"127.0.0.1:{port}",
                                      GANGSCOPE_COLLECTORS="", GANGSCOPE_SCHEDULE_MODELS_BUILD="interval:10",
                                      GANGSCOPE_SCHEDULE_COMPACTION="off", GANGSCOPE_SCHEDULE_REPORT_HOURLY="off",
                                      GANGSCOPE_SCHEDULE_REPORT_DAILY="off", GANGSCOPE_SCHEDULE_RETENTION="off", **env),
                 tmp_path)
    procs += [*writers, run]
    _wait(lambda: all(p.assigned() for p in procs), 120, "three members with partitions", procs)
    analyst = _analyst(settings, own_s3)

    try:
        stream = Stream(settings).start()
        _wait(lambda: _landed(analyst) >= 200 and "built " in run.text(), 120, "landings and a build", procs)
        # ok before the outage (on a loaded machine a landing may be waiting out a slow store just now)
        _wait(lambda: _healthz(port)[1]["status"] == "ok", 120, "/healthz ok before the outage", procs)
        before = len(_bucket(own_s3, settings))
        own_s3.stop()
        down_at = time.monotonic()
        states: list[tuple[int, dict]] = []
        while time.monotonic() - down_at < OUTAGE_S:
            states.append(_healthz(port))
            assert all(p.popen.poll() is None for p in procs), "a process died while the object store was away"
            time.sleep(2)
        own_s3.start()
        during = stream.sent
        degraded = [h for status, h in states if h["status"] == "degraded"]
        assert degraded, f"/healthz never said degraded: {states[-3:]}"
        assert all(status == 200 for status, _ in states), states  # degraded is not unhealthy: no restart
        assert "lake" in degraded[-1]["components"] and degraded[-1]["components"]["lake"].get("degraded"), degraded[-1]
        assert own_s3.admin.secret_key not in json.dumps(states)
        _wait(lambda: stream.sent >= during + 200, 120, "more events after the object store is back", procs)
        sent = stream.finish()
        _wait(lambda: _landed(analyst) >= sent, 240, f"{sent} events to land", procs)
        _wait(lambda: _healthz(port)[1]["status"] == "ok", 120, "/healthz ok again", procs)
        _stop([*writers, run])
    finally:
        analyst.close()
    for p in procs:
        assert p.popen.returncode == 0, p.text()[-3000:]
        assert "reachable again" in p.text() or p is run, p.text()[-3000:]
    assert "waits for the lake" not in "".join(p.text() for p in procs).replace("retrying every", "")
    analyst = _analyst(settings, own_s3)
    try:
        _exactly_once(analyst, sent, settings)
    finally:
        analyst.close()
    stats, objects = _final_compaction(settings, own_s3)
    assert len(objects) > 0 and before > 0


@pytest.mark.both_brokers
@pytest.mark.timeout(600)
def test_catalog_restarted_under_writers(broker, s3_server: S3Server, tmp_path: Path,
                                         procs: list[Proc]) -> None:
    """PostgreSQL restarted (fast shutdown, as `pg_ctl restart` does) while two writers land: they reconnect or
    wait, none crashes, every record lands once."""
    server = postgres.start()
    try:
        assert server.psql("CREATE DATABASE lake").returncode == 0
        settings = _lake_settings(tmp_path, s3_server, server.url("lake"), bootstrap_servers=broker.bootstrap)
        pkafka.ensure_topics(settings, broker.bootstrap)
        lake.connect(settings).close()
        writers = [_spawn(f"writer-{c}", ["pipeline"], _env(settings, tmp_path / f"data-{c}"), tmp_path)
                   for c in "ab"]
        procs += writers
        _wait(lambda: all(p.assigned() for p in procs), 120, "both writers with partitions", procs)
        stream = Stream(settings).start()
        _wait(lambda: stream.sent >= 300, 60, "records flowing", procs)
        server.restart()
        at = stream.sent
        _wait(lambda: stream.sent >= at + 500, 120, "500 more events", procs)
        sent = stream.finish()
        analyst = _analyst(settings, s3_server)
        try:
            _wait(lambda: _landed(analyst) >= sent, 180,
                  f"{sent} events to land", procs)
            assert all(p.popen.poll() is None for p in procs), "a writer died with the catalog away"
            _stop(writers)
            _exactly_once(analyst, sent, settings)
        finally:
            analyst.close()
        for p in writers:
            assert p.popen.returncode == 0, p.text()[-3000:]
    finally:
        server.stop()


@pytest.mark.timeout(300)
def test_a_bucket_without_write_permission_is_one_clear_error_at_start(tansu_broker, s3_server: S3Server,
                                                                       pg_catalog: str, home: Path,
                                                                       tmp_path: Path) -> None:
    """Read-only credentials: `gangscope pipeline` and `gangscope run` each stop at once with one line naming the data
    path and what to fix (exit 2, a configuration error), not a traceback and not a start that fails later."""
    ro = home / "read-only"
    _secret(ro, s3_server, s3_server.reader)
    settings = _lake_settings(tmp_path, s3_server, pg_catalog, bootstrap_servers=tansu_broker.bootstrap)
    env = _env(settings, tmp_path / "data", HOME=str(ro), GANGSCOPE_COLLECTORS="")
    for args in (["pipeline"], ["run"]):
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "gangscope.app.cli", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=180)
        took = time.monotonic() - t0
        err = done.stderr
        assert done.returncode == 2, (args, done.returncode, err[-2000:])
        line = err.strip().splitlines()[-1]
        assert line.startswith("gangscope: cannot write to the lake's data path " + lake.data_path(settings)), err
        assert "403" in line or "Forbidden" in line or "AccessDenied" in line, line
        assert "permission" in line and "Traceback" not in err, err
        assert s3_server.reader.secret_key not in err and s3_server.admin.secret_key not in err
        assert took < 120, took
    assert _bucket(s3_server, settings) == set()  # nothing was written under the prefix


# --- retention and compaction on S3 -----------------------------------------------------------------------------


def _samples(start: datetime, metric: str, n: int = 1000) -> pl.DataFrame:
    return pl.DataFrame({"cluster": ["c1"] * n, "ts": [start + timedelta(seconds=i) for i in range(n)],
                         "metric": [metric] * n, "labels": ["{}"] * n, "value": [float(i) for i in range(n)],
                         "node": [None] * n, "target": ["t"] * n, "job": ["j"] * n, "instance": ["i"] * n},
                        schema_overrides={"node": pl.String})


def _points(server: S3Server, settings: config.Settings) -> set[str]:
    return {k for k in _bucket(server, settings) if "metric_points" in k}


@pytest.mark.timeout(300)
def test_retention_and_compaction_delete_retired_objects_but_not_a_readers(s3_server: S3Server, pg_catalog: str,
                                                                           tmp_path: Path) -> None:
    settings = _lake_settings(tmp_path, s3_server, pg_catalog)
    settings = dataclasses.replace(settings, retention=dataclasses.replace(settings.retention, raw_days=7))
    now = datetime.now(UTC).replace(microsecond=0)
    con = lake.connect(settings)
    reader = _analyst(settings, s3_server)
    try:
        insert_samples(con, _samples(now - timedelta(days=10), "old"))
        old = _points(s3_server, settings)
        for h in range(4):  # four small files of recent samples: compaction's work
            insert_samples(con, _samples(now - timedelta(hours=h + 1), f"recent{h}"))
        small = _points(s3_server, settings) - old
        assert len(old) == 1 and len(small) == 4, (old, small)

        # A reader in a transaction: its snapshot holds every file above.
        reader.execute("BEGIN TRANSACTION")
        assert reader.execute("SELECT count(*) FROM raw.metric_points").fetchone() == (5000,)

        # Retention within the grace (the default 10 minutes): the old rows go, the old object stays for the reader.
        stats = retention.apply(settings, con=con, now=now)
        assert stats.deleted["raw.metric_points"] == 1000 and stats.files_deleted == 0
        assert old <= _points(s3_server, settings)
        # Compaction within its window (pipeline.compaction.KEEP): the small files are merged, none deleted yet.
        merged = compaction.compact(con, skip=set())
        assert merged.merged_files >= 4 and merged.deleted_files == 0 and merged.orphans_deleted == 0
        after = _points(s3_server, settings)
        assert small <= after and len(after - small - old) == 1, after  # one merged object beside the originals
        assert reader.execute("SELECT count(*), sum(value) FROM raw.metric_points").fetchone() == (
            5000, 5 * sum(range(1000)))  # still read whole, from the objects retention and compaction retired
        reader.execute("COMMIT")
        assert reader.execute("SELECT count(*) FROM raw.metric_points").fetchone() == (4000,)

        # Past the windows (grace 0, keep 0): what they retired is deleted from the bucket, the rest stays.
        no_grace = dataclasses.replace(settings, retention=dataclasses.replace(settings.retention,
                                                                               file_grace_minutes=0))
        gone = retention.apply(no_grace, con=con, now=now)
        compaction.compact(con, keep=timedelta(0), skip=set())
        final = _points(s3_server, settings)
        assert gone.files_deleted >= 1 and not (old & final) and not (small & final), final
        assert len(final) == 1 and final == after - small - old
        assert reader.execute("SELECT count(*), count(DISTINCT metric) FROM raw.metric_samples").fetchone() == (4000, 4)
        assert _bucket(s3_server, settings) == _live_objects(con, settings)
    finally:
        reader.close()
        con.close()
