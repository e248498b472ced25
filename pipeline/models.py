"""The model runner: builds the plain-SQL models in ``sql/<layer>/<table>.sql`` into the lake.

Why a runner at all: the build order comes from the models' own references (parsed with
sqlglot), thresholds reach the SQL as DuckDB variables (``getvariable('name')``), heavy
models over append-only inputs are built incrementally, and ``diagnose`` needs to know
whether anything landed since the last build (staleness).

Header comments a model may carry (first lines of the file):
``-- materialized: table|view|incremental`` (default table) and, for incremental models,
``-- watermark: <column>``, optional ``-- watermark_from: <schema.table.column>`` (the input
column it reads up to) and ``-- lookback_s: <seconds>``. An incremental model filters its input
with ``ts > getvariable('watermark')``; the runner sets that variable to the input's high-water
mark of the last build minus the lookback, deletes the model's rows after it and inserts the
fresh ones, so one more minute of data never rebuilds the whole day. A whole build is one
transaction. A model whose inputs did not change since the last build is not rebuilt (see
``_dirty``: its raw tables' state, the models it reads, the clock). See docs/models.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import sqlglot
from sqlglot import exp

from gangscope.config import Settings
from gangscope.errors import UserError
from pipeline import lake

log = logging.getLogger(__name__)
logging.getLogger("sqlglot").setLevel(logging.WARNING)  # it logs every dialect quirk at INFO

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"
LAYERS = ("staging", "intermediate", "marts")
SOURCE_SCHEMAS = ("raw",)
STATE_TABLE = "staging._model_builds"
_HEADER = re.compile(r"^--\s*(materialized|watermark|watermark_from|lookback_s)\s*:\s*(\S+)\s*$", re.M)
WATERMARKS = "staging._model_watermarks"
INPUTS = "staging._model_inputs"  # per model: the state of the raw tables it read at its last build
# Every raw table a model may read, with the time column its state is taken on.
RAW_TIME = {"raw.k8s_objects": "observed_at", "raw.metric_points": "ts", "raw.metric_series": "day",
            "raw.scrapes": "scraped_at"}
RAW_VIEWS = {"raw.metric_samples": ("raw.metric_points", "raw.metric_series")}
# The models' time sanity (rows dated after it are left out until the clock reaches them): the one use of
# the clock a skipped model may make, because the raw state counts the rows beyond it.
HORIZON = "now() + INTERVAL 1 DAY"
_CLOCK = re.compile(r"\b(now|today|get_current_time|get_current_timestamp|transaction_timestamp)\s*\("
                    r"|\b(current_timestamp|current_date|current_time|localtimestamp|localtime)\b", re.I)
_REFS: dict[str, set[str]] = {}  # SQL text -> its refs: parsing every model with sqlglot took 0.6 s per build


@dataclass
class Model:
    layer: str
    name: str
    path: Path
    sql: str
    materialized: str = "table"
    watermark: str | None = None
    watermark_from: str | None = None  # schema.table.column of the input the model reads up to
    lookback_s: float = 0.0
    refs: set[str] = field(default_factory=set)
    clock: bool = False  # reads the clock other than as HORIZON: rebuilt at every build

    @property
    def table(self) -> str:
        return f"{self.layer}.{self.name}"


@dataclass
class BuildStats:
    models: int = 0
    seconds: float = 0.0
    per_model_s: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    incremental: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # inputs unchanged since they were built (``_dirty``)
    source_state: str = ""  # what the raw inputs were when the build began (is_stale compares it)


def _refs(sql: str, path: Path) -> set[str]:
    """Every ``schema.table`` this SELECT reads (CTE names excluded)."""
    try:
        trees = sqlglot.parse(sql, read="duckdb")
    except sqlglot.errors.ParseError as e:
        raise UserError(f"model {path}: SQL does not parse: {str(e).splitlines()[0]}") from None
    out: set[str] = set()
    for tree in trees:
        if tree is None:
            continue
        for t in tree.find_all(exp.Table):
            if t.db:
                out.add(f"{t.db}.{t.name}".lower())
    return out


def discover(sql_dir: Path = SQL_DIR) -> dict[str, Model]:
    """The models under ``sql_dir``, keyed by ``layer.table``."""
    models: dict[str, Model] = {}
    for layer in LAYERS:
        for path in sorted((sql_dir / layer).glob("*.sql")):
            sql = path.read_text()
            header = dict(_HEADER.findall(sql))
            mat = header.get("materialized", "table")
            if mat not in ("table", "view", "incremental"):
                raise UserError(f"model {path}: unknown materialization {mat!r} (table, view, incremental)")
            if mat == "incremental" and "watermark" not in header:
                raise UserError(f"model {path}: incremental models need a '-- watermark: <column>' line")
            body = sql.strip().rstrip(";")
            if body not in _REFS:
                _REFS[body] = _refs(body, path)
            m = Model(layer, path.stem, path, body, mat, header.get("watermark"), header.get("watermark_from"),
                      float(header.get("lookback_s", 0)), set(_REFS[body]),
                      bool(_CLOCK.search(re.sub(r"--[^\n]*", "", body).replace(HORIZON, ""))))
            models[m.table] = m
    return models


def order(models: dict[str, Model]) -> list[Model]:
    """Models sorted so that each comes after the models it reads; cycles and unknown refs are errors."""
    for m in models.values():
        for r in sorted(m.refs):
            if r.split(".")[0] in LAYERS and r not in models:
                raise UserError(f"model {m.table} ({m.path}) reads {r}, which is no model in sql/")
            if r.split(".")[0] not in LAYERS + SOURCE_SCHEMAS:
                raise UserError(f"model {m.table} ({m.path}) reads {r}: only raw.* and model tables are allowed")
    done: list[Model] = []
    state: dict[str, int] = {}

    def visit(name: str, stack: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise UserError("models reference each other in a cycle: " + " -> ".join(stack + [name]))
        state[name] = 1
        for r in sorted(models[name].refs):
            if r in models and r != name:
                visit(r, stack + [name])
        state[name] = 2
        done.append(models[name])

    for name in sorted(models):
        visit(name, [])
    return done


def sql_variables(settings: Settings) -> dict[str, object]:
    """Variables the models read with ``getvariable``: thresholds, plus the metrics signal map."""
    out: dict[str, object] = {f.name: getattr(settings.thresholds, f.name)
                              for f in dataclasses.fields(settings.thresholds)}
    try:
        signals = importlib.import_module("pipeline.signals")
    except ImportError:
        signals = None
    if signals is not None and hasattr(signals, "sql_variables"):
        out.update(signals.sql_variables(settings))
    return out


def set_variables(con: duckdb.DuckDBPyConnection, variables: dict[str, object]) -> None:
    for name, value in variables.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UserError(f"SQL variable name {name!r} is not an identifier")
        con.execute(f"SET VARIABLE {name} = ?", [value])


def raw_states(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Per raw table: row count, oldest and newest time, and rows dated after HORIZON.

    Raw tables only grow, and retention deletes their oldest rows, so an unchanged count, oldest and
    newest time mean the same rows; the rows beyond the horizon enter the models as the clock reaches
    them, and their count changes then. All from Parquet statistics: milliseconds at 38 M samples.
    """
    sql = " UNION ALL ".join(
        f"SELECT '{t}', count(*), min({c})::VARCHAR, max({c})::VARCHAR, "
        f"(SELECT count(*) FROM {t} WHERE {c} > {HORIZON}) FROM {t}" for t, c in RAW_TIME.items())
    return {r[0]: "|".join(str(v) for v in r[1:]) for r in con.execute(sql).fetchall()}


