"""The model runner: builds the plain-SQL models in ``sql/<layer>/<table>.sql`` into the lake.

Why a runner at all: the build order comes from the models' own references (parsed with
sqlglot), thresholds reach the SQL as DuckDB variables (``getvariable('name')``), heavy
models over append-only inputs are built incrementally, and ``diagnose`` needs to know
whether anything landed since the last build (staleness).

Header comments a model may carry (first lines of the file):
``-- materialized: table|view|incremental`` (default table) and, for incremental models,
``-- watermark: <column>``, optional ``-- watermark_from: <schema.table.column>`` (the input
column it reads up to) and ``-- lookback_s: <seconds>`` (at least that of any incremental model it reads,
``order``). An incremental model filters its input
with ``ts > getvariable('watermark')``; the runner sets that variable to the input's high-water
mark of the last build minus the lookback, deletes the model's rows after it and inserts the
fresh ones, so one more minute of data never rebuilds the whole day. ``-- late_from: <schema.table.column>`` (a
table with ``kafka_partition`` / ``kafka_offset``) starts that window earlier when rows landed since the last build
are older (``_landed``), and a model over incremental ones starts where they were rebuilt. An incremental model with
``-- unique_key: <column>`` instead of a watermark only ever appends rows of new keys: it reads itself
(``WHERE key NOT IN (SELECT key FROM <itself>)``), and a from-scratch build starts it empty. A whole build
is one transaction. See docs/models.md.
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
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from gangscope.config import Settings
from gangscope.errors import UserError
from gangscope.rootcauses import ROOT_CAUSES
from pipeline import lake

log = logging.getLogger(__name__)
logging.getLogger("sqlglot").setLevel(logging.WARNING)  # it logs every dialect quirk at INFO

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"
LAYERS = ("staging", "intermediate", "marts")
SOURCE_SCHEMAS = ("raw",)
STATE_TABLE = "staging._model_builds"
_HEADER = re.compile(r"^--\s*(materialized|watermark|watermark_from|lookback_s|unique_key|late_from)\s*:\s*(\S+)\s*$",
                     re.M)
WATERMARKS = "staging._model_watermarks"


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
    unique_key: str | None = None  # an incremental model that appends rows of new keys only
    # schema.table.column of a table with kafka_partition / kafka_offset whose rows landed since the last build may
    # be older than the watermark (a partition that lagged the others): the window reaches back to the oldest.
    late_from: str | None = None

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
    kept: list[str] = field(default_factory=list)  # table models left as they were: nothing they read changed
    rebuilt_from: dict[str, Any] = field(default_factory=dict)  # incremental model -> when its rebuilt rows start
    source_state: str = ""  # what the raw inputs were when the build began (is_stale compares it)


_REFS: dict[str, frozenset[str]] = {}  # SQL text -> its refs: sqlglot took ~0.7 s of every live build


def _refs(sql: str, path: Path) -> set[str]:
    """Every ``schema.table`` this SELECT reads (CTE names excluded); parsed once per process and text."""
    if sql not in _REFS:
        _REFS[sql] = frozenset(_parse_refs(sql, path))
    return set(_REFS[sql])


def _parse_refs(sql: str, path: Path) -> set[str]:
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
            if mat == "incremental" and ("watermark" in header) == ("unique_key" in header):
                raise UserError(f"model {path}: incremental models need one '-- watermark: <column>' or "
                                "'-- unique_key: <column>' line")
            body = sql.strip().rstrip(";")
            m = Model(layer, path.stem, path, body, mat, header.get("watermark"), header.get("watermark_from"),
                      float(header.get("lookback_s", 0)), _refs(body, path), header.get("unique_key"),
                      header.get("late_from"))
            models[m.table] = m
    return models


def order(models: dict[str, Model]) -> list[Model]:
    """Models sorted so that each comes after the models it reads; cycles and unknown refs are errors. Raises
    an incremental model's lookback to the largest of the incremental models upstream of it."""
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
    # An incremental model reads back at least as far as any model it reads (directly or through tables) was
    # rebuilt: a sample landing 1-5 min late reached staging.stg_metric_signals (300 s) but not the models over
    # it (60-120 s) until a full build, so an incremental build differed from a full one.
    reach: dict[str, float] = {}
    for m in done:
        up = max((reach[r] for r in m.refs if r in reach), default=0.0)
        if m.materialized == "incremental" and m.watermark:
            m.lookback_s = max(m.lookback_s, up)
            up = m.lookback_s
        reach[m.table] = up
    return done


