"""Deploy-test fixtures: a fresh PostgreSQL database per test for the lake catalog."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.servers.postgres import PostgresServer


@pytest.fixture
def pg_catalog(postgres_server: PostgresServer) -> Iterator[str]:
    """``postgres://`` URL (with password) of a new database ``gangscope_test_<random>``, dropped afterwards."""
    name = f"gangscope_test_{uuid.uuid4().hex[:10]}"
    made = postgres_server.psql(f"CREATE DATABASE {name}")
    assert made.returncode == 0, made.stderr
    yield postgres_server.url(name)
    postgres_server.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
