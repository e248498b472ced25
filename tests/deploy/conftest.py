"""Deploy-test fixtures: a fresh PostgreSQL database per test for the lake catalog; for the object-storage tests a
HOME holding the S3 secret and the processes they spawn."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.s3lake import Proc, _secret
from tests.servers.postgres import PostgresServer
from tests.servers.s3 import S3Server


@pytest.fixture
def pg_catalog(postgres_server: PostgresServer) -> Iterator[str]:
    """``postgres://`` URL (with password) of a new database ``gangscope_test_<random>``, dropped afterwards."""
    name = f"gangscope_test_{uuid.uuid4().hex[:10]}"
    made = postgres_server.psql(f"CREATE DATABASE {name}")
    assert made.returncode == 0, made.stderr
    yield postgres_server.url(name)
    postgres_server.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def home(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A HOME whose DuckDB secret directory holds the read-write S3 secret; every process of the object-storage tests
    runs with it (the test process too, see ``s3_home``)."""
    path = tmp_path_factory.mktemp("home")
    _secret(path, s3_server, s3_server.admin)
    return path


@pytest.fixture
def s3_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``home`` as this test's HOME: the object-storage modules use it for every test (``pytestmark``)."""
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """The gangscope processes a test spawned: any still running at its end is killed."""
    started: list[Proc] = []
    yield started
    for p in started:
        if p.popen.poll() is None:
            p.popen.kill()
            p.popen.wait(10)
