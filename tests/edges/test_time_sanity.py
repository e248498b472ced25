"""Time sanity at the edge (CONTRACT section 2): insane times go to the dead letter with the field and,
for replay, file and line; nothing is shifted; the good records beside them land unchanged."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from gangscope import telemetry, timesanity
from gangscope.app.replay import replay
from gangscope.records import ScrapeBatch, rfc3339
from pipeline import lake
from tests.collectors_k8s import objects
from tests.collectors_k8s.test_k8s_replay_capture import T0_MS, k8s_file, metrics_file

NOW = datetime(2026, 6, 1, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


@pytest.mark.parametrize("ts, why", [
    (253402300799000, "in the future"),  # 9999-12-31 in ms
    (NOW_MS // 1000, "looks like seconds"),
    (NOW_MS * 1000, "looks like microseconds"),
    (NOW_MS * 1_000_000, "looks like nanoseconds"),
    (-5, "negative"),
    (0, "looks like seconds|before 2000"),
    (NOW_MS + 11 * 60_000, "600 s in the future"),
    (946684799999, "before 2000"),
])
def test_millisecond_rules_name_the_field_and_the_unit(ts, why):
    reason = timesanity.check_ms("sample timestamp", ts, NOW_MS)
    assert reason is not None and reason.startswith(f"sample timestamp {ts} ")
    assert any(w in reason for w in why.split("|")), reason


@pytest.mark.parametrize("ts", [NOW_MS, NOW_MS + 9 * 60_000, 946684800000, NOW_MS - 86_400_000 * 365 * 20])
def test_sane_milliseconds_pass(ts):
    assert timesanity.check_ms("t", ts, NOW_MS) is None


def test_skew_is_configurable():
    assert timesanity.check_ms("t", NOW_MS + 120_000, NOW_MS, skew_s=60) is not None
    assert timesanity.check_ms("t", NOW_MS + 120_000, NOW_MS, skew_s=300) is None


def test_object_times_are_all_checked_but_labels_are_user_text(reference):
    pod = objects.pod(reference, "p")
    pod["metadata"]["labels"]["x.io/startTime"] = "not a time"
    pod["metadata"]["annotations"] = {"lastSeenAt": "9999-01-01T00:00:00Z"}
    assert timesanity.check_object(pod, NOW) is None
    pod["status"]["conditions"][0]["lastTransitionTime"] = "9999-12-31T23:59:59Z"
    reason = timesanity.check_object(pod, NOW)
    assert reason.startswith("status.conditions[0].lastTransitionTime 9999-12-31")
    pod["status"]["conditions"][0]["lastTransitionTime"] = "yesterday"
    assert "not an RFC 3339 time" in timesanity.check_object(pod, NOW)


def test_split_refused_keeps_the_sane_samples_and_their_series():
    b = ScrapeBatch("c", "http://x:9400/metrics", "dcgm", "x:9400", NOW_MS)
    for i, ts in enumerate([None, NOW_MS - 1000, 253402300799000, NOW_MS // 1000]):
        b.add_sample(b.add_series(f"m{i}", {"gpu": str(i)}), float(i), ts)
    refused = timesanity.split_refused(b, NOW_MS)
    assert b.series_metric == ["m0", "m1"] and b.sample_series == [0, 1] and b.sample_value == [0.0, 1.0]
    assert refused.series_metric == ["m2", "m3"] and refused.sample_ts_ms == [253402300799000, NOW_MS // 1000]
    assert refused.rejected.startswith("m2: sample timestamp 253402300799000") and "1 more" in refused.rejected
    json.loads(b.to_bytes()) and json.loads(refused.to_bytes())  # both encode


def _dead_letters(settings) -> list[tuple[str, str, bytes]]:
    con = lake.connect(settings, read_only=True)
    try:
        return con.execute("SELECT topic, reason, payload FROM raw.dead_letters ORDER BY reason").fetchall()
    finally:
        con.close()


def test_replay_sends_insane_times_to_the_dead_letter_with_file_and_line(settings, tmp_path, reference):
    good_k8s = k8s_file(tmp_path, reference)
    future = rfc3339(datetime.now(UTC) + timedelta(hours=1))
    pod = objects.pod(reference, "bad-condition")
    pod["status"]["conditions"][0]["lastTransitionTime"] = "9999-12-31T23:59:59Z"
    bad_lines = [
        {"type": "ADDED", "object": objects.pod(reference, "far-future"), "observedAt": "9999-12-31T23:59:59Z"},
        {"type": "ADDED", "object": objects.pod(reference, "an-hour-ahead"), "observedAt": future},
        {"type": "ADDED", "object": objects.pod(reference, "ancient"), "observedAt": "1970-01-01T00:00:01Z"},
        {"type": "ADDED", "object": pod},
    ]
    k8s = tmp_path / "mixed.jsonl"
    k8s.write_text(good_k8s.read_text() + "".join(json.dumps(x) + "\n" for x in bad_lines)
                   + "[" * 100_000 + "\n")  # nested deeper than a JSON reader recurses
    metrics = metrics_file(tmp_path)
    metrics.write_text(metrics.read_text()
                       + f'DCGM_FI_DEV_GPU_UTIL{{gpu="1",Hostname="n",job="dcgm",instance="i:9400"}} 5 '
                       f"{T0_MS // 1000}\n"
                       + 'DCGM_FI_DEV_GPU_UTIL{gpu="2",Hostname="n",job="dcgm",instance="i:9400"} 6 253402300799000\n')
    before = telemetry.REJECTED_AT_EDGE.labels(f"{settings.kafka.topic_prefix}k8s")._value.get()
    stats = replay(settings, [str(k8s)], [str(metrics)], progress=None)
    assert stats.landed
    dead = _dead_letters(settings)
    reasons = [r for _, r, _ in dead]
    assert len(dead) == 6, reasons
    assert all(r.startswith("refused at the edge: ") for r in reasons)
    text = "\n".join(reasons)
    for line, field in ((6, "observedAt 9999-12-31"), (7, "observedAt"),
                        (8, "observedAt 1970-01-01T00:00:01+00:00 is before 2000-01-01"),
                        (9, "status.conditions[0].lastTransitionTime 9999-12-31"), (10, "JSON nested too deep")):
        assert f"mixed.jsonl:{line}: {field}" in text, text
    assert "m.prom:6: sample timestamp" in text and "looks like seconds" in text and "1 more" in text
    # nothing shifted: the payload keeps the original time
    assert any(b"9999-12-31T23:59:59" in bytes(p) for _, _, p in dead)
    after = telemetry.REJECTED_AT_EDGE.labels(f"{settings.kafka.topic_prefix}k8s")._value.get()
    assert after - before == 5  # counted once each, though the watch file is read twice
    con = lake.connect(settings, read_only=True)
    try:
        names = sorted(r[0] for r in con.execute("SELECT name FROM raw.k8s_objects").fetchall())
        samples = con.execute("SELECT count(*), min(epoch_ms(ts)), max(epoch_ms(ts)) FROM raw.metric_samples") \
            .fetchone()
    finally:
        con.close()
    assert names == ["job-trainer-a1b2c", "w0", "w0.1", "w1", "w2"]  # the good records, none of the bad
    assert samples == (4, T0_MS, T0_MS + 45_000)


def test_live_scrape_refuses_exporter_timestamps_from_the_future(tmp_path):
    import asyncio

    from collectors.metrics.scrape import Scraper
    from collectors.metrics.targets import Target
    from tests.collectors_metrics.httpserve import Route, serve

    now_ms = int(time.time() * 1000)
    body = (f"ok_metric 1\nown_ts_metric 2 {now_ms - 5000}\nfuture_metric 3 253402300799000\n"
            f"seconds_metric 4 {now_ms // 1000}\n")
    got: list[ScrapeBatch] = []
    with serve({"/metrics": Route(body)}) as (base, _):
        target = Target(url=f"{base}/metrics", job="j", interval_s=15.0, timeout_s=5.0)

        async def once():
            async with Scraper("c", got.append) as s:
                await s.scrape_round([target])

        asyncio.run(once())
    good = [b for b in got if not b.rejected]
    bad = [b for b in got if b.rejected]
    assert len(good) == 1 and good[0].up and good[0].series_metric == ["ok_metric", "own_ts_metric"]
    assert len(bad) == 1 and bad[0].series_metric == ["future_metric", "seconds_metric"]
    assert bad[0].rejected.startswith("future_metric: sample timestamp 253402300799000")