def sql_variables(settings: Settings) -> dict[str, object]:
    """Variables the models read with ``getvariable``: thresholds, the root-cause classes in precedence order
    (``root_causes``), plus the metrics signal map."""
    out: dict[str, object] = {f.name: getattr(settings.thresholds, f.name)
                              for f in dataclasses.fields(settings.thresholds)}
    out["root_causes"] = list(ROOT_CAUSES)
    try:
        signals = importlib.import_module("pipeline.signals")
    except ImportError:
        signals = None
    if signals is not None and hasattr(signals, "sql_variables"):
        out.update(signals.sql_variables(settings))
    return out


def set_variables(con: duckdb.DuckDBPyConnection, variables: dict[str, object]) -> None:
    """SET VARIABLE each one. A list (the signal map, ~50 structs) is set only when the connection does not hold it
    already, told by a fingerprint kept beside it: DuckDB's conversion of a Python list tries to import pandas for
    every value (~760 failed imports, 0.07-0.16 s of each scheduled build, issue 37)."""
    for name, value in variables.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UserError(f"SQL variable name {name!r} is not an identifier")
        if not isinstance(value, list):
            con.execute(f"SET VARIABLE {name} = ?", [value])
            continue
        fp = hashlib.sha256(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()
        if con.execute("SELECT getvariable(?)", [f"{name}__fingerprint"]).fetchone()[0] != fp:
            con.execute(f"SET VARIABLE {name} = ?", [value])
            con.execute(f"SET VARIABLE {name}__fingerprint = ?", [fp])


def source_state(con: duckdb.DuckDBPyConnection) -> str:
    """A fingerprint of the raw inputs: changes when anything lands in raw.*."""
    row = con.execute(
        "SELECT (SELECT count(*) FROM raw.k8s_objects), (SELECT max(observed_at) FROM raw.k8s_objects),"
        " (SELECT count(*) FROM raw.metric_points), (SELECT max(ts) FROM raw.metric_points),"
        " (SELECT count(*) FROM raw.scrapes)"
    ).fetchone()
    return "|".join(str(v) for v in row or ())


# The raw inputs in two sources, and the fields of ``source_state`` that fingerprint each (in its order): a model
# that reads only sources with nothing new since the last recorded build, under the same definitions, is kept.
SOURCES = {"raw.k8s_objects": "k8s", "raw.metric_points": "metrics", "raw.metric_series": "metrics",
           "raw.scrapes": "metrics"}
_STATE_FIELDS = {"k8s": (0, 1), "metrics": (2, 3, 4)}


def _quiet_sources(before: str | None, now: str) -> set[str] | None:
    """The sources in which nothing landed between the recorded state ``before`` and ``now`` (both ``source_state``
    + "|" + definitions); None (nothing is kept, not even a model that reads no source) when the definitions
    differ, no build was recorded or a state is not of this shape."""
    if before is None:
        return None
    old, new = before.split("|"), now.split("|")
    width = 1 + max(i for fields in _STATE_FIELDS.values() for i in fields)
    if len(old) != len(new) or len(new) != width + 1 or old[-1] != new[-1]:
        return None
    return {src for src, fields in _STATE_FIELDS.items() if all(old[i] == new[i] for i in fields)}


def sources_of(plan: list[Model]) -> dict[str, frozenset[str]]:
    """model -> the raw sources it reads, directly or through other models (``plan`` in build order); a raw table
    outside ``SOURCES`` counts as one that always changes (``"?"``), so its readers are never kept."""
    out: dict[str, frozenset[str]] = {}
    for m in plan:
        src: set[str] = set()
        for r in m.refs - {m.table}:
            src |= out[r] if r in out else {SOURCES.get(r, "?")}
        out[m.table] = frozenset(src)
    return out


def _existing(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """``schema.name`` -> TABLE or VIEW for every object in the lake, from DuckLake's own catalog tables (one query,
    not one per model). ``duckdb_tables()`` sizes every table from its files first: 0.1-0.4 s of each scheduled
    build at 128 nodes, for names only. It stays the fallback should a DuckLake release rename its catalog."""
    meta = f"__ducklake_metadata_{lake.ALIAS}"
    live = "end_snapshot IS NULL"
    try:
        rows = con.execute(
            f"SELECT s.schema_name || '.' || o.name, o.kind FROM (SELECT schema_id, table_name AS name, "
            f"'TABLE' AS kind FROM {meta}.ducklake_table WHERE {live} UNION ALL SELECT schema_id, view_name, 'VIEW' "
            f"FROM {meta}.ducklake_view WHERE {live}) o JOIN {meta}.ducklake_schema s USING (schema_id) "
            f"WHERE s.{live}").fetchall()
    except duckdb.CatalogException:
        rows = con.execute(
            "SELECT schema_name || '.' || table_name, 'TABLE' FROM duckdb_tables() WHERE database_name = ? "
            "UNION ALL SELECT schema_name || '.' || view_name, 'VIEW' FROM duckdb_views() WHERE database_name = ?",
            [lake.ALIAS, lake.ALIAS]).fetchall()
    return dict(rows)


def definitions(settings: Settings, sql_dir: Path = SQL_DIR) -> str:
    """A hash of what the models compute with: every model's SQL and every variable (thresholds)."""
    h = hashlib.sha256()
    for path in sorted(sql_dir.glob("*/*.sql")):
        h.update(path.as_posix().encode() + b"\0" + path.read_bytes())
    h.update(json.dumps(sql_variables(settings), sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def is_stale(settings: Settings, con: duckdb.DuckDBPyConnection | None = None, sql_dir: Path = SQL_DIR) -> bool:
    """True when raw inputs, a model's SQL or a threshold changed since the last build, or a model is missing."""
    own = con is None
    con = con or lake.connect(settings)
    try:
        return _staleness(con, definitions(settings, sql_dir), sql_dir)[0]
    finally:
        if own:
            con.close()


def _staleness(con: duckdb.DuckDBPyConnection, defs: str, sql_dir: Path) -> tuple[bool, str, dict[str, str]]:
    """(stale, the state a build now records, the lake's objects): a build reuses the last two rather than
    read them again (the catalog listing alone was 0.1-0.3 s of every live build)."""
    existing = _existing(con)
    state = source_state(con) + "|" + defs
    if _recorded(con, existing) != state:
        return True, state, existing
    names = {f"{layer}.{p.stem}" for layer in LAYERS for p in (sql_dir / layer).glob("*.sql")}
    return any(t not in existing for t in names), state, existing


def _replace(con: duckdb.DuckDBPyConnection, m: Model, kind: str, existing: dict[str, str]) -> None:
    """CREATE OR REPLACE the model as a TABLE or VIEW, dropping an object of the other kind first."""
    if existing.get(m.table, kind) != kind:
        con.execute(f"DROP {existing[m.table]} {m.table}")
    con.execute(f"CREATE OR REPLACE {kind} {m.table} AS {m.sql}")
    existing[m.table] = kind


def _input_high_water(con: duckdb.DuckDBPyConnection, m: Model, seen: dict[str, object]) -> object:
    """How far the model's input went at this build (its ``watermark_from`` column), else its own column.

    ``seen`` caches input marks within one build: several models read up to the same input column, and
    an input is built before its readers and not touched after, so one scan of it answers them all. Only
    rows from the build's watermark on are read (the files before it are skipped by their statistics): the
    newest row is among them unless nothing is, and then the whole column is read.
    """
    column = m.watermark_from or f"{m.table}.{m.watermark}"
    if column not in seen:
        table, col = column.rsplit(".", 1)
        seen[column] = con.execute(f"SELECT max({col}) FROM {table} WHERE {col} >= getvariable('watermark')"
                                   ).fetchone()[0]
        if seen[column] is None:
            seen[column] = con.execute(f"SELECT max({col}) FROM {table}").fetchone()[0]
    return seen[column]


def _marks(con: duckdb.DuckDBPyConnection, existing: dict[str, str]) -> dict[str, tuple[Any, ...]]:
    """model -> (high-water mark, SQL hash, landed offsets) kept by earlier builds, read once per build (it was six
    catalog statements per incremental model); the marks table is a cache, dropped when its shape is old (every
    incremental model is then rebuilt)."""
    if WATERMARKS not in existing:
        return {}
    cur = con.execute(f"SELECT * FROM {WATERMARKS}")
    cols = [d[0] for d in cur.description or ()]
    rows = cur.fetchall()
    if "sql_hash" not in cols:
        con.execute(f"DROP TABLE {WATERMARKS}")
        del existing[WATERMARKS]
        return {}
    if "landed" not in cols:  # before late_from: rebuilt once, then kept
        con.execute(f"DROP TABLE {WATERMARKS}")
        del existing[WATERMARKS]
        return {}
    model, mark, digest, landed = (cols.index(c) for c in ("model", "high_water", "sql_hash", "landed"))
    return {r[model]: (r[mark], r[digest], r[landed]) for r in rows}


def _save_marks(con: duckdb.DuckDBPyConnection, marks: dict[str, tuple[Any, ...]]) -> None:
    """Replace the marks of the models just built: one DELETE and one INSERT per build."""
    if not marks:
        return
    con.execute(f"CREATE TABLE IF NOT EXISTS {WATERMARKS} (model VARCHAR, high_water TIMESTAMPTZ, sql_hash VARCHAR, "
                "landed VARCHAR)")
    names = list(marks)
    con.execute(f"DELETE FROM {WATERMARKS} WHERE model IN ({', '.join('?' * len(names))})", names)
    con.execute(f"INSERT INTO {WATERMARKS} VALUES {', '.join(['(?, ?::TIMESTAMPTZ, ?, ?)'] * len(names))}",
                [v for n in names for v in (n, *(tuple(marks[n]) + (None,))[:3])])


def _landed(con: duckdb.DuckDBPyConnection, m: Model, before: str | None) -> tuple[Any, str | None]:
    """(the oldest ``late_from`` time among the rows landed since ``before``, the landed offsets to keep): rows are
    told new by their Kafka offset per partition, not by time, so a partition that landed minutes after the others
    (a restart's backlog) is modelled, not left behind the watermark. ``before`` None: every row counts. Rows whose
    time is NULL are not looked at (``raw.scrapes.first_sample_at``: a scrape without samples, or landed before the
    column existed)."""
    if not m.late_from:
        return None, None
    table, col = m.late_from.rsplit(".", 1)
    prev = {int(k): int(v) for k, v in json.loads(before or "{}").items()}
    known = " ".join(f"WHEN {p} THEN {o}" for p, o in prev.items())
    seen = f"CASE kafka_partition {known} ELSE -1 END" if known else "-1"
    rows = con.execute(f"""
        SELECT kafka_partition, max(kafka_offset), min({col}) FILTER (WHERE kafka_offset > {seen})
        FROM {table}
        WHERE kafka_offset > {min(prev.values(), default=-1)}
           OR kafka_partition NOT IN ({", ".join(map(str, prev)) or "NULL"})
        GROUP BY ALL""").fetchall()
    late = min((r[2] for r in rows if r[2] is not None), default=None)
    now = {**prev, **{int(r[0]): int(r[1]) for r in rows if r[0] is not None and r[1] is not None}}
    return late, json.dumps({str(k): v for k, v in sorted(now.items())})


def _build_keyed(con: duckdb.DuckDBPyConnection, m: Model, full: bool, existing: dict[str, str],
                 marks: dict[str, tuple[Any, ...]], new_marks: dict[str, tuple[Any, ...]],
                 variables: str) -> bool:
    """An incremental model with a ``unique_key``: append the rows of keys it has not got. Its hash covers the
    variables too (rows are never recomputed, so a changed signal map or threshold must start it over)."""
    digest = hashlib.sha256((m.sql + "\0" + variables).encode()).hexdigest()[:16]
    old = marks.get(m.table)
    inc = not full and old is not None and old[1] == digest and existing.get(m.table) == "TABLE"
    if inc:
        con.execute(f"INSERT INTO {m.table} SELECT * FROM ({m.sql})")
    else:
        # Empty first (the model reads its own keys; an empty table has no files to read while replaced).
        if existing.get(m.table, "TABLE") != "TABLE":
            con.execute(f"DROP {existing[m.table]} {m.table}")
        con.execute(f"CREATE OR REPLACE TABLE {m.table} AS SELECT NULL AS {m.unique_key} WHERE false")
        con.execute(f"CREATE OR REPLACE TABLE {m.table} AS {m.sql}")
        existing[m.table] = "TABLE"
    new_marks[m.table] = (None, digest)
    return inc


def _build_one(con: duckdb.DuckDBPyConnection, m: Model, full: bool, existing: dict[str, str],
               seen: dict[str, object], marks: dict[str, tuple[Any, ...]],
               new_marks: dict[str, tuple[Any, ...]], variables: str = "",
               rebuilt: dict[str, Any] | None = None, defs: str = "") -> bool:
    """Build one model; returns True when it was an incremental append. An incremental model's new mark
    goes to ``new_marks`` (saved with the build); ``rebuilt`` gets, per incremental model built, the time from
    which its rows were rewritten (its readers rewrite theirs from there too)."""
    if m.materialized == "view":
        # Made again only when a definition changed: DuckDB binds a view's columns when it is made, so the hash
        # covers every model's SQL and the variables, not this one's alone. A view made each build cost a catalog
        # write and its share of the commit at every build.
        digest = hashlib.sha256((defs + "\0" + m.table).encode()).hexdigest()[:16]
        old = marks.get(m.table)
        if full or old is None or old[1] != digest or existing.get(m.table) != "VIEW":
            _replace(con, m, "VIEW", existing)
            new_marks[m.table] = (None, digest)
        return False
    if m.materialized == "incremental" and m.unique_key:
        return _build_keyed(con, m, full, existing, marks, new_marks, variables)
    if m.materialized == "incremental":
        rebuilt = {} if rebuilt is None else rebuilt
        # The SQL's hash is kept with the mark: an edited model is rebuilt from scratch, not appended to.
        digest = hashlib.sha256(m.sql.encode()).hexdigest()[:16]
        old = marks.get(m.table)
        inc = bool(not full and old and old[0] is not None and old[1] == digest and existing.get(m.table) == "TABLE")
        late, landed = _landed(con, m, old[2] if inc and old else None)
        if inc and old:
            # From the last high-water mark less the lookback, or earlier: a hair before the oldest time among the
            # rows landed since the last build (late ones; the window keeps rows after the watermark), or where an
            # upstream model rewrote its rows, less the lookback too (a time bucket that holds that moment starts
            # before it, and the lookback covers a bucket).
            upstream = min((rebuilt[r] for r in m.refs if r in rebuilt), default=None)
            con.execute("SET VARIABLE watermark = least(?::TIMESTAMPTZ - to_seconds(?), "
                        "coalesce(?::TIMESTAMPTZ - INTERVAL 1 MICROSECOND, 'infinity'::TIMESTAMPTZ), "
                        "coalesce(?::TIMESTAMPTZ - to_seconds(?), 'infinity'::TIMESTAMPTZ))",
                        [old[0], m.lookback_s, late, upstream, m.lookback_s])
            con.execute(f"DELETE FROM {m.table} WHERE {m.watermark} > getvariable('watermark')")
            con.execute(f"INSERT INTO {m.table} SELECT * FROM ({m.sql})")
        else:
            con.execute("SET VARIABLE watermark = '-infinity'::TIMESTAMPTZ")
            _replace(con, m, "TABLE", existing)
        rebuilt[m.table] = con.execute("SELECT getvariable('watermark')").fetchone()[0]
        new_marks[m.table] = (_input_high_water(con, m, seen), digest, landed)
        return inc
    _replace(con, m, "TABLE", existing)
    return False


def build_one(con: duckdb.DuckDBPyConnection, table: str, sql_dir: Path = SQL_DIR) -> None:
    """Build one model from scratch, its inputs already in the lake: for checking one model's SQL alone."""
    _build_one(con, discover(sql_dir)[table], True, _existing(con), {}, {}, {})


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
          then: Callable[[duckdb.DuckDBPyConnection], object] | None = None, rest: bool = True) -> BuildStats:
    """Build every model in dependency order, in one transaction (readers see the old marts or the new).

    ``full`` rebuilds incremental models from scratch. With ``only_stale`` nothing is built when raw
    inputs have not changed since the last build (what ``diagnose`` does). With ``first``, the models
    those tables need are built and committed first, ``then(con)`` is called (the live findings are published
    before the other marts are built: time to verdict), and the rest follows in a second transaction; the
    build counts as done (not stale) only when both committed. ``rest=False`` (with ``first``) leaves the rest
    out: the build stays stale, so the next full one (``diagnose``, a report, a later scheduled build) does it.
    """
    own = con is None
    con = con or lake.connect(settings)
    try:
        plan = order(discover(sql_dir))
        defs = definitions(settings, sql_dir)
        # Read before the commit lock: what lands in between is in this build but not in the state it
        # records, so the next build runs once more (never the other way round).
        known: dict[str, Any] = {}
        if only_stale:
            stale, known["state"], known["existing"] = _staleness(con, defs, sql_dir)
            if not stale:
                return BuildStats()
        variables = sql_variables(settings)
        set_variables(con, variables)
        var_text = json.dumps(variables, sort_keys=True, default=str)
        head = needed_by(plan, first)
        parts = [[m for m in plan if m.table in head], [m for m in plan if m.table not in head]] if head else [plan]
        if head and not rest:
            parts = parts[:1] + [[]]  # an empty last part: nothing built, nothing recorded
        stats = BuildStats()
        rebuilt: dict[str, Any] = {}
        sources = sources_of(plan)
        changed: set[str] = set()  # models whose rows may differ from the last build's, shared by the parts
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if not part:
                continue
            # The state recorded is the one the first part saw: data landed in between is built next time.
            with lake.COMMIT_LOCK:  # landings in this process wait: see lake.COMMIT_LOCK
                s = lake.retry(lambda part=part, last=last: _build_all(
                    con, part, full, defs, last, stats.source_state or known.get("state"),
                    known.pop("existing", None), var_text, rebuilt, sources, changed),
                    attempts=5)  # a retry lists again
            stats.source_state = stats.source_state or s.source_state
            stats.models += s.models
            stats.seconds += s.seconds
            stats.per_model_s.update(s.per_model_s)
            stats.incremental += s.incremental
            stats.kept += s.kept
            stats.rebuilt_from.update(rebuilt)
            if not last and then is not None:
                then(con)
        if not head and then is not None:
            then(con)
        return stats
    finally:
        if own:
            con.close()


def _build_all(con: duckdb.DuckDBPyConnection, plan: list[Model], full: bool, defs: str,
               record: bool = True, state: str | None = None, existing: dict[str, str] | None = None,
               variables: str = "", rebuilt: dict[str, Any] | None = None,
               sources: dict[str, frozenset[str]] | None = None, changed: set[str] | None = None) -> BuildStats:
    stats = BuildStats()
    t0 = time.perf_counter()
    con.execute("BEGIN TRANSACTION")
    try:
        state = state or source_state(con) + "|" + defs
        stats.source_state = state
        existing = dict(existing) if existing is not None else _existing(con)
        seen: dict[str, object] = {}
        marks = _marks(con, existing)
        new_marks: dict[str, tuple[Any, ...]] = {}
        rebuilt = {} if rebuilt is None else rebuilt  # shared by a build's parts
        changed = set() if changed is None else changed
        quiet = None if full or sources is None else _quiet_sources(_recorded(con, existing), state)
        for m in plan:
            # Nothing it reads, raw or model, changed since the last recorded build: a table model is kept as it
            # is (a scheduled build with only new samples left the Kubernetes models alone), other kinds run but
            # count as unchanged for the models over them.
            unchanged = (quiet is not None and sources is not None and sources[m.table] <= quiet
                         and not (m.refs & changed) and m.table in existing)
            if unchanged and m.materialized == "table" and existing[m.table] == "TABLE":
                stats.kept.append(m.table)
                continue
            if not unchanged:
                changed.add(m.table)
            t = time.perf_counter()
            try:
                inc = _build_one(con, m, full, existing, seen, marks, new_marks, variables, rebuilt, defs)
            except duckdb.Error as e:
                if lake.is_conflict(e) or lake.is_unavailable(e):  # not the model's fault: said as it is
                    raise
                raise UserError(f"model {m.table} ({m.path}) failed: {str(e).splitlines()[0]}") from None
            stats.per_model_s[m.table] = time.perf_counter() - t
            if inc:
                stats.incremental.append(m.table)
            stats.models += 1
            log.debug("built %s in %.2fs", m.table, stats.per_model_s[m.table])
        _save_marks(con, new_marks)
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
    log.info("built %d models in %.1fs%s", stats.models, stats.seconds,
             f" ({len(stats.kept)} kept: nothing they read changed)" if stats.kept else "")
    return stats


def _recorded(con: duckdb.DuckDBPyConnection, existing: dict[str, str]) -> str | None:
    """The source state the last recorded build saw (with the definitions), if any."""
    if STATE_TABLE not in existing:
        return None
    row = con.execute(f"SELECT source_state FROM {STATE_TABLE} ORDER BY built_at DESC LIMIT 1").fetchone()
    return row[0] if row else None


def run_assertions(con: duckdb.DuckDBPyConnection, sql_dir: Path = SQL_DIR) -> dict[str, int]:
    """Run every ``sql/tests/*.sql`` (a SELECT returning offending rows); the offending row count per file."""
    out: dict[str, int] = {}
    set_variables(con, {"root_causes": list(ROOT_CAUSES)})  # the accepted classes, whoever built the models
    for path in sorted((sql_dir / "tests").glob("*.sql")):
        sql = path.read_text().strip().rstrip(";")
        out[path.stem] = con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
    return out
