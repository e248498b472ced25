"""The lake on object storage, for real: Parquet on SeaweedFS over S3 (DuckDB's httpfs, no mock on either side),
the catalog in PostgreSQL, several writers. Its faults (the object store away, the catalog restarted) are in
test_object_storage_faults.py; what both files use is in tests/deploy/s3lake.py.

* The deployment at once: two `gangscope pipeline` writers and `gangscope run` (collectors on the sandbox, its own
  pipeline, scheduled builds, compaction and retention) in one consumer group, an analyst attached read-only with
  read-only S3 credentials, one writer killed with SIGKILL mid-run. Every record Kafka holds lands exactly once (by
  (partition, offset) against the topics, and by uid for the test's own events), and the S3 secret (the canary)
  reaches no log, lake table, catalog row, report, /metrics or /healthz.
* A bucket the credentials may only read: one clear error at start.
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
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml

from gangscope import config
from gangscope.transport import kafka as pkafka
from pipeline import compaction, lake, retention
from pipeline.land import insert_samples
from tests.deploy.s3lake import (
    ROOT,
    Proc,
    Stream,
    _analyst,
    _bucket,
    _env,
    _exactly_once,
    _final_compaction,
    _get,
    _healthz,
    _lake_settings,
    _landed,
    _live_objects,
    _secret,
    _spawn,
    _stop,
    _wait,
)
from tests.servers.postgres import PASSWORD as PG_PASSWORD
from tests.servers.process import free_port
from tests.servers.s3 import S3Server

pytestmark = [pytest.mark.s3, pytest.mark.usefixtures("s3_home")]


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


def test_a_port_taken_before_weed_binds_it_starts_it_again_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """The S3 gateway's port taken by another process between its pick and weed's bind (CI, 7 Dec: four workers
    starting servers together): weed exits, and the server is started again on other ports, not failed."""
    import socket

    from tests.servers import s3

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks = iter([free_port() for _ in range(6)] + [taken.getsockname()[1]])  # master, volume, filer; then s3
    monkeypatch.setattr(s3, "free_port", lambda: next(picks, None) or free_port())
    exits: list[str] = []
    real = s3._start

    def start(timeout_s: float) -> S3Server:
        try:
            return real(timeout_s)
        except s3._Exited as e:
            exits.append(str(e))
            raise

    monkeypatch.setattr(s3, "_start", start)
    port = taken.getsockname()[1]
    try:
        server = s3.start()
    finally:
        taken.close()
    try:
        assert len(exits) == 1 and "exited" in exits[0], exits
        assert server.ports["s3"] != port
        assert s3.request(server.endpoint, server.admin, "GET", f"/{server.bucket}")[0] == 200
    finally:
        server.remove()
