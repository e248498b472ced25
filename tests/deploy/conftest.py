"""Deploy-test fixtures: a fresh PostgreSQL database per test for the lake catalog."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

PG = {"host": "127.0.0.1", "port": "5432", "user": "postgres", "dbname": "test"}


def _psql(sql: str, dbname: str = PG["dbname"]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["psql", "-h", PG["host"], "-p", PG["port"], "-U", PG["user"], "-d", dbname, "-v", "ON_ERROR_STOP=1",
         "-qAtc", sql],
        capture_output=True, text=True, timeout=30,
    )


@pytest.fixture
def pg_catalog() -> Iterator[str]:
    """``postgres://`` URL of a new database ``gangscope_test_<random>``, dropped afterwards."""
    if not shutil.which("psql"):
        pytest.skip("psql not installed: cannot create a PostgreSQL test database")
    name = f"gangscope_test_{uuid.uuid4().hex[:10]}"
    made = _psql(f"CREATE DATABASE {name}")
    if made.returncode != 0:
        pytest.skip(f"PostgreSQL at {PG['host']}:{PG['port']} not usable (user {PG['user']}, database "
                    f"{PG['dbname']}): {made.stderr.strip()}")
    yield f"postgres://{PG['user']}@{PG['host']}:{PG['port']}/{name}"
    _psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
