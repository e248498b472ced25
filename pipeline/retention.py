"""Retention: drop raw rows past ``retention.raw_days`` and mart rows past ``marts_days``.

A DuckLake DELETE only writes a new snapshot; the Parquet files stay on disk while any
snapshot can still see them. So after deleting, retention rewrites files that are mostly
deleted, expires the snapshots older than now and removes the files no snapshot needs
(after ``file_grace_minutes``, so queries that began before retention ran can finish).

What is never dropped: the newest ``raw.kafka_offsets`` row of each partition (the
exactly-once bookkeeping; only superseded rows go, whatever their age), and the newest
watch event of each Kubernetes object that still exists (a Node added a month ago and
never changed is still a Node; dropping its only row would make it vanish from models).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from datetime import time as dtime

import duckdb

from gangscope import telemetry
from gangscope.config import Settings
from pipeline import lake

log = logging.getLogger(__name__)

# raw table -> its time column. raw.kafka_offsets is deliberately absent.
RAW_TIME = {
    "raw.metric_points": "ts",
    "raw.scrapes": "scraped_at",
    "raw.dead_letters": "landed_at",
}
# k8s_objects: an old row goes once a newer event of the same object exists, or the object was deleted.
K8S_DELETE = """
DELETE FROM raw.k8s_objects AS o
WHERE o.observed_at < $cutoff
  AND (o.event_type = 'DELETED' OR EXISTS (
        SELECT 1 FROM raw.k8s_objects AS n
        WHERE n.cluster IS NOT DISTINCT FROM o.cluster AND n.kind = o.kind
          AND n.namespace IS NOT DISTINCT FROM o.namespace AND n.name = o.name
          AND n.observed_at > o.observed_at))
"""
# A series row is day-scoped (pipeline/decode.py: series_ids): a day before the cutoff's has no sample left.
SERIES_DELETE = "DELETE FROM raw.metric_series WHERE day < CAST(timezone('UTC', $cutoff::TIMESTAMPTZ) AS DATE)"
# The per-series model keeps its rows (it only appends new ids): the same days go, so it stays what a full
# build from the retained raw rows would make.
MODEL_SERIES_DELETE = SERIES_DELETE.replace("raw.metric_series", "staging.stg_metric_series")
# kafka_offsets is append-only and read as max(next_offset) per partition and topic_id (pipeline/lake.py):
# a row with a greater one beside it is dead weight, whatever its age.
OFFSETS_DELETE = """
DELETE FROM raw.kafka_offsets AS o
WHERE EXISTS (
    SELECT 1 FROM raw.kafka_offsets AS n
    WHERE n.topic = o.topic AND n."partition" = o."partition" AND n.topic_id IS NOT DISTINCT FROM o.topic_id
      AND n.next_offset > o.next_offset)
"""
# mart table -> its time column; an ongoing finding (ended_at NULL) is never dropped.
MARTS_TIME = {
    "marts.findings": "ended_at",
}


@dataclass
class RetentionStats:
    raw_cutoff: datetime
    marts_cutoff: datetime
    deleted: dict[str, int] = field(default_factory=dict)  # table -> rows deleted
    snapshots_expired: int = 0
    files_deleted: int = 0
    seconds: float = 0.0


def _exists(con: duckdb.DuckDBPyConnection, qualified: str) -> bool:
    schema, table = qualified.split(".")
    return bool(con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND schema_name = ? AND table_name = ?",
        [lake.ALIAS, schema, table],
    ).fetchone()[0])


def _delete(con: duckdb.DuckDBPyConnection, sql: str, cutoff: datetime | None) -> int:
    def run() -> int:
        row = con.execute(sql, None if cutoff is None else {"cutoff": cutoff}).fetchone()
        return int(row[0]) if row else 0

    return lake.retry(run)


def _cleanup_older_than(settings: Settings, wall: datetime) -> datetime | None:
    """Files scheduled for deletion before this time may go; None: all of them (no grace).

    DuckLake 1.5.5 on a SQLite catalog compares the schedule time as text against an ISO
    ``T`` timestamp, so every file scheduled on the cutoff's day counts as older (measured:
    a 10-minute grace deleted a file scheduled seconds earlier; PostgreSQL is exact). There
    we cut at the previous midnight instead: the grace rounds up to at most one day.
    """
    if settings.retention.file_grace_minutes <= 0:
        return None
    cutoff = wall - timedelta(minutes=settings.retention.file_grace_minutes)
    if settings.catalog_url.startswith("sqlite:"):
        cutoff = datetime.combine(cutoff.date(), dtime.min, UTC) - timedelta(microseconds=1)
    return cutoff


def apply(
    settings: Settings, con: duckdb.DuckDBPyConnection | None = None, now: datetime | None = None
) -> RetentionStats:
    """Delete rows past their retention, expire old snapshots and delete unneeded Parquet files."""
    started = time.monotonic()
    now = now or datetime.now(UTC)
    r = settings.retention
    stats = RetentionStats(raw_cutoff=now - timedelta(days=r.raw_days), marts_cutoff=now - timedelta(days=r.marts_days))
    own = con is None
    con = con or lake.connect(settings)
    try:
        plan = [("raw.k8s_objects", K8S_DELETE, stats.raw_cutoff), ("raw.kafka_offsets", OFFSETS_DELETE, None)]
        plan += [(t, f"DELETE FROM {t} WHERE {c} < $cutoff", stats.raw_cutoff) for t, c in RAW_TIME.items()]
        plan.append(("raw.metric_series", SERIES_DELETE, stats.raw_cutoff))
        plan.append(("staging.stg_metric_series", MODEL_SERIES_DELETE, stats.raw_cutoff))
        plan += [(t, f"DELETE FROM {t} WHERE {c} < $cutoff", stats.marts_cutoff) for t, c in MARTS_TIME.items()]
        for table, sql, cutoff in plan:
            if not _exists(con, table):
                continue
            n = _delete(con, sql, cutoff)
            stats.deleted[table] = n
            if n:
                telemetry.RETENTION_DELETED.labels(table).inc(n)
                schema, name = table.split(".")
                # Files mostly deleted are rewritten so the old ones can be removed below.
                lake.retry(lambda s=schema, t=name: con.execute(
                    "SELECT * FROM ducklake_rewrite_data_files(?, ?, schema => ?)", [lake.ALIAS, t, s]).fetchall())
        # Snapshots and file schedules carry wall-clock times, whatever ``now`` says.
        wall = datetime.now(UTC)
        stats.snapshots_expired = len(lake.retry(lambda: con.execute(
            "SELECT * FROM ducklake_expire_snapshots(?, older_than => ?)", [lake.ALIAS, wall]).fetchall()))
        older = _cleanup_older_than(settings, wall)
        if older is None:
            sql, params = "SELECT * FROM ducklake_cleanup_old_files(?, cleanup_all => true)", [lake.ALIAS]
        else:
            sql, params = "SELECT * FROM ducklake_cleanup_old_files(?, older_than => ?)", [lake.ALIAS, older]
        stats.files_deleted = len(lake.retry(lambda: con.execute(sql, params).fetchall()))
    finally:
        if own:
            con.close()
    stats.seconds = time.monotonic() - started
    log.info("retention: deleted %s rows (%s), expired %d snapshots, removed %d files in %.1fs",
             sum(stats.deleted.values()), ", ".join(f"{t}={n}" for t, n in stats.deleted.items() if n) or "none",
             stats.snapshots_expired, stats.files_deleted, stats.seconds)
    return stats
