"""`gangscope sql`: writes refused by the parser and by the connection; reads answer while another process writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gangscope.errors import UserError
from pipeline import lake
from reports import sqlshell
from reports.sqlshell import WriteRefused, check_read_only

ROOT = Path(__file__).resolve().parents[2]

WRITES = [
    "INSERT INTO marts.jobs (job) VALUES ('x')",
    "UPDATE marts.jobs SET job = 'x'",
    "DELETE FROM marts.jobs",
    "DROP TABLE marts.jobs",
    "CREATE TABLE marts.x AS SELECT 1",
    "CREATE OR REPLACE VIEW marts.v AS SELECT 1",
    "CREATE MACRO m() AS 1",
    "ALTER TABLE marts.jobs ADD COLUMN y INTEGER",
    "ATTACH 'other.duckdb' AS other",
    "DETACH lake",
    "COPY marts.jobs TO '/tmp/out.csv'",
    "COPY (SELECT * FROM marts.jobs) TO '/tmp/out.parquet' (FORMAT parquet)",
    "EXPORT DATABASE '/tmp/dump'",
    "IMPORT DATABASE '/tmp/dump'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET threads = 1",
    "RESET threads",
    "SET VARIABLE x = 1",
    "PRAGMA enable_profiling",
    "PRAGMA threads = 1",
    "CALL ducklake_expire_snapshots('lake', older_than => now())",
    "CALL ducklake_cleanup_old_files('lake', cleanup_all => true)",
    "SELECT * FROM ducklake_cleanup_old_files('lake', cleanup_all => true)",
    "SELECT * FROM query('DROP TABLE marts.jobs')",
    "SELECT 1; DROP TABLE marts.jobs",
    "SELECT 1 INTO marts.y",
    "TRUNCATE marts.jobs",
    "CHECKPOINT",
    "VACUUM",
    "USE marts",
    "BEGIN TRANSACTION",
    "EXPLAIN ANALYZE DELETE FROM marts.jobs",
    "MERGE INTO marts.jobs USING marts.jobs s ON false WHEN NOT MATCHED THEN INSERT VALUES (s.job)",
    "this is not sql",
]
READS = [
    "SELECT root_cause, count(*) FROM marts.findings GROUP BY ALL",
    "WITH x AS (SELECT * FROM marts.jobs) SELECT count(*) FROM x",
    "FROM marts.jobs LIMIT 1",
    "DESCRIBE marts.findings",
    "SHOW ALL TABLES",
    "SUMMARIZE marts.queue_health",
    "EXPLAIN SELECT * FROM marts.jobs",
    "PRAGMA version",
    "SELECT * FROM ducklake_snapshots('lake')",
    "VALUES (1, 'a')",
    "(SELECT 1) UNION ALL (SELECT 2)",
]


@pytest.mark.parametrize("sql", WRITES)
def test_writing_statements_refused(sql):
    with pytest.raises(WriteRefused, match="^refused: "):
        check_read_only(sql)


@pytest.mark.parametrize("sql", READS)
def test_reads_accepted(sql):
    check_read_only(sql)


def test_reads_answer_and_writes_leave_lake_unchanged(report_lake, capsys):
    from gangscope.app.cli import main

    count = "SELECT count(*) AS n FROM marts.jobs"
    assert main(["sql", count, "--format", "json", "--data", str(report_lake.data)]) == 0
    before = json.loads(capsys.readouterr().out)[0]["n"]
    assert before == 8
    for sql in WRITES[:12]:
        assert main(["sql", sql, "--data", str(report_lake.data)]) == 2
        assert capsys.readouterr().err.startswith("gangscope: refused: ")
    for sql in READS:
        assert main(["sql", sql, "--data", str(report_lake.data)]) == 0, sql
    capsys.readouterr()
    assert main(["sql", count, "--format", "csv", "--data", str(report_lake.data)]) == 0
    assert capsys.readouterr().out == f"n\n{before}\n"


def test_connection_is_read_only_underneath(report_lake):
    """Defence in depth: even a statement that skipped the parser cannot write."""
    con = sqlshell.connect_read_only(report_lake)
    try:
        for sql in ("INSERT INTO marts.queue_health (cluster, cluster_queue) VALUES ('default', 'x')",
                    "COPY (SELECT 1) TO '/tmp/gangscope-should-not-exist.csv'",
                    "SET threads = 1",
                    "SELECT * FROM read_csv('/etc/passwd')"):
            with pytest.raises(Exception, match="read-only|disabled|locked|Permission"):
                con.execute(sql)
        assert con.execute("SELECT count(*) FROM marts.queue_health").fetchone()[0] == 2
    finally:
        con.close()
    assert not Path("/tmp/gangscope-should-not-exist.csv").exists()


def test_output_formats(report_lake, tmp_path):
    sql = "SELECT cluster_queue, pending FROM marts.queue_health ORDER BY 1"
    sqlshell.run_once(report_lake, sql, "parquet", tmp_path / "q.parquet")
    assert pq.read_table(tmp_path / "q.parquet").to_pylist() == [
        {"cluster_queue": "cq-a", "pending": 1}, {"cluster_queue": "cq-b", "pending": 0}]
    sqlshell.run_once(report_lake, sql, "json", tmp_path / "q.json")
    assert json.loads((tmp_path / "q.json").read_text())[1] == {"cluster_queue": "cq-b", "pending": 0}
    with pytest.raises(UserError, match="--out"):
        sqlshell.run_once(report_lake, sql, "parquet", None)


def test_no_lake_is_a_clear_error(offline_settings):
    with pytest.raises(UserError, match="no lake"):
        sqlshell.run_once(offline_settings, "SELECT 1")


def test_shell_runs_statements_and_keeps_history(report_lake, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GANGSCOPE_DATA": str(tmp_path / "data")}
    # The shell reads stdin; `script` is not needed: a non-tty stdin runs the piped statement once.
    r = subprocess.run([sys.executable, "-m", "gangscope.app.cli", "sql", "--data", str(report_lake.data)],
                       input="SELECT count(*) AS n FROM marts.findings;\n", capture_output=True, text=True,
                       env=env, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[2].strip() == "5"


def test_shell_interactive_loop(report_lake, monkeypatch, capsys):
    lines = iter(["SELECT count(*) AS n", "FROM marts.jobs;", "DROP TABLE marts.jobs;", ".quit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert sqlshell.shell(report_lake) == 0
    out = capsys.readouterr().out
    assert "\n8\n" in out and "refused: DROP" in out
    assert (report_lake.data / "sql_history").exists()


WRITER = textwrap.dedent("""
    import sys, time
    from gangscope import config
    from pipeline import lake
    s = config.load(overrides={"data": sys.argv[1]}, environ={})
    con = lake.connect(s)
    i = 0
    print("ready", flush=True)
    while True:
        lake.retry(lambda: con.execute(
            "INSERT INTO raw.scrapes (cluster, scraped_at, target, up) VALUES ('default', now(), ?, true)", [str(i)]))
        i += 1
        time.sleep(0.05)
""")


@pytest.mark.timeout(120)
def test_answers_while_another_process_writes(offline_settings):
    lake.connect(offline_settings).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(offline_settings.data)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert writer.stdout.readline().strip() == "ready"
        seen = []
        for _ in range(4):
            r = subprocess.run([sys.executable, "-m", "gangscope.app.cli", "sql", "SELECT count(*) FROM raw.scrapes",
                                "--format", "csv", "--data", str(offline_settings.data)],
                               capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
            assert r.returncode == 0, r.stderr
            seen.append(int(r.stdout.splitlines()[1]))
            time.sleep(0.3)
        assert writer.poll() is None, writer.stderr.read()  # the writer was never blocked out
        assert seen == sorted(seen) and seen[-1] > seen[0] > 0  # each answer sees the writes so far
    finally:
        writer.terminate()
        writer.wait(timeout=10)
