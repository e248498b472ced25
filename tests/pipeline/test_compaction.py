"""Compaction while the pipeline lands, in one process (what `gangscope run` does on its schedule)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from gangscope import config
from pipeline import lake
from pipeline.compaction import compact
from pipeline.land import land
from tests.pipeline.helpers import dcgm_scrape

M = "gs.metrics"


def test_compaction_succeeds_while_landings_commit_and_loses_no_row(offline_settings: config.Settings) -> None:
    """Every landing used to make a compaction step fail ("Current transaction is aborted", not retried): the
    catalog moved under it. Now each step holds the lake's commit lock, so the landings wait between steps."""
    writer = lake.connect(offline_settings)
    compactor = lake.connect(offline_settings)
    try:
        offset = 0
        for _ in range(12):  # small inlined inserts and files to flush and merge
            land(writer, [(M, 0, offset + i, dcgm_scrape(offset + i).to_bytes()) for i in range(3)])
            offset += 3
        stop, errors, landed = threading.Event(), [], [offset]

        def keep_landing() -> None:
            try:
                while not stop.is_set():
                    n = landed[0]
                    land(writer, [(M, 0, n + i, dcgm_scrape(n + i).to_bytes()) for i in range(3)])
                    landed[0] = n + 3
            except Exception as e:  # reported below
                errors.append(e)

        t = threading.Thread(target=keep_landing)
        t.start()
        try:
            for _ in range(8):
                time.sleep(0.3)  # a few landings commit in between
                compact(compactor, keep=timedelta(0))
        finally:
            stop.set()
            t.join(60)
        assert not errors
        scrapes = writer.execute("SELECT count(*), count(DISTINCT kafka_offset) FROM raw.scrapes").fetchone()
        assert scrapes == (landed[0], landed[0])  # every landing kept, none twice
        files = writer.execute("SELECT count(*) FROM ducklake_list_files('lake', 'metric_points', schema => 'raw')"
                               ).fetchone()
        assert files is not None and files[0] < landed[0] // 2  # merged: fewer files than landings
    finally:
        compactor.close()
        writer.close()
