"""Compaction: merge the small files micro-batches leave behind (the scheduler calls ``compact``).

Every lake commit writes at least one Parquet file per table, or inlines small inserts into
the catalog. Left alone, reads slow down with the file count, so on a schedule:
inlined rows are flushed to Parquet, adjacent small files are merged
(``ducklake_merge_adjacent_files``), both table by table and not for the model tables every build
replaces, and snapshots older than ``KEEP`` expire (scheduled model builds expire them too, more often)
so the replaced files can be deleted. Safe to run while the pipeline writes: in one process each step
holds ``lake.COMMIT_LOCK`` (landings and builds wait for it), across processes conflicts retry.
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
    orphans_deleted: int = 0  # files under the data path the catalog never recorded, older than ``orphan_age``


def replaced_tables() -> set[str]:
    """``schema.table`` of the models every build replaces whole (``materialized: table``, docs/models.md).

    Compacting them is wasted: their files and inlined rows are dropped with the table at the next build.
    Flushing and merging every table of a live lake took 10 s to 25 s of a busy machine (hundreds of
    replaced model tables in the catalog), with landings and builds waiting on each step.
    """
    from pipeline import models

    return {m.table for m in models.discover().values() if m.materialized == "table"}


# Snapshots (and the files only they use) younger than this survive: a reader whose query began on an older
# snapshot is not pulled from under its feet (its next catalog read fails once that snapshot expired). Kept
# short because every build replaces each model table, and every catalog read slows with the history kept:
# the live findings build went from 2 s to about 5 s in 100 builds (docs/lake.md). At a 30 s schedule ten
# minutes are 20 builds.
KEEP = timedelta(minutes=10)


# A file under the data path that the catalog does not know is an orphan once it is older than this: a transaction
# that failed after writing it (the object store or the catalog went away mid-commit, a writer killed) left it.
# Younger ones may belong to a transaction still running (a full model build writes for minutes before its commit),
# so they are left alone; an hour is far beyond any landing or build measured (docs/scaling.md).
ORPHAN_AGE = timedelta(hours=1)


def _step(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    """One maintenance statement, under the commit lock, retried on conflicts.

    Under the lock: a landing or build of this process committing while a step runs moved the SQLite catalog
    under it, and the step failed ("Failed to delete flushed inlined data ...: Current transaction is aborted",
    which no retry recognised), so `gangscope run` never compacted. One step at a time, so landings and builds
    go on between steps; the lock is held per attempt, not across retry's backoff.
    """
    def once() -> list[tuple]:
        with lake.COMMIT_LOCK:
            try:
                return con.execute(sql).fetchall()
            except duckdb.Error:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")  # a failed step may leave the connection's transaction aborted
                raise

    return lake.retry(once)


def _older(keep: timedelta) -> str:
    return f"now() - INTERVAL {int(keep.total_seconds())} SECOND"


def expire(con: duckdb.DuckDBPyConnection, keep: timedelta | None = None, alias: str = lake.ALIAS) -> int:
    """Expire the snapshots older than ``keep`` (default :data:`KEEP`; scheduled builds call this too); how
    many expired."""
    keep = KEEP if keep is None else keep
    return len(_step(con, f"CALL ducklake_expire_snapshots('{alias}', older_than => {_older(keep)})"))


def compact(con: duckdb.DuckDBPyConnection, keep: timedelta | None = None,
            alias: str = lake.ALIAS, skip: set[str] | None = None,
            orphan_age: timedelta | None = None) -> CompactionStats:
    """Flush inlined rows, merge adjacent small files, expire old snapshots, delete unused and orphaned files.

    ``keep``: see :data:`KEEP`. ``skip``: tables (``schema.table``) not to flush or merge (default:
    :func:`replaced_tables`). ``orphan_age``: see :data:`ORPHAN_AGE`.
    """
    skip = replaced_tables() if skip is None else skip
    keep = KEEP if keep is None else keep
    orphan_age = ORPHAN_AGE if orphan_age is None else orphan_age
    stats = CompactionStats()
    tables = [r for r in con.execute(
        "SELECT DISTINCT schema_name, table_name FROM duckdb_columns() WHERE database_name = ? "
        "EXCEPT SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ? ORDER BY ALL",
        [alias, alias]).fetchall() if f"{r[0]}.{r[1]}" not in skip]
    for schema, table in tables:
        _step(con, f"CALL ducklake_flush_inlined_data('{alias}', schema_name => '{schema}', table_name => '{table}')")
        merged = _step(con, f"CALL ducklake_merge_adjacent_files('{alias}', '{table}', schema => '{schema}')")
        # rows: (schema, table, files processed, files created)
        stats.merged_files += sum(int(r[2]) for r in merged if len(r) > 2 and r[2] is not None)
    expire(con, keep, alias)
    stats.deleted_files = len(_step(con, f"CALL ducklake_cleanup_old_files('{alias}', older_than => {_older(keep)})"))
    stats.orphans_deleted = len(_step(
        con, f"CALL ducklake_delete_orphaned_files('{alias}', older_than => {_older(orphan_age)})"))
    log.info("compaction: merged %d small file(s), deleted %d unused and %d orphaned file(s)", stats.merged_files,
             stats.deleted_files, stats.orphans_deleted)
    return stats
