"""Compaction: merge the small files micro-batches leave behind (the scheduler calls ``compact``).

Every lake commit writes at least one Parquet file per table, or inlines small inserts into
the catalog. Left alone, reads slow down with the file count, so on a schedule:
inlined rows are flushed to Parquet, adjacent small files are merged
(``ducklake_merge_adjacent_files``), and snapshots older than ``keep`` expire so the
replaced files can be deleted. Safe to run while the pipeline writes: in one process each step holds
``lake.COMMIT_LOCK`` (landings and builds wait for it), across processes conflicts retry.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta

import duckdb

from pipeline import lake

log = logging.getLogger(__name__)


@dataclass
class CompactionStats:
    merged_files: int = 0  # small files replaced by merged ones
    deleted_files: int = 0  # files no snapshot within ``keep`` refers to, removed from disk


def compact(con: duckdb.DuckDBPyConnection, keep: timedelta = timedelta(hours=1),
            alias: str = lake.ALIAS) -> CompactionStats:
    """Flush inlined rows, merge adjacent small files, expire old snapshots, delete unused files.

    ``keep``: snapshots (and the files they use) younger than this survive, so a reader that
    started a long query on an older snapshot is not pulled from under its feet.
    """
    stats = CompactionStats()
    older = f"now() - INTERVAL {int(keep.total_seconds())} SECOND"

    def step(sql: str) -> list[tuple]:
        # Under the commit lock: a landing or build of this process committing while a step runs moved the
        # SQLite catalog under it, and the step failed ("Failed to delete flushed inlined data ...: Current
        # transaction is aborted", which no retry recognised), so `gangscope run` never compacted. One step
        # at a time, so landings and builds go on between steps.
        def once() -> list[tuple]:
            try:
                return con.execute(sql).fetchall()
            except duckdb.Error:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")  # a failed step may leave the connection's transaction aborted
                raise

        with lake.COMMIT_LOCK:
            return lake.retry(once)

    step(f"CALL ducklake_flush_inlined_data('{alias}')")
    merged = step(f"CALL ducklake_merge_adjacent_files('{alias}')")
    # rows: (schema, table, files processed, files created)
    stats.merged_files = sum(int(r[2]) for r in merged if len(r) > 2 and r[2] is not None)
    step(f"CALL ducklake_expire_snapshots('{alias}', older_than => {older})")
    stats.deleted_files = len(step(f"CALL ducklake_cleanup_old_files('{alias}', older_than => {older})"))
    log.info("compaction: merged %d small file(s), deleted %d unused file(s)", stats.merged_files,
             stats.deleted_files)
    return stats
