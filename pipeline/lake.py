"""The lake: DuckLake (DuckDB engine, SQLite or PostgreSQL catalog, Parquet files).

A plain DuckDB file cannot be read by a second process while a writer holds it; DuckLake
can, which is why analysts (``gangscope sql``) and reports read while the pipeline writes.
An analyst attaches it by hand with the line ``attach_sql()`` returns (see docs/lake.md).
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb

from gangscope.config import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

ALIAS = "lake"
SCHEMAS = ("raw", "staging", "intermediate", "marts")
MODEL_SCHEMAS = SCHEMAS[1:]  # what pipeline.models builds

# The tables others rely on (CONTRACT section 1b); the pipeline owns them (docs/lake.md).
# Samples land narrow: each series' text (metric, labels, target...) once per UTC day in
# raw.metric_series, and (ts, series, value) per sample in raw.metric_points; raw.metric_samples is
# the view that joins them back, one row per sample. Writing the wide row per sample cost 3x more
# (DuckDB's Parquet writer hashes every string); see docs/lake.md for the series id.
# raw.kafka_offsets is append-only: a partition's next offset is its greatest next_offset among rows
# of the topic's current topic_id (a topic recreated, or an in-memory broker restarted, starts over).
# raw.kafka_claims holds which group member owns each partition since its last assignment (pipeline/land.py:
# claim): a writer the group gave up on must not land what the new owner re-reads.
RAW_DDL = """
CREATE TABLE IF NOT EXISTS raw.k8s_objects (
    cluster VARCHAR, observed_at TIMESTAMPTZ, event_type VARCHAR, api_version VARCHAR, kind VARCHAR,
    namespace VARCHAR, name VARCHAR, uid VARCHAR, resource_version VARCHAR, object JSON,
    kafka_partition INTEGER, kafka_offset BIGINT, bad_time BOOLEAN
);
CREATE TABLE IF NOT EXISTS raw.metric_series (
    series UBIGINT, day DATE, cluster VARCHAR, metric VARCHAR, labels JSON, node VARCHAR,
    target VARCHAR, job VARCHAR, instance VARCHAR
);
CREATE TABLE IF NOT EXISTS raw.metric_points (ts TIMESTAMPTZ, series UBIGINT, value DOUBLE);
CREATE VIEW IF NOT EXISTS raw.metric_samples AS
SELECT s.cluster, p.ts, s.metric, s.labels, p.value, s.node, s.target, s.job, s.instance, p.series
FROM raw.metric_points AS p JOIN raw.metric_series AS s USING (series);
CREATE TABLE IF NOT EXISTS raw.scrapes (
    cluster VARCHAR, scraped_at TIMESTAMPTZ, target VARCHAR, job VARCHAR, instance VARCHAR, up BOOLEAN,
    duration_s DOUBLE, samples INTEGER, error VARCHAR, kafka_partition INTEGER, kafka_offset BIGINT,
    first_sample_at TIMESTAMPTZ
);
-- Added in issue 37 (the model runner's late_from; a time check once at landing): lakes made before get them, NULL in
-- their old rows.
ALTER TABLE raw.scrapes ADD COLUMN IF NOT EXISTS first_sample_at TIMESTAMPTZ;
ALTER TABLE raw.k8s_objects ADD COLUMN IF NOT EXISTS bad_time BOOLEAN;
CREATE TABLE IF NOT EXISTS raw.dead_letters (
    landed_at TIMESTAMPTZ, topic VARCHAR, "partition" INTEGER, "offset" BIGINT, reason VARCHAR, payload BLOB
);
CREATE TABLE IF NOT EXISTS raw.kafka_offsets (
    topic VARCHAR, "partition" INTEGER, next_offset BIGINT, landed_at TIMESTAMPTZ, topic_id VARCHAR
);
CREATE TABLE IF NOT EXISTS raw.kafka_claims (
    topic VARCHAR, "partition" INTEGER, topic_id VARCHAR, claim VARCHAR, owner VARCHAR, claimed_at TIMESTAMPTZ
);
"""


def _extension_file(name: str) -> str | None:
    """The ``.duckdb_extension`` shipped in the ``duckdb-extension-<name>`` wheel, if installed."""
    try:
        mod = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError:
        return None
    found = glob.glob(os.path.join(os.path.dirname(mod.__file__ or ""), "**", f"{name}.duckdb_extension"),
                      recursive=True)
    return found[0] if found else None


def load_extensions(con: duckdb.DuckDBPyConnection, names: tuple[str, ...]) -> None:
    """Load extensions offline from their PyPI wheels; fall back to the official repository."""
    for name in names:
        try:
            con.load_extension(name)
            continue
        except duckdb.Error:
            pass
        path = _extension_file(name)
        if path:
            con.install_extension(path)
        else:
            con.install_extension(name)
        con.load_extension(name)


def catalog_extensions(settings: Settings) -> tuple[str, ...]:
    remote = ("httpfs",) if is_remote(data_path(settings)) else ()
    if settings.catalog_url.startswith(("postgres:", "postgresql:")):
        return ("ducklake", "postgres_scanner", *remote)
    return ("ducklake", "sqlite_scanner", *remote)


def is_remote(path: str) -> bool:
    return path.startswith(("s3://", "s3a://", "gs://", "gcs://", "r2://", "az://", "abfss://", "http://", "https://"))


def data_path(settings: Settings) -> str:
    """DuckLake DATA_PATH with a trailing slash: ``lake_data_path`` (e.g. s3://bucket/lake/) or <data>/lake."""
    path = settings.lake_data_path or os.path.abspath(settings.lake_path)
    return path if path.endswith("/") else path + "/"


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def attach_sql(settings: Settings, read_only: bool = False, alias: str = ALIAS) -> str:
    """The ATTACH statement for this lake (what an analyst types in a plain DuckDB shell)."""
    url = settings.catalog_url
    if url.startswith("sqlite:"):
        catalog = "sqlite:" + os.path.abspath(url[len("sqlite:"):])
    elif url.startswith(("postgres://", "postgresql://")):
        # libpq takes the URI form as it is (checked against PostgreSQL 15 with duckdb 1.5.5).
        catalog = "postgres:" + url
    else:
        # postgres:dbname=lake host=pg user=gs (libpq key=value form) or postgresql:...
        catalog = "postgres:" + url.split(":", 1)[1]
    # Every writer must name the same DATA_PATH: DuckLake pins the first one in the catalog.
    opts = [f"DATA_PATH {_sql_str(data_path(settings))}"]
    if read_only:
        opts.append("READ_ONLY")
    return f"ATTACH {_sql_str('ducklake:' + catalog)} AS {alias} ({', '.join(opts)})"


# Held by the pipeline's landing transactions and by a whole model build, in one process (`gangscope run`).
# A build's DuckLake transaction reads the SQLite catalog at its start and writes it at COMMIT; a landing
# committed in between makes that snapshot stale and SQLite refuses the write ("database is locked", no
# wait helps). With landings every few seconds every build failed after its retries; now landings pause
# while a build runs (Kafka holds the records; nothing is lost).
COMMIT_LOCK = threading.RLock()


def is_conflict(e: BaseException) -> bool:
    """A transient catalog conflict that a retry resolves (SQLite lock, DuckLake commit race; DuckLake's own retries
    of a commit that lost the race for the next snapshot id ten times, met with a model build beside two writers
    landing every half second on a loaded machine)."""
    text = str(e).lower()
    return any(s in text for s in ("database is locked", "conflict", "busy", "could not serialize",
                                   "exceeded the maximum retry count"))


def retry(fn: Callable[[], T], attempts: int = 30, base_s: float = 0.05) -> T:
    """Run ``fn`` again on a catalog conflict, with exponential backoff and jitter."""
    for i in range(attempts):
        try:
            return fn()
        except duckdb.Error as e:
            if not is_conflict(e) or i == attempts - 1:
                raise
            time.sleep(min(2.0, base_s * 2**i) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def transaction(con: duckdb.DuckDBPyConnection, body: Callable[[], tuple[bool, T]]) -> T:
    """``body`` in one transaction under ``COMMIT_LOCK``, run again from its start on a catalog conflict (``retry``):
    committed when it returns ``(True, value)``, rolled back when ``(False, value)`` or when it raises."""

    def once() -> T:
        con.execute("BEGIN TRANSACTION")
        try:
            commit, value = body()
            con.execute("COMMIT" if commit else "ROLLBACK")
            return value
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise

    with COMMIT_LOCK:
        return retry(once)


# What DuckDB says when the object store or the catalog server is away (httpfs after its own retries, libpq), as met in
# tests/deploy/test_object_storage_faults.py; a refusal (403, a missing bucket) is not among them.
_UNAVAILABLE = ("connection refused", "could not establish connection", "unable to connect", "could not connect",
                "connection reset", "connection was closed", "server closed the connection", "timed out", "timeout",
                "terminating connection", "the database system is", "no connection to the server", "broken pipe",
                "ssl syscall", "http 500", "http 502", "http 503", "http 504", "(500", "(502", "(503", "(504",
                "slowdown", "failed to read connection", "failed to send", "failed to connect",
                "current transaction is aborted")
OUTAGE_GIVE_UP_S = 900.0  # a writer waits out an outage this long, then fails (and its supervisor restarts it)


_REFUSED = re.compile(r"http (?:code )?4\d\d|\(4\d\d\b|accessdenied|nosuchbucket|invalidaccesskeyid|"
                      r"signaturedoesnotmatch|password authentication failed|does not exist")


def is_unavailable(e: BaseException) -> bool:
    """The lake's storage or catalog is unreachable for now (a retry later may work), not a refusal (HTTP 4xx: a
    permission, a missing bucket; a wrong catalog password) or a bug.

    By the text, whatever the class: DuckDB wraps the same outage in many (PostgreSQL restarted under a landing gave an
    IOException, an InvalidInputException "Attempting to fetch from an unsuccessful query result ... terminating
    connection", a BinderException "Failed to get data file list ... server closed the connection unexpectedly", a
    TransactionException "Failed to commit: Failed to execute query "ROLLBACK": " with no reason at all, and an
    InvalidInputException "Attempting to fetch from an unsuccessful query result ... Current transaction is aborted
    (please ROLLBACK)": a catalog query failed inside the landing's transaction, which its caller rolled back).
    """
    if not isinstance(e, duckdb.Error):
        return False
    text = str(e).lower()
    if _REFUSED.search(text):
        return False
    if isinstance(e, duckdb.TransactionException) and "failed to commit" in text:
        return True  # rolled back whole: running the transaction again is safe, a landing re-reads its offsets
    return any(s in text for s in _UNAVAILABLE)


def is_broken(e: BaseException) -> bool:
    """DuckDB failed internally and invalidated its database instance: every later query on any of its connections
    fails ("database has been invalidated"), so only a new instance (``lake.connect``) helps.

    Met once per few CI runs: DuckLake's inlined-data reader failed an assertion ("Attempted to access index 0 within
    vector of size 0") when a writer re-read its stored offsets just after the PostgreSQL catalog restarted, and the
    writer died (tests/deploy/test_object_storage_faults.py).
    """
    return isinstance(e, (duckdb.InternalException, duckdb.FatalException)) or (
        isinstance(e, duckdb.Error) and "database has been invalidated" in str(e).lower())


REOPENS = 3  # new instances after internal errors per ``outlast`` call; the next such error is reported

# Connections to instances DuckDB invalidated, never closed: closing one whose transaction is still open (the failed
# landing's ROLLBACK was refused too) rolls it back in a C++ destructor, which throws "database has been invalidated"
# and aborts the process (CI, 7 Dec: a writer opened the lake again after the PostgreSQL catalog restarted, closed the
# old connection and died with "terminate called"). gangscope.app.cli leaves with os._exit while any are held, so they
# are never destroyed; each holds its instance's memory until then (at most REOPENS per step, after an internal error).
# The same holds a connection a thread is still reading on when the process stops (a live-page read or a model build
# past its grace): closing it fails that read, and a thread inside DuckDB at interpreter exit aborts the process too
# (CI, 7 Dec: `gangscope run` stopped by SIGTERM ended in "terminate called without an active exception").
_ABANDONED: list[object] = []


def abandon(*cons: object) -> None:
    """Keep connections, unclosed, to the end of the process (see ``_ABANDONED``): those of an invalidated instance,
    and those a thread the process stops without waiting for still uses."""
    _ABANDONED.extend(cons)


def abandoned() -> bool:
    return bool(_ABANDONED)


def outlast(fn: Callable[[], T], what: str, beat: Callable[[], None] | None = None,
            give_up_s: float = OUTAGE_GIVE_UP_S, reopen: Callable[[], None] | None = None) -> T:
    """Run ``fn`` (conflicts retried as ``retry`` does); while the object store or the catalog is unreachable,
    wait with backoff (1 s doubling to 15 s) and run it again, for up to ``give_up_s``.

    Meanwhile the ``lake`` component is degraded in /healthz (with the error, redacted) and ``beat`` is called
    before each wait (the caller's heartbeat: waiting out an outage is what it should do). ``fn`` must be safe to
    run again: a lake transaction that failed rolled back, and a landing re-reads the stored offsets.

    With ``reopen`` (which replaces the connections ``fn`` uses), an internal error that invalidated DuckDB
    (``is_broken``) is followed by a new instance and ``fn`` run again, up to ``REOPENS`` times per call: a bug
    that repeats is reported, not looped on.
    """
    from gangscope import telemetry

    started = time.monotonic()
    wait, failures, broken, stale = 1.0, 0, 0, False
    while True:
        try:
            if stale and reopen is not None:
                reopen()  # itself waited out like ``fn`` while the catalog is away
                stale = False
            result = retry(fn)
        except duckdb.Error as e:
            if reopen is not None and is_broken(e) and broken < REOPENS:
                broken, stale = broken + 1, True
                log.warning("%s: DuckDB failed internally and must be opened again (%d of %d times); "
                            "running it again on a new connection to the lake: %s", what, broken, REOPENS,
                            str(e).splitlines()[0][:300])
                continue
            if not is_unavailable(e) or time.monotonic() - started > give_up_s:
                raise
            failures += 1
            first = str(e).splitlines()[0][:300]
            telemetry.degraded("lake", f"{what} waits for the lake's storage or catalog ({failures} attempt(s) "
                                       f"failed, retrying): {first}")
            if failures == 1 or failures % 10 == 0:
                log.warning("%s: the lake's storage or catalog is unreachable; retrying every %.0f s at most: %s",
                            what, 15.0, first)
            if beat is not None:
                beat()
            time.sleep(wait * (0.75 + random.random() / 2))
            wait = min(15.0, wait * 2)
            continue
        if failures:
            telemetry.degraded("lake", None)
            log.warning("%s: the lake is reachable again after %.0f s (%d failed attempt(s))", what,
                        time.monotonic() - started, failures)
        return result


def check_writable(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """A remote data path takes a write: one small object, overwritten at every check, at its root.

    A writer whose credentials may read but not write would otherwise start, inline its first small batches in
    the catalog, and fail at the first Parquet file (or the first compaction) minutes later, over and over.
    """
    from gangscope.errors import UserError

    path = data_path(settings)
    if not is_remote(path):
        return
    try:
        con.execute(f"COPY (SELECT 1 AS ok) TO {_sql_str(path + WRITE_CHECK)} (FORMAT csv)")
    except duckdb.Error as e:
        text = str(e)
        if is_unavailable(e):
            raise
        raise UserError(f"cannot write to the lake's data path {path}: {text.splitlines()[0][:300]}. Give the "
                        "credentials DuckDB uses for it (its secret for this path, or AWS_* variables) permission to "
                        "write, list and delete objects there (docs/scaling.md)") from None


WRITE_CHECK = ".gangscope-write-check.csv"  # check_writable's object, at the root of a remote data path


def temp_path(settings: Settings) -> Path:
    """Where DuckDB spills what does not fit ``memory_limit``: always local (<data>/tmp), even with the
    Parquet files on object storage."""
    return settings.data / "tmp"


def memory_config(settings: Settings) -> dict[str, object]:
    """DuckDB settings that bound a connection's memory: ``memory_limit`` and a temp directory to spill to.

    Without a limit DuckDB takes up to 80% of RAM: the full build at 1,024 GPUs x 6 h peaked at 2.7 GB RSS
    (the DISTINCT over every sample and the counter window of stg_metric_signals). Hash aggregates, joins,
    sorts and windows spill past the limit instead, at some CPU cost (bench/models.py, docs/scaling.md).
    """
    # A local lake's Parquet files are not also cached in DuckDB's memory (the OS caches them): with the cache,
    # `gangscope run`'s one build connection grew by ~1.7 MB per build (files each build wrote, then compacted
    # away) up to memory_limit; without it RSS stayed flat over 80 builds, builds as fast (docs/lake.md).
    cache = {} if is_remote(data_path(settings)) else {"enable_external_file_cache": False}
    if not settings.memory_limit:
        return cache
    # Insertion order is kept only where a query asks for it (ORDER BY): otherwise DuckDB buffers whole inputs
    # to write them back in order.
    return {"memory_limit": settings.memory_limit, "temp_directory": str(temp_path(settings).absolute()),
            "preserve_insertion_order": False, **cache}


def connect(settings: Settings, read_only: bool = False, create: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the lake attached as ``lake`` and selected (``USE lake``)."""
    if create and not read_only:
        settings.data.mkdir(parents=True, exist_ok=True)
        settings.lake_path.mkdir(parents=True, exist_ok=True)
    elif read_only:
        require(settings)  # a clear error, not DuckDB's "unable to open database file"
    con = duckdb.connect(config={"threads": os.cpu_count() or 2, **memory_config(settings)})
    load_extensions(con, catalog_extensions(settings))
    new_catalog = _new_sqlite_catalog(settings)
    retry(lambda: con.execute(attach_sql(settings, read_only=read_only)))
    con.execute(f"USE {ALIAS}")
    if not read_only:
        # Every writable attach makes sure the schemas and raw tables exist (cheap: IF NOT EXISTS). An attach
        # creates an empty catalog when there is none, so a writer that skipped this left a lake where readers
        # failed with "schema raw does not exist".
        def init() -> None:
            for schema in SCHEMAS:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            if con.execute("SELECT 1 FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'raw' "
                           "AND table_name = 'metric_samples'", [ALIAS]).fetchone():
                from gangscope.errors import UserError

                raise UserError(f"the lake at {data_path(settings)} was written by an older gangscope "
                                "(raw.metric_samples is a table, not a view): land into a new --data directory")
            con.execute(RAW_DDL)
            # zstd: Parquet files 2.3x smaller than DuckLake's default snappy (0.18 vs 0.41 bytes per dcgm
            # sample) at the same write CPU (measured on 400k-sample inserts of the wide layout).
            # Set once, lake-wide; an operator's own choice (CALL lake.set_option) is kept.
            if not con.execute(f"SELECT 1 FROM {ALIAS}.options() WHERE option_name = 'parquet_compression'").fetchone():
                con.execute(f"CALL {ALIAS}.set_option('parquet_compression', 'zstd')")
            # No data inlining in the model schemas: a model table holding a few rows was inlined into a new
            # catalog table at every build (each replaced table is a new table id), and every catalog read
            # slowed with their number until snapshots expired: the live findings build went from 2 s to
            # 15 s in 40 builds (1,400 SQLite tables); without inlining, 1.7 s to 3.6 s. Raw tables keep
            # it: small landings are what it is for.
            inlining = {r[0] for r in con.execute(
                f"SELECT scope_entry FROM {ALIAS}.options() WHERE option_name = 'data_inlining_row_limit' "
                "AND scope = 'SCHEMA'").fetchall()}
            for schema in MODEL_SCHEMAS:
                if schema not in inlining:
                    con.execute(f"CALL {ALIAS}.set_option('data_inlining_row_limit', 0, schema => '{schema}')")

        retry(init)
        if new_catalog:
            _sqlite_wal(settings)
        try:
            check_writable(con, settings)
        except BaseException:
            con.close()
            raise
    return con


def _new_sqlite_catalog(settings: Settings) -> bool:
    """Whether this attach creates the SQLite catalog file (journal mode is set then, and only then)."""
    url = settings.catalog_url
    return url.startswith("sqlite:") and not Path(url[len("sqlite:"):]).exists()


def _sqlite_wal(settings: Settings) -> None:
    """Put a SQLite catalog in WAL mode (persistent, set once: when the catalog is created).

    Only then: this opens the file with Python's own SQLite library, and closing it drops every POSIX
    lock this process holds on the file, including those of DuckDB's SQLite in a running pipeline
    (``gangscope run`` attaches for each model build): "database is locked" and "disk I/O error" followed.

    In SQLite's default rollback-journal mode an idle reader (an analyst's open ``gangscope sql``
    session, a report) keeps a shared lock that blocks every writer's commit until it detaches;
    in WAL mode readers and the writer no longer block each other.
    """
    url = settings.catalog_url
    if not url.startswith("sqlite:"):
        return
    import sqlite3

    try:
        db = sqlite3.connect(url[len("sqlite:"):], timeout=5)
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
        finally:
            db.close()
    except sqlite3.Error as e:
        log.warning("could not put the catalog in WAL mode (%s); idle readers may delay writes", e)


def require(settings: Settings) -> None:
    """Fail with a clear message when the lake a reader names does not exist (rather than create an empty one)."""
    from gangscope.errors import UserError

    if settings.catalog_url.startswith(("postgres:", "postgresql:")):
        return
    path = Path(settings.catalog_url[len("sqlite:"):])
    if not path.exists():
        raise UserError(f"no lake at {path}: run the pipeline (or `gangscope demo`) first, or pass --data")
