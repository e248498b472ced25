"""Credentials in settings, URLs or headers never reach a log line, text or JSON."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from gangscope import config, logs

SECRETS = ("hunter2-sasl", "pg-s3cret", "eyJhbGciOiJSUzI1NiJ9.tok", "query-tok-9")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _emit() -> None:
    settings = config.load(
        environ={
            "GANGSCOPE_CATALOG": "postgres://gangscope:pg-s3cret@postgres:5432/lake",
            "GANGSCOPE_KAFKA_SASL_PLAIN_USERNAME": "gangscope",
            "GANGSCOPE_KAFKA_SASL_PLAIN_PASSWORD": "hunter2-sasl",
        }
    )
    log = logging.getLogger("gangscope.test")
    log.info("settings: %s", settings)  # the whole dataclass, security dict included
    log.info("security %s", settings.kafka.security)
    log.warning("catalog %s unreachable", settings.catalog_url)
    log.info("GET /api/v1/pods Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.tok")
    log.info("scrape https://exporter:9400/metrics?token=query-tok-9 failed")
    try:
        raise ConnectionError(f"could not connect to {settings.catalog_url}")
    except ConnectionError:
        log.exception("attach failed")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_credential_in_logs(fmt: str, capsys: pytest.CaptureFixture[str], restore_logging: None) -> None:
    logs.setup("INFO", fmt)
    _emit()
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) >= 6
    for secret in SECRETS:
        assert secret not in err, f"{secret!r} leaked in {fmt} logs"
    # What is not secret still reads: the user name, the host, the message.
    assert "gangscope" in err and "postgres:5432/lake" in err and "attach failed" in err
    if fmt == "json":
        records = [json.loads(line) for line in lines if line.startswith("{")]
        assert {r["msg"] for r in records} >= {"attach failed"}
        assert any("ConnectionError" in r.get("exc", "") for r in records)
