"""`gangscope sql` cannot write, nor read outside the lake: 40+ hostile queries through the CLI, and every file
under --data is byte-identical afterwards (and nothing appears or disappears)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from gangscope.app.cli import main
from pipeline import lake
from tests.reports import lakefix


@pytest.fixture(scope="module")
def parquet_lake(tmp_path_factory: pytest.TempPathFactory):
    """A lake whose rows sit in several small Parquet files (no inlining), so maintenance would have work."""
    from gangscope import config

    settings = config.load(overrides={"data": str(tmp_path_factory.mktemp("sqlhostile") / "data")}, environ={})
    con = lake.connect(settings)
    con.execute("CALL lake.set_option('data_inlining_row_limit', 0)")
    lakefix.build(con)
    for i in range(3):  # adjacent small files: what merge_adjacent_files would rewrite
        con.execute("INSERT INTO raw.scrapes (cluster, target) VALUES ('default', ?)", [f"t{i}"])
    con.close()
    return settings


def _files(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            if n.endswith(("-wal", "-shm", "sql_history")):  # SQLite's WAL index changes on any read
                continue
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def hostile(data: Path) -> list[str]:
    lake_dir, catalog = data / "lake", data / "catalog.sqlite"
    return [
        # DuckLake maintenance: rewrites, deletes or expires files and snapshots
        "SELECT * FROM lake.merge_adjacent_files()",
        "CALL lake.merge_adjacent_files()",
        "SELECT * FROM ducklake_merge_adjacent_files('lake')",
        "SELECT * FROM ducklake_rewrite_data_files('lake')",
        "SELECT * FROM lake.rewrite_data_files()",
        "SELECT * FROM ducklake_flush_inlined_data('lake')",
        "CALL ducklake_expire_snapshots('lake', older_than => now())",
        "SELECT * FROM ducklake_cleanup_old_files('lake', cleanup_all => true)",
        "SELECT * FROM ducklake_delete_orphaned_files('lake', cleanup_all => true)",
        "CALL lake.set_option('parquet_compression', 'snappy')",
        "SELECT * FROM ducklake_add_data_files('lake', 'scrapes', '/etc/passwd')",
        # the catalog and host files
        f"SELECT * FROM sqlite_scan('{catalog}', 'ducklake_metadata')",
        f"CALL sqlite_attach('{catalog}')",
        f"SELECT * FROM sqlite_query('{catalog}', 'DELETE FROM ducklake_snapshot')",
        f"ATTACH '{catalog}' AS cat (TYPE sqlite)",
        f"ATTACH 'sqlite:{data}/evil.sqlite' AS evil",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_blob('/etc/shadow')",
        "SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT * FROM read_parquet('{lake_dir}/**/*.parquet')",
        f"SELECT * FROM parquet_metadata('{lake_dir}/**/*.parquet')",
        f"SELECT * FROM glob('{lake_dir}/**')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_json('/proc/self/environ')",
        f"SELECT * FROM read_duckdb('{data}/x.duckdb')",
        "SELECT * FROM duckdb_databases()",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM duckdb_secrets()",
        "SELECT current_setting('allowed_directories')",
        "SELECT getenv('HOME')",
        "PRAGMA database_list",
        # writes by statement
        f"COPY (SELECT 1) TO '{lake_dir}/x.parquet'",
        f"COPY marts.jobs TO '{data}/jobs.csv'",
        f"EXPORT DATABASE '{data}/dump'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "RESET lock_configuration",
        "PRAGMA enable_profiling",
        "CALL checkpoint()",
        "SELECT * FROM query('DELETE FROM raw.scrapes')",
        "SELECT * FROM query_table('raw.scrapes')",
        "DELETE FROM raw.scrapes",
        "INSERT INTO raw.scrapes (cluster) VALUES ('x')",
        "CREATE TABLE marts.x AS SELECT 1",
        "CREATE TEMP TABLE x AS SELECT 1",
        # multi-statements and comments hiding statements
        "SELECT 1; DELETE FROM raw.scrapes",
        "SELECT 1 -- harmless\n; DELETE FROM raw.scrapes",
        "SELECT 1 /* ; */ ; DROP TABLE raw.scrapes",
        f"SELECT 1 /* /* */ ; COPY (SELECT 1) TO '{data}/z.csv' */",  # nested comment: DuckDB runs SELECT 1 only
        f"/* read */ COPY (SELECT 1) TO '{lake_dir}/y.csv'",
        "SELECT (SELECT count(*) FROM lake.merge_adjacent_files())",
        "WITH m AS (SELECT * FROM ducklake_merge_adjacent_files('lake')) SELECT * FROM m",
        "SELECT * FROM raw.scrapes, LATERAL (SELECT * FROM read_text('/etc/passwd'))",
        "EXPLAIN ANALYZE SELECT * FROM lake.merge_adjacent_files()",
        "SELECT * FROM \"read_text\"('/etc/passwd')",
        "SELECT * FROM READ_TEXT('/etc/passwd')",
        "SELECT * FROM main.read_text('/etc/passwd')",
        "SELECT * FROM system.main.read_text('/etc/passwd')",
    ]


def test_hostile_queries_are_refused_and_leave_every_file_byte_identical(parquet_lake, capsys) -> None:
    data = parquet_lake.data
    queries = hostile(data)
    assert len(queries) >= 40
    before = _files(data)
    assert any(p.endswith(".parquet") for p in before)
    for sql in queries:
        code = main(["sql", sql, "--data", str(data)])
        out, err = capsys.readouterr()
        if "/* /* */" in sql:
            assert code == 0 and out.startswith("1\n"), (sql, out, err)  # only the SELECT 1 DuckDB sees
            continue
        assert code == 2, (sql, out, err)  # refused or failed with a one-line cause, never run
        assert err.startswith("gangscope: ") and err.count("\n") == 1, (sql, err)
        assert "root:" not in out and "PATH=" not in out, sql  # nothing of the host's files leaked
    assert _files(data) == before
    # ... and reading still works
    assert main(["sql", "SELECT count(*) FROM raw.scrapes", "--format", "csv", "--data", str(data)]) == 0
    assert capsys.readouterr().out == "count_star()\n3\n"


def test_catalog_password_is_not_shown_by_any_reading_statement(parquet_lake, capsys) -> None:
    for sql in ("SHOW DATABASES", "SELECT database_name FROM duckdb_tables() LIMIT 1", "SELECT * FROM lake.options()"):
        assert main(["sql", sql, "--data", str(parquet_lake.data)]) in (0, 2), sql
    capsys.readouterr()
