"""Scrape batches are read with DuckDB's NDJSON reader (cheaper) and decode exactly as Polars' reader has them."""

from __future__ import annotations

import json
import logging
import math
import tempfile
from pathlib import Path

import pytest

from gangscope.records import ScrapeBatch
from pipeline import decode
from tests.pipeline.helpers import dcgm_scrape


def _values() -> list[bytes]:
    """Scrapes of several targets: compact ones, one with its own sample times and non-finite values, a failed
    one, and one whose layout is refused after the read."""
    timed = ScrapeBatch("c1", "http://n9:9100/metrics", "node", "n9:9100", 1_772_366_400_000, duration_s=0.2)
    for i, v in enumerate((1.5, math.nan, math.inf, -math.inf, 0.0)):
        s = timed.add_series("node_x", {"cpu": str(i % 2), "mode": "idle"})
        timed.add_sample(s, v, 1_772_366_400_000 - 1000 * i)
    failed = ScrapeBatch("c1", "http://n8:9400/metrics", "dcgm", "n8:9400", 1_772_366_400_000, up=False,
                         error="HTTP 503")
    refused = json.loads(dcgm_scrape(7).to_bytes())
    refused["x"] = refused["x"][:-1]
    return [dcgm_scrape(i).to_bytes() for i in range(6)] + [timed.to_bytes(), failed.to_bytes(),
                                                            json.dumps(refused).encode()]


def _same(a: decode.Decoded, b: decode.Decoded) -> None:
    assert a.dead == b.dead
    assert a.rows.equals(b.rows, null_equal=True)
    assert a.scrapes is not None and b.scrapes is not None and a.scrapes.equals(b.scrapes, null_equal=True)
    assert a.series is not None and b.series is not None
    assert a.series.sort("series").equals(b.series.sort("series"), null_equal=True)


@pytest.mark.parametrize("malformed", [False, True], ids=["well-formed", "with-a-malformed-record"])
def test_duckdb_reads_scrape_batches_and_they_decode_as_with_polars(monkeypatch, malformed: bool) -> None:
    values = _values() + ([b'{"v":2,"kind":"scrape",'] if malformed else [])
    read, outcomes = decode._read_duckdb, []

    def spy(buf: bytes, *columns: object) -> object:
        try:
            df = read(buf, *columns)
        except Exception as e:
            outcomes.append(type(e).__name__)
            raise
        outcomes.append("read" if df is not None else "not read")
        return df

    monkeypatch.setattr(decode, "_read_duckdb", spy)
    fast = decode.decode_scrapes(values)
    # DuckDB read the batch, or refused it whole (then records are checked one by one, with Polars)
    assert outcomes == (["InvalidInputException"] if malformed else ["read"])
    monkeypatch.setattr(decode, "_read_duckdb", lambda buf, *columns: None)
    _same(fast, decode.decode_scrapes(values))
    assert fast.rows.height == 6 * 4 + 5 and fast.rows["value"].is_nan().sum() == 1
    assert sorted(i for i, _ in fast.dead) == ([8, 9] if malformed else [8])
    assert fast.scrapes is not None and fast.scrapes["up"].to_list().count(False) == 1


def test_without_a_writable_temporary_folder_polars_reads_and_says_so_once(monkeypatch, tmp_path: Path,
                                                                            caplog) -> None:
    values = _values()
    expected = decode.decode_scrapes(values)
    monkeypatch.setattr(decode, "_no_temp_files", [])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with caplog.at_level(logging.WARNING, logger="pipeline.decode"):
        _same(decode.decode_scrapes(values), expected)
        _same(decode.decode_scrapes(values), expected)
    assert decode._no_temp_files
    assert caplog.text.count("no temporary file for DuckDB's NDJSON reader") == 1
    assert not list(tmp_path.iterdir())


def test_the_temporary_file_is_gone_after_each_batch(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    d = decode.decode_scrapes(_values())
    assert d.rows.height and not list(tmp_path.iterdir())
