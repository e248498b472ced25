"""Replay (files -> Kafka -> lake) and capture (fake cluster -> file) against the real broker and lake."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import pytest

from collectors.k8s.capture import capture, parse_duration
from collectors.k8s.client import Client
from collectors.k8s.jsonl import read_events
from collectors.replay import merged
from gangscope.app import cli
from gangscope.app.replay import replay
from gangscope.errors import UserError
from gangscope.records import K8sEvent
from pipeline import lake
from tests.collectors_k8s import objects
from tests.collectors_k8s.conftest import names, read_k8s_topic
from tests.collectors_k8s.test_k8s_reflector import wait_for

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)


def k8s_file(tmp_path, reference, name="k8s.jsonl"):
    """Pods with observedAt at T0+10s.., a Workload and an Event without (times from inside the objects)."""
    lines = [{"type": "ADDED", "object": objects.pod(reference, f"w{i}"),
              "observedAt": f"2026-03-01T10:00:{10 + 10 * i:02d}Z"} for i in range(3)]
    wl = objects.workload_v1beta2(reference)  # QuotaReserved at 10:00:03
    lines.insert(0, {"type": "ADDED", "object": wl})
    lines.append({"type": "ADDED", "object": objects.event("w0.1", "0/4 nodes are available: 4 Insufficient "
                                                          "nvidia.com/gpu.", ts="2026-03-01T10:00:45Z")})
    f = tmp_path / name
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f


def metrics_file(tmp_path):
    f = tmp_path / "m.prom"
    rows = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for s in range(0, 60, 15):
        rows.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="gpu-node-1",job="dcgm",instance="10.0.0.1:9400"}} '
                    f"{80 + s} {T0_MS + s * 1000}")
    f.write_text("\n".join(rows) + "\n")
    return f


def _ms(rec) -> int:
    return int(rec.observed_at.timestamp() * 1000) if isinstance(rec, K8sEvent) else rec.scraped_at_ms


def test_merge_is_in_timestamp_order_across_files(settings, tmp_path, reference):
    recs = list(merged(settings, [str(k8s_file(tmp_path, reference))], [str(metrics_file(tmp_path))]))
    times = [_ms(r) for r in recs]
    assert times == sorted(times) and len(recs) == 5 + 4
    # 10:00:00 scrape, :03 Workload (its condition time), :10 pod w0, :15 scrape
    assert [type(r).__name__ for r in recs[:4]] == ["ScrapeBatch", "K8sEvent", "K8sEvent", "ScrapeBatch"]


def test_replay_publishes_in_order_without_landing(settings, tmp_path, reference):
    f = k8s_file(tmp_path, reference)
    stats = replay(settings, [str(f)], [], land=False, progress=None)
    assert stats.k8s_events == 5 and not stats.landed and sum(stats.offsets.values()) == 5
    records = read_k8s_topic(settings, expect=5)
    assert len(records) == 5
    assert sorted(names(records)) == ["job-trainer-a1b2c", "w0", "w0.1", "w1", "w2"]
    wl = next(r for r in records if r["object"]["kind"] == "Workload")
    assert wl["observed_at"] == "2026-03-01T10:00:03.000Z"


@pytest.mark.both_brokers
def test_replay_lands_k8s_and_metrics_in_the_lake(settings, tmp_path, reference):
    stats = replay(settings, [str(k8s_file(tmp_path, reference))], [str(metrics_file(tmp_path))], progress=None)
    assert stats.landed and stats.k8s_events == 5 and stats.metric_batches == 4 and stats.metric_samples == 4
    con = lake.connect(settings, read_only=True)
    try:
        rows = con.execute("SELECT event_type, api_version, kind, namespace, name, observed_at, uid "
                           "FROM raw.k8s_objects ORDER BY observed_at").fetchall()
        samples = con.execute("SELECT count(*), min(value), max(value) FROM raw.metric_samples").fetchone()
    finally:
        con.close()
    assert [(r[2], r[4]) for r in rows] == [("Workload", "job-trainer-a1b2c"), ("Pod", "w0"), ("Pod", "w1"),
                                            ("Pod", "w2"), ("Event", "w0.1")]
    assert rows[0][1] == "kueue.x-k8s.io/v1beta2" and rows[0][3] == "team-a"
    assert rows[0][5] == datetime(2026, 3, 1, 10, 0, 3, tzinfo=UTC)
    assert samples == (4, 80.0, 125.0)


def test_replay_cli_reports_file_and_line_of_a_malformed_line(settings, tmp_path, reference, capsys):
    f = k8s_file(tmp_path, reference)
    with f.open("a") as out:
        out.write('{"type": "ADDED", "object": \n')
    rc = cli.main(["replay", "--k8s", str(f), "--no-land", "--bootstrap-servers", settings.kafka.bootstrap_servers,
                   "--data", str(settings.data)])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{f}:6: not JSON" in err.splitlines()[-1]
    # nothing of the file was published (replaying the fixed file will not double the first 5 lines)
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    try:
        assert f"{settings.kafka.topic_prefix}k8s" not in admin.list_topics()
    finally:
        admin.close()


def test_replay_without_inputs_or_with_missing_file_fails_clearly(settings, tmp_path):
    with pytest.raises(UserError, match="nothing to replay"):
        replay(settings, [], [], land=False)
    with pytest.raises(UserError, match="cannot read .*missing.jsonl"):
        replay(settings, [str(tmp_path / "missing.jsonl")], [], land=False)


def test_capture_writes_what_replay_reads(settings, api, tmp_path, reference):
    objects.populate(api, reference)
    settings.k8s.discovery_interval_s = 0.2
    out = tmp_path / "cap.jsonl"
    stop = threading.Event()
    result: dict[str, int] = {}
    t = threading.Thread(target=lambda: result.update(n=capture(settings, Client(api.url), out, 30.0, stop)))
    t.start()
    wait_for(lambda: out.exists() and out.stat().st_size > 0 and api.count_requests(watch=True) >= 12)
    api.put("", "v1", "pods", objects.pod(reference, "late-pod"))
    api.delete("", "v1", "pods", "worker-0", "team-a")
    time.sleep(0.5)
    stop.set()
    t.join(15)
    assert not t.is_alive()
    evs = list(read_events(out, "c"))
    assert result["n"] == len(evs) == 14  # 12 kinds' objects listed + ADDED late-pod + DELETED worker-0
    assert [(e.type, e.object["metadata"]["name"]) for e in evs if e.object["kind"] == "Pod"] == [
        ("ADDED", "worker-0"), ("ADDED", "late-pod"), ("DELETED", "worker-0")]
    assert all(isinstance(e.observed_at, datetime) for e in evs)
    first_line = json.loads(out.read_text().splitlines()[0])
    assert set(first_line) == {"type", "object", "observedAt"}
    # and the file replays into Kafka unchanged
    replay(settings, [str(out)], [], land=False, progress=None)
    records = read_k8s_topic(settings, expect=14)
    assert sorted(names(records)) == sorted(e.object["metadata"]["name"] for e in evs)


def test_parse_duration():
    assert parse_duration("90") == 90 and parse_duration("15m") == 900 and parse_duration("2h") == 7200
    assert parse_duration("1.5s") == 1.5
    with pytest.raises(UserError, match="--duration"):
        parse_duration("soon")
