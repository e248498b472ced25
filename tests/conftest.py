"""Shared fixtures: a real embedded Kafka broker and PostgreSQL per session, a lake in a temp dir, settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangscope import config
from gangscope.transport.broker import EmbeddedBroker
from tests.servers import postgres

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A real Kafka-protocol broker (Tansu) on a free loopback port."""
    b = EmbeddedBroker().start()
    yield b
    b.stop()


@pytest.fixture
def settings(tmp_path: Path, broker: EmbeddedBroker, request: pytest.FixtureRequest) -> config.Settings:
    """Settings pointing at the session broker, with topics and group unique to this test."""
    prefix = f"t{abs(hash(request.node.nodeid)) % 10**8}."
    return config.load(
        overrides={
            "data": str(tmp_path / "data"),
            "kafka": {"bootstrap_servers": broker.bootstrap, "topic_prefix": prefix, "partitions": 4},
            "pipeline": {"group_id": f"{prefix}pipeline", "flush_seconds": 0.5, "idle_seconds": 3.0},
        },
        environ={},
    )


@pytest.fixture
def offline_settings(tmp_path: Path) -> config.Settings:
    """Settings for tests that need the lake but no broker."""
    return config.load(overrides={"data": str(tmp_path / "data")}, environ={})


@pytest.fixture(scope="session")
def reference() -> Path:
    """../shared/reference: real objects and metric listings the fixtures are built from."""
    if not REFERENCE.is_dir():
        pytest.skip(f"reference data not found at {REFERENCE}")
    return REFERENCE


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.PostgresServer]:
    """A private PostgreSQL server on a free loopback port (password auth). In CI a missing server fails."""
    try:
        server = postgres.start()
    except RuntimeError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))
    yield server
    server.stop()