def source_state(con: duckdb.DuckDBPyConnection) -> str:
    """A fingerprint of the raw inputs: changes when anything lands in raw.* (or reaches the horizon)."""
    return ";".join(f"{t}={s}" for t, s in sorted(raw_states(con).items()))


def _existing(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """``schema.name`` -> TABLE or VIEW for every object in the lake (one catalog query, not one per model).

    From ``duckdb_columns()``, not ``duckdb_tables()``: that one sizes every DuckLake table, 0.1 to 0.5 s.
    """
    rows = con.execute(
        "SELECT DISTINCT schema_name || '.' || table_name, 'TABLE' FROM duckdb_columns() WHERE database_name = ? "
        "UNION ALL SELECT schema_name || '.' || view_name, 'VIEW' FROM duckdb_views() WHERE database_name = ?",
        [lake.ALIAS, lake.ALIAS]).fetchall()
    out: dict[str, str] = {}
    for name, kind in rows:
        out[name] = "VIEW" if kind == "VIEW" or out.get(name) == "VIEW" else kind
    return out


def definitions(settings: Settings, sql_dir: Path = SQL_DIR) -> str:
    """A hash of what the models compute with: every model's SQL and every variable (thresholds)."""
    h = hashlib.sha256()
    for path in sorted(sql_dir.glob("*/*.sql")):
        h.update(path.as_posix().encode() + b"\0" + path.read_bytes())
    h.update(json.dumps(sql_variables(settings), sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _stale(con: duckdb.DuckDBPyConnection, existing: dict[str, str], state: str, names: set[str]) -> bool:
    """Whether ``state`` differs from the last build's, or a model of ``names`` is missing."""
    if STATE_TABLE not in existing:
        return True
    row = con.execute(f"SELECT source_state FROM {STATE_TABLE} ORDER BY built_at DESC LIMIT 1").fetchone()
    return not row or row[0] != state or any(t not in existing for t in names)


def is_stale(settings: Settings, con: duckdb.DuckDBPyConnection | None = None, sql_dir: Path = SQL_DIR) -> bool:
    """True when raw inputs, a model's SQL or a threshold changed since the last build, or a model is missing."""
    own = con is None
    con = con or lake.connect(settings)
    try:
        names = {f"{layer}.{p.stem}" for layer in LAYERS for p in (sql_dir / layer).glob("*.sql")}
        return _stale(con, _existing(con), source_state(con) + "|" + definitions(settings, sql_dir), names)
    finally:
        if own:
            con.close()


def raw_inputs(plan: list[Model]) -> dict[str, list[str]]:
    """Per model, the raw tables it reads directly or through other models (a raw view: the tables under it;
    a raw table without a state in ``RAW_TIME`` stays as it is, and its readers are built every time)."""
    by_name = {m.table: m for m in plan}
    out: dict[str, list[str]] = {}
    for m in plan:  # dependency order: a model's inputs are known before its readers'
        raw: set[str] = set()
        for r in m.refs:
            if r in by_name:
                raw.update(out.get(r, ()))
            elif r.startswith("raw."):
                raw.update(RAW_VIEWS.get(r, (r,)))
        out[m.table] = sorted(raw)
    return out


def _replace(con: duckdb.DuckDBPyConnection, m: Model, kind: str, existing: dict[str, str]) -> None:
    """CREATE OR REPLACE the model as a TABLE or VIEW, dropping an object of the other kind first."""
    if existing.get(m.table, kind) != kind:
        con.execute(f"DROP {existing[m.table]} {m.table}")
    con.execute(f"CREATE OR REPLACE {kind} {m.table} AS {m.sql}")
    existing[m.table] = kind


def _input_high_water(con: duckdb.DuckDBPyConnection, m: Model, seen: dict[str, object]) -> object:
    """How far the model's input went at this build (its ``watermark_from`` column), else its own column.

    ``seen`` caches marks within one build: several models read up to the same column (the readers of
    stg_metric_signals up to its ``ts``, which is its own mark too), and a model is built before its
    readers and not touched after, so one scan of it answers them all.
    """
    key = m.watermark_from or f"{m.table}.{m.watermark}"
    if key not in seen:
        table, column = key.rsplit(".", 1)
        seen[key] = con.execute(f"SELECT max({column}) FROM {table}").fetchone()[0]
    return seen[key]


def _marks(con: duckdb.DuckDBPyConnection, existing: dict[str, str]) -> dict[str, tuple[object, str]]:
    """model -> (high-water mark, SQL hash) kept by the last build; the marks table is a cache, dropped
    (every incremental model then rebuilt) when its shape is old."""
    if WATERMARKS not in existing:
        return {}
    cur = con.execute(f"SELECT * FROM {WATERMARKS}")
    if "sql_hash" not in [d[0] for d in cur.description or ()]:
        con.execute(f"DROP TABLE {WATERMARKS}")
        del existing[WATERMARKS]
        return {}
    return {r[0]: (r[1], r[2]) for r in cur.fetchall()}


def _save(con: duckdb.DuckDBPyConnection, table: str, columns: str, rows: dict[str, tuple]) -> None:
    """Replace the rows of these models in a runner state table (one DELETE and one INSERT)."""
    if not rows:
        return
    con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
    names = list(rows)
    con.execute(f"DELETE FROM {table} WHERE model IN ({', '.join('?' * len(names))})", names)
    width = 1 + len(next(iter(rows.values())))
    row = "(" + ", ".join("?" * width) + ")"
    con.execute(f"INSERT INTO {table} VALUES {', '.join([row] * len(names))}",
                [v for n in names for v in (n, *rows[n])])


def _build_one(con: duckdb.DuckDBPyConnection, m: Model, full: bool, existing: dict[str, str],
               marks: dict[str, tuple[object, str]], seen: dict[str, object],
               new_marks: dict[str, tuple[object, str]]) -> bool:
    """Build one model; returns True when it was an incremental append."""
    if m.materialized == "view":
        _replace(con, m, "VIEW", existing)
        return False
    if m.materialized == "incremental":
        # The SQL's hash is kept with the mark: an edited model is rebuilt from scratch, not appended to.
        digest = hashlib.sha256(m.sql.encode()).hexdigest()[:16]
        old = marks.get(m.table)
        if not full and old and old[0] is not None and old[1] == digest and existing.get(m.table) == "TABLE":
            con.execute("SET VARIABLE watermark = ?::TIMESTAMPTZ - to_seconds(?)", [old[0], m.lookback_s])
            con.execute(f"DELETE FROM {m.table} WHERE {m.watermark} > getvariable('watermark')")
            con.execute(f"INSERT INTO {m.table} SELECT * FROM ({m.sql})")
            inc = True
        else:
            con.execute("SET VARIABLE watermark = '-infinity'::TIMESTAMPTZ")
            _replace(con, m, "TABLE", existing)
            inc = False
        if inc and not m.watermark_from:  # its own column's mark: only the rows just built can raise it
            seen[f"{m.table}.{m.watermark}"] = con.execute(
                f"SELECT greatest(max({m.watermark}), ?::TIMESTAMPTZ) FROM {m.table} "
                f"WHERE {m.watermark} > getvariable('watermark')", [old[0]]).fetchone()[0]
        new_marks[m.table] = (_input_high_water(con, m, seen), digest)
        return inc
    _replace(con, m, "TABLE", existing)
    return False


def needed_by(plan: list[Model], targets: tuple[str, ...]) -> set[str]:
    """The models ``targets`` read, directly or not, and the targets themselves."""
    by_name = {m.table: m for m in plan}
    out: set[str] = set()
    todo = [t for t in targets if t in by_name]
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo += [r for r in by_name[name].refs if r in by_name]
    return out


def build(settings: Settings, con: duckdb.DuckDBPyConnection | None = None, sql_dir: Path = SQL_DIR,
          full: bool = False, only_stale: bool = False, first: tuple[str, ...] = (),
          then: Callable[[duckdb.DuckDBPyConnection], object] | None = None) -> BuildStats:
    """Build the models in dependency order, in one transaction (readers see the old marts or the new).

    Only the models whose inputs changed are built (``_dirty``); ``full`` builds every model, and
    incremental ones from scratch. With ``only_stale`` nothing is built when raw inputs have not changed
    since the last build (what ``diagnose`` does). With ``first``, the models those tables need are built
    and committed first, ``then(con)`` is called (the live findings are published before the other marts
    are built: time to verdict), and the rest follows in a second transaction; the build counts as done
    (not stale) only when both committed.
    """
    own = con is None
    con = con or lake.connect(settings)
    try:
        plan = order(discover(sql_dir))
        set_variables(con, sql_variables(settings))
        defs = definitions(settings, sql_dir)
        inputs = raw_inputs(plan)
        head = needed_by(plan, first)
        parts = [[m for m in plan if m.table in head], [m for m in plan if m.table not in head]] if head else [plan]
        names = {m.table for m in plan} if only_stale else None
        stats = BuildStats()
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            # The state recorded is the one the first part saw: data landed in between is built next time.
            with lake.COMMIT_LOCK:  # landings in this process wait: see lake.COMMIT_LOCK
                s = lake.retry(lambda part=part, last=last, names=names: _build_all(
                    con, part, full, defs, inputs, last, stats.source_state or None, names,
                    frozenset(stats.per_model_s)), attempts=5)
            if s is None:  # only_stale, and nothing changed
                return stats
            names = None
            stats.source_state = stats.source_state or s.source_state
            stats.models += s.models
            stats.seconds += s.seconds
            stats.per_model_s.update(s.per_model_s)
            stats.incremental += s.incremental
            stats.skipped += s.skipped
            if not last and then is not None:
                then(con)
        if not head and then is not None:
            then(con)
        return stats
    finally:
        if own:
            con.close()


def _dirty(m: Model, full: bool, existing: dict[str, str], built: dict[str, str], state: str,
           rebuilt: set[str]) -> bool:
    """Whether ``m`` must be built: a model is kept as it is when none of its inputs changed since it was.

    Rebuilt: on ``full``; when its table (or view) is missing; when it reads the clock other than as the
    time-sanity HORIZON (``Model.clock``); when ``state`` (the SQL and variables of every model, and the
    state of each raw table it reads, directly or not: ``raw_states``) differs from the one recorded when
    it was last built; when a model it reads was built in this build. The caller passes ``full`` for a model
    reading a raw table without a state.
    """
    kind = "VIEW" if m.materialized == "view" else "TABLE"
    return (full or m.clock or existing.get(m.table) != kind or built.get(m.table) != state
            or not rebuilt.isdisjoint(m.refs))


def _build_all(con: duckdb.DuckDBPyConnection, plan: list[Model], full: bool, defs: str,
               inputs: dict[str, list[str]], record: bool = True, state: str | None = None,
               only_stale: set[str] | None = None, rebuilt_before: frozenset[str] = frozenset()) -> BuildStats | None:
    """One transaction: ``plan``'s models that are dirty, their marks and input states, and (``record``)
    the build's source state. None when ``only_stale`` (every model's name) and nothing is stale."""
    stats = BuildStats()
    t0 = time.perf_counter()
    con.execute("BEGIN TRANSACTION")
    try:
        raws = raw_states(con)
        state = state or ";".join(f"{t}={v}" for t, v in sorted(raws.items())) + "|" + defs
        stats.source_state = state
        existing = _existing(con)
        if only_stale is not None and not _stale(con, existing, state, only_stale):
            con.execute("ROLLBACK")
            return None
        marks = _marks(con, existing)
        built = dict(con.execute(f"SELECT model, state FROM {INPUTS}").fetchall()) if INPUTS in existing else {}
        rebuilt = set(rebuilt_before)
        seen: dict[str, object] = {}
        new_marks: dict[str, tuple[object, str]] = {}
        new_states: dict[str, tuple[str]] = {}
        for m in plan:
            m_state = defs + "|" + ";".join(f"{t}={raws.get(t)}" for t in inputs[m.table])
            if not _dirty(m, full or not raws.keys() >= set(inputs[m.table]), existing, built, m_state, rebuilt):
                stats.skipped.append(m.table)
                continue
            t = time.perf_counter()
            try:
                inc = _build_one(con, m, full, existing, marks, seen, new_marks)
            except duckdb.Error as e:
                if lake.is_conflict(e):
                    raise
                raise UserError(f"model {m.table} ({m.path}) failed: {str(e).splitlines()[0]}") from None
            stats.per_model_s[m.table] = time.perf_counter() - t
            rebuilt.add(m.table)
            new_states[m.table] = (m_state,)
            if inc:
                stats.incremental.append(m.table)
            stats.models += 1
            log.debug("built %s in %.2fs", m.table, stats.per_model_s[m.table])
        _save(con, WATERMARKS, "model VARCHAR, high_water TIMESTAMPTZ, sql_hash VARCHAR", new_marks)
        _save(con, INPUTS, "model VARCHAR, state VARCHAR", new_states)
        if record:
            con.execute(f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (built_at TIMESTAMPTZ, source_state VARCHAR, "
                        "models INTEGER, seconds DOUBLE)")
            con.execute(f"DELETE FROM {STATE_TABLE}")
            stats.seconds = time.perf_counter() - t0
            con.execute(f"INSERT INTO {STATE_TABLE} VALUES (now(), ?, ?, ?)", [state, stats.models, stats.seconds])
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    stats.seconds = time.perf_counter() - t0
    log.info("built %d models in %.1fs (%d unchanged)", stats.models, stats.seconds, len(stats.skipped))
    return stats


def run_assertions(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR) -> dict[str, int]:
    """Run every ``sql/tests/*.sql`` (a SELECT returning offending rows); the offending row count per file."""
    out: dict[str, int] = {}
    for path in sorted((sql_dir / "tests").glob("*.sql")):
        sql = path.read_text().strip().rstrip(";")
        out[path.stem] = con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
    return out
