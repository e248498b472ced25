"""Retention drops old raw rows and old marts, frees their Parquet files, and touches nothing else."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from gangscope.config import Settings
from pipeline import lake, models, retention
from pipeline.land import insert_samples

NOW = datetime.now(UTC).replace(microsecond=0)


def _files(settings: Settings, table: str) -> set[str]:
    return {str(p) for p in (settings.lake_path / "raw" / table).rglob("*.parquet")}


def _samples(start: datetime, metric: str) -> pl.DataFrame:
    n = 1000
    return pl.DataFrame({"cluster": ["c1"] * n, "ts": [start + timedelta(seconds=i) for i in range(n)],
                         "metric": [metric] * n, "labels": ["{}"] * n, "value": [float(i) for i in range(n)],
                         "node": [None] * n, "target": ["t"] * n, "job": ["j"] * n, "instance": ["i"] * n},
                        schema_overrides={"node": pl.String})


def _k8s(con, when: datetime, event: str, kind: str, name: str) -> None:
    con.execute(
        "INSERT INTO raw.k8s_objects (cluster, observed_at, event_type, api_version, kind, namespace, name, uid,"
        " object) VALUES ('c1', ?, ?, 'v1', ?, 'ns', ?, ?, '{}')",
        [when, event, kind, name, f"uid-{name}"],
    )


@pytest.fixture(params=["sqlite", "postgres"])
def filled(offline_settings: Settings, request: pytest.FixtureRequest):
    catalog = request.getfixturevalue("pg_catalog") if request.param == "postgres" else None
    settings = dataclasses.replace(
        offline_settings,
        catalog=catalog,
        retention=dataclasses.replace(offline_settings.retention, raw_days=7, marts_days=90, file_grace_minutes=0),
    )
    con = lake.connect(settings)
    old, recent = NOW - timedelta(days=10), NOW - timedelta(hours=1)
    # Two inserts of 1000 samples each: above DuckLake's inlining limit, so each lands as its own Parquet file.
    insert_samples(con, _samples(old, "old"))
    old_files = _files(settings, "metric_points")
    insert_samples(con, _samples(recent, "recent"))
    recent_files = _files(settings, "metric_points") - old_files
    assert len(old_files) == 1 and len(recent_files) == 1
    con.execute("INSERT INTO raw.scrapes (cluster, scraped_at, target, up) VALUES ('c1', ?, 'old', true), "
                "('c1', ?, 'recent', true)", [old, recent])
    con.execute("INSERT INTO raw.dead_letters (landed_at, topic, reason) VALUES (?, 't', 'old'), (?, 't', 'recent')",
                [old, recent])
    con.execute("INSERT INTO raw.kafka_offsets (topic, \"partition\", next_offset, landed_at, topic_id) VALUES "
                "('t', 0, 10, ?, 'a'), ('t', 0, 42, ?, 'a'), ('t', 1, 5, ?, 'a'), ('t', 0, 7, ?, 'b')",
                [NOW - timedelta(days=400)] * 3 + [NOW])  # only ('t', 0, 10, 'a') is superseded
    _k8s(con, NOW - timedelta(days=30), "ADDED", "Node", "n1")  # old, never changed: its only row stays
    _k8s(con, NOW - timedelta(days=10), "ADDED", "Pod", "p1")
    _k8s(con, NOW - timedelta(days=9), "MODIFIED", "Pod", "p1")
    _k8s(con, recent, "MODIFIED", "Pod", "p1")
    _k8s(con, NOW - timedelta(days=10), "ADDED", "Pod", "p2")
    _k8s(con, NOW - timedelta(days=9), "DELETED", "Pod", "p2")  # gone for good: all its rows go
    _k8s(con, NOW - timedelta(days=10), "ADDED", "Pod", "p3")
    _k8s(con, NOW - timedelta(days=8), "MODIFIED", "Pod", "p3")  # newest of p3: stays though old
    con.execute("CREATE TABLE marts.findings (job VARCHAR, started_at TIMESTAMPTZ, ended_at TIMESTAMPTZ)")
    con.execute("INSERT INTO marts.findings VALUES ('ended-100d', ?, ?), ('ended-30d', ?, ?), ('ongoing', ?, NULL)",
                [NOW - timedelta(days=101), NOW - timedelta(days=100), NOW - timedelta(days=31),
                 NOW - timedelta(days=30), NOW - timedelta(days=200)])
    yield settings, con, old_files, recent_files
    con.close()


def test_retention_removes_old_rows_and_files_and_nothing_else(filled) -> None:
    settings, con, old_files, recent_files = filled
    old_series = con.execute("SELECT count(*) FROM raw.metric_series WHERE metric = 'old'").fetchone()[0]
    assert old_series in (1, 2)  # one per UTC day its 1000 s touch
    models.set_variables(con, models.sql_variables(settings))
    models.build_one(con, "staging.stg_metric_series")  # the per-series model keeps rows: retention trims it too
    stats = retention.apply(settings, con=con, now=NOW)

    assert con.execute("SELECT metric, count(*) FROM raw.metric_samples GROUP BY ALL").fetchall() == [("recent", 1000)]
    assert con.execute("SELECT target FROM raw.scrapes").fetchall() == [("recent",)]
    assert con.execute("SELECT reason FROM raw.dead_letters").fetchall() == [("recent",)]
    assert con.execute('SELECT "partition", next_offset, topic_id FROM raw.kafka_offsets ORDER BY ALL').fetchall() == [
        (0, 7, "b"), (0, 42, "a"), (1, 5, "a")]
    k8s = con.execute("SELECT name, event_type, observed_at FROM raw.k8s_objects ORDER BY name").fetchall()
    assert [(n, e) for n, e, _ in k8s] == [("n1", "ADDED"), ("p1", "MODIFIED"), ("p3", "MODIFIED")]
    assert k8s[1][2] == NOW - timedelta(hours=1)
    assert con.execute("SELECT job FROM marts.findings ORDER BY job").fetchall() == [("ended-30d",), ("ongoing",)]
    assert con.execute("SELECT DISTINCT metric FROM raw.metric_series").fetchall() == [("recent",)]
    assert con.execute("SELECT DISTINCT metric FROM staging.stg_metric_series").fetchall() == [("recent",)]
    assert stats.deleted == {"raw.k8s_objects": 5, "raw.kafka_offsets": 1, "raw.metric_points": 1000, "raw.scrapes": 1,
                             "raw.dead_letters": 1, "raw.metric_series": old_series,
                             "staging.stg_metric_series": old_series, "marts.findings": 1}

    # The old Parquet file is gone from disk; the recent one is still there and still read.
    remaining = _files(settings, "metric_points")
    assert not (old_files & remaining)
    assert recent_files <= remaining
    assert all(Path(f).exists() for f in recent_files)
    assert stats.files_deleted >= 1 and stats.snapshots_expired >= 1

    # A second run finds nothing more to delete.
    again = retention.apply(settings, con=con, now=NOW)
    assert sum(again.deleted.values()) == 0
    assert con.execute("SELECT count(*) FROM raw.metric_samples").fetchone() == (1000,)


def test_grace_keeps_files_for_running_queries(filled) -> None:
    settings, con, old_files, _ = filled
    settings = dataclasses.replace(settings, retention=dataclasses.replace(settings.retention, file_grace_minutes=10))
    stats = retention.apply(settings, con=con, now=NOW)
    assert stats.deleted["raw.metric_points"] == 1000
    assert stats.files_deleted == 0
    assert old_files <= _files(settings, "metric_points")  # rows gone, file kept until the grace has passed
