"""Every producer codec and bad records through a real broker: good records land once, bad ones as dead letters."""

from __future__ import annotations

import json

import pytest

from gangscope import config
from gangscope.records import K8S, SCRAPE
from gangscope.transport import kafka as pkafka
from pipeline import consume, lake
from tests.pipeline.helpers import landed_counts, publish

pytestmark = pytest.mark.both_brokers  # Kafka behaviour: on the embedded broker and on Apache Kafka

CODECS = ("gzip", "lz4", "zstd", "none")


def test_every_codec_lands_and_bad_records_become_dead_letters(settings: config.Settings) -> None:
    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap
    for i, codec in enumerate(CODECS):
        settings.kafka.compression = codec
        publish(settings, range(i * 40, i * 40 + 40), range(i * 10, i * 10 + 10))
    topics = pkafka.topics(settings)
    bad = [
        (topics[K8S], b'{"v":2,"kind":"k8s","type":"ADDED","observed_at":'),
        (topics[K8S], b'{"v":1,"kind":"k8s","type":"ADDED","observed_at":"2026-03-01T12:00:00Z","object":{}}'),
        (topics[SCRAPE], json.dumps({"v": 2, "kind": "k8s", "type": "ADDED"}).encode()),
    ]
    prod = pkafka.producer(settings, bootstrap, compression_type="lz4")
    try:
        for topic, value in bad:
            prod.send(topic, key=b"bad", value=value).get(timeout=30)
    finally:
        prod.close()
    stats = consume.run(settings, bootstrap, once=True)
    n = 40 * len(CODECS)
    assert (stats.k8s_rows, stats.scrapes, stats.dead) == (n, 10 * len(CODECS), len(bad))
    assert landed_counts(settings) == (n, n, 4 * 10 * len(CODECS), 4 * 10 * len(CODECS))
    con = lake.connect(settings, read_only=True)
    try:
        dead = con.execute("SELECT topic, payload, reason FROM raw.dead_letters").fetchall()
    finally:
        con.close()
    why = {(t, bytes(p)): r for t, p, r in dead}
    assert len(dead) == len(why) and set(why) == set(bad)  # each bad record once, with its exact bytes
    assert why[bad[0]].startswith("malformed JSON")
    assert why[bad[1]] == "unsupported envelope version v=1 (this pipeline reads v=2)"
    assert why[bad[2]] == "unknown record kind 'k8s' on a scrape topic"
