"""Compaction: merge the small files micro-batches leave behind (the scheduler calls ``compact``).

Every lake commit writes at least one Parquet file per table, or inlines small inserts into
the catalog. Left alone, reads slow down with the file count, so on a schedule:
inlined rows are flushed to Parquet, adjacent small files are merged
(``ducklake_merge_adjacent_files``), and snapshots older than ``keep`` expire so the
replaced files can be deleted. Safe to run while the pipeline writes (conflicts retry).
"""

from __future__ import annotations

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

    def run() -> None:
        con.execute(f"CALL ducklake_flush_inlined_data('{alias}')").fetchall()
        merged = con.execute(f"CALL ducklake_merge_adjacent_files('{alias}')").fetchall()
        # rows: (schema, table, files processed, files created)
        stats.merged_files = sum(int(r[2]) for r in merged if len(r) > 2 and r[2] is not None)
        con.execute(f"CALL ducklake_expire_snapshots('{alias}', older_than => {older})").fetchall()
        deleted = con.execute(f"CALL ducklake_cleanup_old_files('{alias}', older_than => {older})").fetchall()
        stats.deleted_files = len(deleted)

    lake.retry(run)
    log.info("compaction: merged %d small file(s), deleted %d unused file(s)", stats.merged_files,
             stats.deleted_files)
    return stats
