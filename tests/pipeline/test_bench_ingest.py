"""bench/ingest.py runs end to end on a small backlog; its figures are not asserted (never wall-clock times)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ingest_benchmark_runs_small_with_the_decoding_free_bound() -> None:
    """Each pipeline case asserts inside the bench that it landed every published sample: exit 0 says so."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "ingest.py"), "--records", "300", "--repeat", "1",
                          "--batch-records", "100", "--broker", "tansu", "--no-peers", "--free-decode"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    for letter, case in (("c", "decoding free"), ("d", "only offsets written")):
        assert re.search(rf"^run 1: \({letter}\) pipeline, {case} [\d.]+s, [\d,]+ samples/s; {letter}/a [\d.]+$",
                         text, re.M), text
        assert re.search(rf"^case gangscope pipeline, {case} \(a bound\): [\d,]+ samples/s, ratio [\d.]+$",
                         text, re.M), text
    assert re.fullmatch(r"ingest: landed=\d+ raw=\d+ ratio=[\d.]+ rss_mb=\d+", text.strip().splitlines()[-1]), text
