"""Compaction: merge the small files micro-batches leave behind (the scheduler calls ``compact``).

Every lake commit writes at least one Parquet file per table, or inlines small inserts into
the catalog. Left alone, reads slow down with the file count, so on a schedule:
inlined rows are flushed to Parquet, adjacent small files are merged
(``ducklake_merge_adjacent_files``), both table by table and not for the model tables every build
replaces, and snapshots older than ``keep`` expire so the
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


def replaced_tables() -> set[str]:
    """``schema.table`` of the models every build replaces whole (``materialized: table``, docs/models.md).

    Compacting them is wasted: their files and inlined rows are dropped with the table at the next build.
    Flushing and merging every table of a live lake took 10 s to 25 s of a busy machine (hundreds of
    replaced model tables in the catalog), with landings and builds waiting on each step.
    """
    from pipeline import models

    return {m.table for m in models.discover().values() if m.materialized == "table"}


def compact(con: duckdb.DuckDBPyConnection, keep: timedelta = timedelta(hours=1),
            alias: str = lake.ALIAS, skip: set[str] | None = None) -> CompactionStats:
    """Flush inlined rows, merge adjacent small files, expire old snapshots, delete unused files.

    ``keep``: snapshots (and the files they use) younger than this survive, so a reader that
    started a long query on an older snapshot is not pulled from under its feet. ``skip``: tables
    (``schema.table``) not to flush or merge (default: :func:`replaced_tables`).
    """
    skip = replaced_tables() if skip is None else skip
    stats = CompactionStats()
    older = f"now() - INTERVAL {int(keep.total_seconds())} SECOND"

    def step(sql: str) -> list[tuple]:
        # Under the commit lock: a landing or build of this process committing while a step runs moved the
        # SQLite catalog under it, and the step failed ("Failed to delete flushed inlined data ...: Current
        # transaction is aborted", which no retry recognised), so `gangscope run` never compacted. One step
        # at a time, so landings and builds go on between steps.
        # The lock is held per attempt, not across retry's backoff: landings go on while a step waits to retry.
        def once() -> list[tuple]:
            with lake.COMMIT_LOCK:
                try:
                    return con.execute(sql).fetchall()
                except duckdb.Error:
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")  # a failed step may leave the connection's transaction aborted
                    raise

        return lake.retry(once)

    tables = [r for r in con.execute(
        "SELECT DISTINCT schema_name, table_name FROM duckdb_columns() WHERE database_name = ? "
        "EXCEPT SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ? ORDER BY ALL",
        [alias, alias]).fetchall() if f"{r[0]}.{r[1]}" not in skip]
    for schema, table in tables:
        step(f"CALL ducklake_flush_inlined_data('{alias}', schema_name => '{schema}', table_name => '{table}')")
        merged = step(f"CALL ducklake_merge_adjacent_files('{alias}', '{table}', schema => '{schema}')")
        # rows: (schema, table, files processed, files created)
        stats.merged_files += sum(int(r[2]) for r in merged if len(r) > 2 and r[2] is not None)
    step(f"CALL ducklake_expire_snapshots('{alias}', older_than => {older})")
    stats.deleted_files = len(step(f"CALL ducklake_cleanup_old_files('{alias}', older_than => {older})"))
    log.info("compaction: merged %d small file(s), deleted %d unused file(s)", stats.merged_files,
             stats.deleted_files)
    return stats
