"""Record builders and a pipeline subprocess runner shared by the pipeline tests."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gangscope.config import Settings
from gangscope.records import K8sEvent, ScrapeBatch

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def pod_event(i: int, cluster: str = "c1") -> K8sEvent:
    """A Pod watch event whose uid is unique per ``i`` (the exactly-once key)."""
    obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"trainer-{i}", "namespace": "ml", "uid": f"uid-{i:06d}", "resourceVersion": str(1000 + i),
                     "creationTimestamp": "2026-03-01T12:00:00Z", "labels": {"jobset.sigs.k8s.io/jobset-name": "js"}},
        "spec": {"nodeName": f"gpu-node-{i % 4}"},
        "status": {"phase": "Running"},
    }
    return K8sEvent(cluster, "MODIFIED" if i % 2 else "ADDED", T0 + timedelta(seconds=i), obj)


def dcgm_scrape(i: int, gpus: int = 2, cluster: str = "c1") -> ScrapeBatch:
    """A small dcgm-exporter-like scrape; every sample carries label ``seq`` = ``i``."""
    node = f"gpu-node-{i % 4}"
    b = ScrapeBatch(cluster, f"http://{node}:9400/metrics", "dcgm-exporter", f"{node}:9400",
                    int(T0.timestamp() * 1000) + i * 15_000, duration_s=0.01)
    for g in range(gpus):
        for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"):
            s = b.add_series(metric, {"gpu": str(g), "Hostname": node, "modelName": "NVIDIA L4", "seq": str(i)})
            b.add_sample(s, float(i % 100) + g / 10)
    return b


def pipeline_cmd(settings: Settings, *extra: str) -> list[str]:
    assert settings.kafka.bootstrap_servers
    return [sys.executable, "-m", "gangscope.app.cli", "pipeline", "--bootstrap-servers",
            settings.kafka.bootstrap_servers,
            "--data", str(settings.data), *extra]


def pipeline_env(settings: Settings, **pipeline: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GANGSCOPE_")}
    env["GANGSCOPE_KAFKA_TOPIC_PREFIX"] = settings.kafka.topic_prefix
    env["GANGSCOPE_KAFKA_PARTITIONS"] = str(settings.kafka.partitions)
    env["GANGSCOPE_PIPELINE_GROUP_ID"] = settings.pipeline.group_id
    env["GANGSCOPE_PIPELINE_IDLE_SECONDS"] = str(settings.pipeline.idle_seconds)
    env["GANGSCOPE_PIPELINE_FLUSH_SECONDS"] = str(settings.pipeline.flush_seconds)
    for k, v in pipeline.items():
        env[f"GANGSCOPE_PIPELINE_{k.upper()}"] = str(v)
    env["PYTHONFAULTHANDLER"] = "1"  # a stuck pipeline dumps its threads on SIGABRT
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_pipeline(settings: Settings, *extra: str, **pipeline: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(pipeline_cmd(settings, *extra), env=pipeline_env(settings, **pipeline), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def publish(settings: Settings, events: range, scrapes: range = range(0)) -> dict[tuple[str, int], int]:
    """Publish pod events and dcgm scrapes to the settings' broker; the acknowledged next offsets."""
    from gangscope.transport.publish import Publisher

    assert settings.kafka.bootstrap_servers
    with Publisher(settings, settings.kafka.bootstrap_servers) as pub:
        for i in events:
            pub.publish(pod_event(i))
        for i in scrapes:
            pub.publish(dcgm_scrape(i))
        assert pub.flush(60)
        return pub.acked_offsets()


def publish_produced_at(settings: Settings, events: range, timestamp_ms: int) -> dict[tuple[str, int], int]:
    """Publish pod events stamped as produced at ``timestamp_ms`` (Kafka CreateTime): records that waited elsewhere
    (a backlog, a pipeline that was away); the acknowledged next offsets."""
    from gangscope.transport import kafka as pkafka

    assert settings.kafka.bootstrap_servers
    topic = pkafka.topics(settings)["k8s"]
    prod = pkafka.producer(settings, settings.kafka.bootstrap_servers)
    try:
        sent = [prod.send(topic, e.to_bytes(), key=e.key(), timestamp_ms=timestamp_ms) for e in map(pod_event, events)]
        prod.flush(60)
        acked: dict[tuple[str, int], int] = {}
        for f in sent:
            md = f.get(timeout=60)
            acked[(md.topic, md.partition)] = max(acked.get((md.topic, md.partition), 0), md.offset + 1)
        return acked
    finally:
        prod.close()


def landed_counts(settings: Settings, con=None) -> tuple[int, int, int, int]:
    """(k8s rows, distinct uids, samples, distinct samples) in the lake: equal pairs mean nothing doubled."""
    from pipeline import lake

    own = con is None
    con = con or lake.connect(settings, read_only=True)
    try:
        k = con.execute("SELECT count(*), count(DISTINCT uid) FROM raw.k8s_objects").fetchone()
        m = con.execute("SELECT count(*), count(DISTINCT (labels->>'seq', metric, labels->>'gpu')) "
                        "FROM raw.metric_samples").fetchone()
        assert k and m
        return k[0], k[1], m[0], m[1]
    finally:
        if own:
            con.close()
