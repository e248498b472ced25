"""Other Kafka clients read gangscope's topics: Debian's kcat (librdkafka) against Apache Kafka.

The recipes are the ones docs/records.md gives ("Reading the topics with other clients").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gangscope import config
from gangscope.records import K8S, SCRAPE
from gangscope.transport import kafka as pkafka
from tests.pipeline.helpers import publish
from tests.servers import kafka


def _kcat() -> str:
    kcat = shutil.which("kcat")
    if kcat is None:
        if os.environ.get("CI"):
            raise AssertionError("kcat is not installed (.ci/run installs Debian's kcat)")
        pytest.skip("kcat is not installed")
    return kcat


def _read(kcat: str, bootstrap: str, topic: str) -> list[dict]:
    """Every record of ``topic`` from the beginning, as kcat's JSON envelope (-J), exiting at the end (-e)."""
    done = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-J", "-q"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_kcat_reads_keys_and_json_values_of_each_topic(kafka_server: kafka.KafkaServer, tmp_path: Path) -> None:
    """On Apache Kafka only: librdkafka cannot complete the ApiVersions handshake with the embedded broker."""
    kcat = _kcat()
    bootstrap = kafka_server.bootstrap
    settings = config.load(overrides={"data": str(tmp_path / "data"), "kafka": {
        "bootstrap_servers": bootstrap, "topic_prefix": f"kc{uuid.uuid4().hex[:6]}."}}, environ={})
    acked = publish(settings, range(30), range(12))  # zstd, the producer's default codec
    topics = pkafka.topics(settings)
    k8s = _read(kcat, bootstrap, topics[K8S])
    scrapes = _read(kcat, bootstrap, topics[SCRAPE])
    assert len(k8s) == 30 and len(scrapes) == 12
    for got in k8s + scrapes:  # what kcat saw is exactly what the publisher had acknowledged
        assert got["offset"] < acked[(got["topic"], got["partition"])]
    for got in k8s:
        value = json.loads(got["payload"])
        assert (value["v"], value["kind"]) == (2, "k8s")
        meta = value["object"]["metadata"]
        assert got["key"] == f"v1/Pod/{meta['namespace']}/{meta['name']}"
    assert sorted(json.loads(g["payload"])["object"]["metadata"]["uid"] for g in k8s) == [
        f"uid-{i:06d}" for i in range(30)]
    for got in scrapes:
        value = json.loads(got["payload"])
        assert (value["v"], value["kind"]) == (2, "scrape")
        assert got["key"] == value["target"]
        assert len(value["x"]) == 4 and value["mn"] == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"]
