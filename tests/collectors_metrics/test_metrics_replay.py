"""Replay files (timestamped Prometheus text) and the capture -> replay round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.metrics import replayfile
from collectors.metrics.capture import capture, parse_duration, write_batch
from collectors.metrics.parse import parse_text
from collectors.metrics.replayfile import read_metrics_file
from gangscope import config
from gangscope.errors import UserError
from tests.collectors_metrics.httpserve import Route
from tests.collectors_metrics.httpserve import serve as http_serve
from tests.collectors_metrics.synthetic import h100_scrape

T0 = 1_764_460_800_000  # 2025-11-30T00:00:00Z


def _sim_file(path: Path, rounds: int, nodes: int) -> None:
    """Like the simulator writes: many targets in one file, one scrape time's samples together."""
    with path.open("w") as f:
        for r in range(rounds):
            ts = T0 + r * 15_000
            f.write("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
            for n in range(nodes):
                for g in range(2):
                    f.write(f'DCGM_FI_DEV_GPU_UTIL{{job="dcgm",instance="10.0.0.{n}:9400",gpu="{g}",'
                            f'Hostname="node-{n}"}} {r * 10 + g} {ts}\n')
                f.write(f'node_infiniband_port_data_received_bytes_total{{job="node",instance="10.0.0.{n}:9100",'
                        f'device="mlx5_0",port="1"}} {r * 1e9:.0f} {ts + 7}\n')


def test_groups_per_target_and_time_in_time_order(tmp_path: Path) -> None:
    path = tmp_path / "m.prom"
    _sim_file(path, rounds=4, nodes=3)
    batches = list(read_metrics_file(path, "c1"))
    assert len(batches) == 4 * 3 * 2
    keys = [(b.scraped_at_ms, b.job, b.instance) for b in batches]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    dcgm = [b for b in batches if b.job == "dcgm"]
    assert all(len(b.sample_value) == 2 for b in dcgm)
    first = dcgm[0]
    assert (first.cluster, first.target, first.instance, first.scraped_at_ms) == ("c1", "10.0.0.0:9400",
                                                                                 "10.0.0.0:9400", T0)
    assert first.series_labels == [{"gpu": "0", "Hostname": "node-0"}, {"gpu": "1", "Hostname": "node-0"}]
    assert first.sample_ts_ms == [T0, T0] and first.sample_value == [0.0, 1.0]
    ib = [b for b in batches if b.job == "node"]
    assert [b.scraped_at_ms for b in ib[:3]] == [T0 + 7] * 3
    assert sum(len(b.sample_value) for b in batches) == 4 * 3 * 3  # nothing lost, nothing doubled


def test_small_buffer_still_streams_in_order(tmp_path: Path) -> None:
    path = tmp_path / "m.prom"
    _sim_file(path, rounds=6, nodes=4)
    small = list(read_metrics_file(path, "c1", max_buffered_samples=5))
    big = list(read_metrics_file(path, "c1"))
    assert [(b.scraped_at_ms, b.job, b.instance, b.sample_value) for b in small] == \
           [(b.scraped_at_ms, b.job, b.instance, b.sample_value) for b in big]


def test_series_grouped_file_is_sorted_within_the_buffer(tmp_path: Path) -> None:
    path = tmp_path / "m.prom"
    path.write_text("".join(f'up{{job="j",instance="i:1",s="{s}"}} 1 {T0 + k * 1000}\n'
                            for s in ("a", "b") for k in range(3)))
    batches = list(read_metrics_file(path, "c1"))
    assert [b.scraped_at_ms for b in batches] == [T0, T0 + 1000, T0 + 2000]
    assert all([lb["s"] for lb in b.series_labels] == ["a", "b"] for b in batches)


def test_missing_timestamp_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.prom"
    path.write_text(f'# TYPE up gauge\nup{{job="j",instance="i:1"}} 1 {T0}\nup{{job="j",instance="i:2"}} 1\n')
    with pytest.raises(UserError, match=rf"^{path}:3: .*no timestamp"):
        list(read_metrics_file(path, "c1"))


def test_other_replay_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "noid.prom"
    p.write_text(f"up 1 {T0}\n")
    # A raw dump without job/instance is named after its file (documented default).
    (b,) = read_metrics_file(p, "c1")
    assert (b.job, b.instance, b.target, b.series_labels) == ("noid", "noid", "noid", [{}])
    # --job/--instance name the target when labels do not.
    (b,) = read_metrics_file(p, "c1", job="ray", instance="head:8080")
    assert (b.job, b.instance, b.series_labels) == ("ray", "head:8080", [{}])
    broken = tmp_path / "broken.prom"
    broken.write_text(f'up{{job="j",instance="i"}} 1 {T0}\nup{{job="j" 1 {T0}\n')
    with pytest.raises(UserError, match=rf"{broken}:2: "):
        list(read_metrics_file(broken, "c1"))
    late = tmp_path / "late.prom"
    late.write_text("".join(f'up{{job="j",instance="i"}} 1 {T0 + k}\n' for k in (5, 6, 7, 1)))
    monkeypatch.setattr(replayfile, "SLICE_LINES", 2)
    with pytest.raises(UserError, match=rf"{late}:4: .*sort the file"):
        list(read_metrics_file(late, "c1", max_buffered_samples=1))
    with pytest.raises(UserError, match="cannot open"):
        list(read_metrics_file(tmp_path / "missing.prom", "c1"))


def test_write_batch_escapes_and_nonfinite(tmp_path: Path) -> None:
    from gangscope.records import ScrapeBatch

    b = ScrapeBatch(cluster="c", target="t", job="j", instance="i:1", scraped_at_ms=T0)
    b.add_sample(b.add_series("m", {"v": 'a"b\\c\nd'}), float("nan"))
    b.add_sample(b.add_series("m", {"v": "x"}), float("inf"), T0 + 5)
    b.add_sample(b.add_series("m", {"v": "y"}), 2.5)
    path = tmp_path / "w.prom"
    with path.open("w") as f:
        assert write_batch(f, b) == 3
    back = list(read_metrics_file(path, "c"))
    vals = [s.sample_value for s in back]
    assert [s.series_labels for s in back] == [[{"v": 'a"b\\c\nd'}, {"v": "y"}], [{"v": "x"}]]
    assert str(vals) == "[[nan, 2.5], [inf]]"


def test_capture_then_replay_round_trip(tmp_path: Path) -> None:
    texts = [h100_scrape(f"gpu-{i}", gpus=2) for i in range(2)]
    with http_serve({"/metrics": Route(texts[0])}) as (base0, _), \
            http_serve({"/metrics": Route(texts[1])}) as (base1, _):
        s = config.load(overrides={"data": str(tmp_path / "d"), "metrics": {"targets": [
            {"url": f"{base}/metrics", "job": "dcgm", "interval_s": 0.5, "timeout_s": 0.5}
            for base in (base0, base1)]}}, environ={})
        out = tmp_path / "cap.prom"
        scrapes, samples = capture(s, str(out), duration_s=1.2)
    assert scrapes >= 4 and samples == scrapes * 50
    batches = list(read_metrics_file(out, "default"))
    assert len(batches) == scrapes  # one batch per live scrape
    assert {b.instance for b in batches} == {base0.removeprefix("http://"), base1.removeprefix("http://")}
    assert {b.job for b in batches} == {"dcgm"}
    for i, base in enumerate((base0, base1)):
        ref = parse_text(texts[i])
        mine = [b for b in batches if b.instance == base.removeprefix("http://")]
        assert len(mine) >= 2
        for b in mine:
            assert b.series_metric == ref.metric and b.series_labels == ref.labels and b.sample_value == ref.value


def test_capture_then_replay_keeps_utf8_names(tmp_path: Path) -> None:
    """Prometheus 3's UTF-8 metric and label names (quoted on the wire) are written quoted in the capture, so the
    file replays to the same series (they were written bare, and replay refused the file)."""
    text = ('# HELP "http.requests" Requests.\n# TYPE "http.requests" counter\n'
            '{"http.requests","status.code"="200",method="GET"} 7\n'
            'plain_metric{"odd label"="x",ok="y"} 1\n{"quote\\"d.name"} 2\n')
    with http_serve({"/metrics": Route(text)}) as (base, _):
        s = config.load(overrides={"data": str(tmp_path / "d"), "metrics": {"targets": [
            {"url": f"{base}/metrics", "job": "app", "interval_s": 0.5, "timeout_s": 0.5}]}}, environ={})
        out = tmp_path / "cap.prom"
        scrapes, samples = capture(s, str(out), duration_s=0.8)
    assert scrapes >= 1 and samples == scrapes * 3
    ref = parse_text(text)
    assert ref.metric == ["http.requests", "plain_metric", 'quote"d.name'] and not ref.errors
    batches = list(read_metrics_file(out, "default"))
    assert len(batches) == scrapes
    for b in batches:
        assert b.series_metric == ref.metric and b.series_labels == ref.labels and b.sample_value == ref.value


def test_parse_duration() -> None:
    assert parse_duration("90") == 90 and parse_duration("5m") == 300 and parse_duration("500ms") == 0.5
    with pytest.raises(UserError, match="bad duration"):
        parse_duration("soon")
