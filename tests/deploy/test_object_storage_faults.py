"""The lake on object storage when its parts fail (tests/deploy/test_object_storage.py has the deployment; the shared
pieces are in tests/deploy/s3lake.py): the object store stopped for 60 s and started again under two writers and
`gangscope run`, and the catalog (PostgreSQL) restarted under two writers. Nothing lost, nothing doubled, no process
exits."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangscope.transport import kafka as pkafka
from pipeline import lake
from tests.deploy.s3lake import (
    Proc,
    Stream,
    _analyst,
    _bucket,
    _env,
    _exactly_once,
    _final_compaction,
    _healthz,
    _lake_settings,
    _landed,
    _secret,
    _spawn,
    _stop,
    _wait,
)
from tests.servers import postgres
from tests.servers.process import free_port
from tests.servers.s3 import S3Server

pytestmark = [pytest.mark.s3, pytest.mark.usefixtures("s3_home")]


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
# At most 40 events/s (each a k8s object and a scrape of ~40 samples): enough that every writer lands through the fault,
# a quarter of the default's rate, whose data made the first build outlast its wait on a loaded machine.
GENTLE = {"burst": 20, "pause_s": 0.5}


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
        stream = Stream(settings, **GENTLE).start()
        # The first build is a full one over S3: minutes on a loaded machine (CI, 7 Dec: none within 120 s).
        _wait(lambda: _landed(analyst) >= 200 and "built " in run.text(), 300, "landings and a build", procs)
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
        stream = Stream(settings, **GENTLE).start()
        _wait(lambda: stream.sent >= 300, 60, "records flowing", procs)
        server.restart()
        at = stream.sent
        _wait(lambda: stream.sent >= at + 500, 120, "500 more events", procs)
        sent = stream.finish()
        analyst = _analyst(settings, s3_server)
        try:
            _wait(lambda: _landed(analyst) >= sent, 180,
                  f"{sent} events to land", procs)
            assert all(p.popen.poll() is None for p in procs), "a writer died with the catalog away:\n" + "\n".join(
                f"--- {p.name} (exit {p.popen.poll()})\n{p.text()[-3000:]}" for p in procs)
            _stop(writers)
            _exactly_once(analyst, sent, settings)
        finally:
            analyst.close()
        for p in writers:
            assert p.popen.returncode == 0, p.text()[-3000:]
    finally:
        server.stop()
