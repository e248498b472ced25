"""Model builds in bounded memory: the ``memory_limit`` setting reaches DuckDB, and a build that has to spill
under a small limit finds exactly what an unbounded build finds (the classification lake, real DuckLake)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from gangscope import config
from gangscope.errors import UserError
from pipeline import lake, models
from reports import diagnose
from tests.sql.lakefix import Raw
from tests.sql.test_models_classify import _build_cluster


def _settings(data: Path, limit: str | None) -> config.Settings:
    return config.load(overrides={"data": str(data)}, environ={"GANGSCOPE_MEMORY_LIMIT": limit or ""})


def _duckdb_says(limit: str) -> str:
    """How DuckDB itself reports ``limit`` (e.g. 300MB -> '286.1 MiB')."""
    con = duckdb.connect(config={"memory_limit": limit})
    try:
        return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    finally:
        con.close()


def test_memory_limit_and_spill_directory_are_applied(tmp_path: Path) -> None:
    s = _settings(tmp_path / "data", "300MB")
    con = lake.connect(s)
    try:
        limit, temp, ordered = con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory'), "
                                           "current_setting('preserve_insertion_order')").fetchone()
    finally:
        con.close()
    assert limit == _duckdb_says("300MB") != _duckdb_says("1GB")
    assert Path(temp) == (tmp_path / "data" / "tmp").absolute()
    assert ordered is False
    # The default bounds memory too; unset, DuckDB's own default (80% of RAM) applies.
    assert config.load(environ={}).memory_limit == "512MB"
    unbounded = lake.connect(_settings(tmp_path / "data", None))
    try:
        assert unbounded.execute("SELECT current_setting('memory_limit')").fetchone()[0] not in (
            _duckdb_says("512MB"), _duckdb_says("300MB"))
    finally:
        unbounded.close()


def _file_cache_bytes(con: duckdb.DuckDBPyConnection) -> int:
    return con.execute("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                       "WHERE tag = 'EXTERNAL_FILE_CACHE'").fetchone()[0]


def test_a_local_lakes_parquet_files_are_not_also_cached_in_duckdb_memory(tmp_path: Path) -> None:
    """A connection kept for a service's life (the scheduled builds) must not fill memory_limit with copies of
    files the OS caches already, many of them compacted away since."""
    s = _settings(tmp_path / "data", "300MB")
    con = lake.connect(s)
    try:
        con.execute("CREATE TABLE staging.t AS SELECT range AS i, random() AS x FROM range(200000)")
        for _ in range(3):
            con.execute("SELECT sum(x) FROM staging.t").fetchone()
        assert con.execute("SELECT current_setting('enable_external_file_cache')").fetchone()[0] is False
        assert _file_cache_bytes(con) == 0
        con.execute("SET enable_external_file_cache = true")  # the control: DuckDB's default does cache them
        con.execute("SELECT sum(x) FROM staging.t").fetchone()
        assert _file_cache_bytes(con) > 0
    finally:
        con.close()
    # On object storage the cache saves downloads: kept.
    remote = config.load(overrides={"data": str(tmp_path / "data"), "lake_data_path": "s3://bucket/lake/"},
                         environ={})
    assert "enable_external_file_cache" not in lake.memory_config(remote)


def test_bad_memory_limit_is_a_config_error() -> None:
    with pytest.raises(config.ConfigError, match="memory_limit"):
        config.load(environ={"GANGSCOPE_MEMORY_LIMIT": "lots"})


def _build(settings: config.Settings, spill: bool = True) -> tuple[list[dict], list[tuple], list[tuple]]:
    """A full build on one DuckDB thread (memory per thread would make the limit depend on the machine's cores);
    the findings, every signal row and the jobs mart, sorted."""
    con = lake.connect(settings)
    try:
        con.execute("SET threads = 1")
        if not spill:
            con.execute("SET max_temp_directory_size = '0KB'")
        models.build(settings, con, full=True)
        signals = con.execute("SELECT * FROM staging.stg_metric_signals ORDER BY ALL").fetchall()
        jobs = con.execute("SELECT * FROM marts.jobs ORDER BY ALL").fetchall()
        return diagnose.findings(con, include_healthy=True), signals, jobs
    finally:
        con.close()


def test_build_under_a_small_memory_limit_finds_the_same(tmp_path: Path) -> None:
    unbounded, small = _settings(tmp_path / "data", None), _settings(tmp_path / "data", "64MB")
    con = lake.connect(unbounded)
    try:
        raw = Raw()
        _build_cluster(raw)  # one job per root cause, and traps that must stay healthy
        raw.write(con)
    finally:
        con.close()
    findings, signals, jobs = _build(unbounded)
    assert {f["root_cause"] for f in findings} - {"healthy"}, "the lake must have findings to compare"
    assert signals and jobs
    # 64 MB does not hold this build: with spilling forbidden it runs out of memory...
    with pytest.raises(UserError, match="Out of Memory"):
        _build(small, spill=False)
    # ... so the bounded build spilled to <data>/tmp, and found exactly the same.
    assert _build(small) == (findings, signals, jobs)
    assert not any((tmp_path / "data" / "tmp").glob("*")), "spill files are removed after the build"
