"""Bulk decoding of Kafka record values into lake rows, with Polars.

A whole micro-batch is parsed at once: the values are joined into one NDJSON buffer and
read with an explicit schema (scrape batches by DuckDB's reader, watch events by Polars'), so
the hot path never calls ``json.loads`` per record.
Only when the bulk read fails (some record is not valid JSON, or a field has the wrong
type) are the records checked one by one to find the culprits, which become dead
letters with the parser's message; the rest are read in bulk again.

Scrape records are columnar (see docs/records.md): samples are exploded together, and
each sample finds its series' metric (and through it its label set and node) by a gather
on a flat index (offset of its record + its ``s``) rather than a join. Samples leave as
(ts, series id, value) plus one row per distinct series of the batch (``series_ids``).
"""

from __future__ import annotations

import io
import json
import logging
import tempfile
import threading
from dataclasses import dataclass, field

import duckdb
import numpy as np
import polars as pl

from gangscope.records import K8S, K8S_TYPES, RELIST_BEGIN, RELIST_END, SCRAPE, VERSION

# (index in the input, reason)
Dead = tuple[int, str]

_META = pl.Struct({"namespace": pl.String, "name": pl.String, "uid": pl.String, "resourceVersion": pl.String})
K8S_SCHEMA: dict[str, pl.DataType] = {
    "v": pl.Int64(), "kind": pl.String(), "cluster": pl.String(), "type": pl.String(),
    "observed_at": pl.String(),
    "object": pl.Struct({"apiVersion": pl.String, "kind": pl.String, "metadata": _META}),
    "api_version": pl.String(), "resource_kind": pl.String(), "resource_version": pl.String(),
    "namespace": pl.String(), "sent": pl.Int64(), "rejected": pl.String(),
}
SCRAPE_SCHEMA: dict[str, pl.DataType] = {
    "v": pl.Int64(), "kind": pl.String(), "cluster": pl.String(), "target": pl.String(), "job": pl.String(),
    "instance": pl.String(), "scraped_at": pl.Int64(), "up": pl.Int64(), "duration_s": pl.Float64(),
    "error": pl.String(),
    "mn": pl.List(pl.String), "mc": pl.List(pl.Int64), "ls": pl.List(pl.String), "lr": pl.List(pl.Int64),
    "n": pl.List(pl.String), "s": pl.List(pl.Int64), "dt": pl.List(pl.Int64), "x": pl.List(pl.Float64),
    "ni": pl.List(pl.Int64), "nv": pl.List(pl.String), "rejected": pl.String(),
}
log = logging.getLogger(__name__)
_NONFINITE = {"NaN": float("nan"), "+Inf": float("inf"), "-Inf": float("-inf")}
_TS = pl.Datetime("ms", "UTC")


@dataclass
class Decoded:
    """Rows for one table kind plus the inputs that could not be decoded."""

    rows: pl.DataFrame  # watch events, or scrape samples as (ts, series, value)
    dead: list[Dead] = field(default_factory=list)
    scrapes: pl.DataFrame | None = None  # scrape batches only: one row per scrape
    series: pl.DataFrame | None = None  # scrape batches only: one row per series id in the batch


def _duckdb_type(t: pl.DataType) -> str:
    if isinstance(t, pl.List):
        return _duckdb_type(t.inner) + "[]"
    return {pl.String: "VARCHAR", pl.Int64: "BIGINT", pl.Float64: "DOUBLE"}[t.base_type()]


_SCRAPE_COLUMNS = {name: _duckdb_type(t) for name, t in SCRAPE_SCHEMA.items()}
_local = threading.local()  # each decoder thread's own DuckDB connection
_no_temp_files: list[str] = []  # why DuckDB's reader is off in this process, once it is


def _read_duckdb(buf: bytes) -> pl.DataFrame | None:
    """A scrape batch read with DuckDB's NDJSON reader: ~40 % less decoding CPU than with Polars' reader, whose
    cost is mostly per JSON list (ten per record); docs/lake.md "Throughput". DuckDB reads files only, so
    the batch goes through a temporary file (deleted at once); None when there is no writable temporary
    folder (``TMPDIR``), and Polars reads instead. It converts what it can (``"2"`` to 2, ``true`` to 1); what
    it cannot raises ``duckdb.Error`` and the batch is checked record by record."""
    if _no_temp_files:
        return None
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = duckdb.connect(config={"threads": 1, "memory_limit": "256MB"})
    try:
        with tempfile.NamedTemporaryFile(prefix="gangscope-batch-", suffix=".ndjson") as f:
            f.write(buf)
            f.flush()
            table = con.read_json(f.name, format="newline_delimited", columns=_SCRAPE_COLUMNS).to_arrow_table()
    except OSError as e:
        _no_temp_files.append(str(e))
        log.warning("no temporary file for DuckDB's NDJSON reader (%s); decoding with Polars' reader", e)
        return None
    return pl.DataFrame(table)


def _read(values: list[bytes], schema: dict[str, pl.DataType]) -> tuple[pl.DataFrame, list[int], list[Dead]]:
    """NDJSON-read ``values``; returns the frame, the input index of each row, and dead letters."""
    dead: list[Dead] = []
    idx = list(range(len(values)))
    buf = b"\n".join(values)
    if buf.count(b"\n") == len(values) - 1 and all(values):
        try:
            df = _read_duckdb(buf) if schema is SCRAPE_SCHEMA else None
            return (pl.read_ndjson(io.BytesIO(buf), schema=schema) if df is None else df), idx, dead
        except (pl.exceptions.PolarsError, ValueError, duckdb.Error):
            pass
    # Slow path, only when something is wrong: find the bad records, read the rest in bulk.
    good: list[bytes] = []
    idx = []
    for i, v in enumerate(values):
        reason = None
        if not v or not v.strip():
            reason = "empty record"
        else:
            try:
                obj = json.loads(v)
            except (ValueError, UnicodeDecodeError) as e:
                reason = f"malformed JSON: {e}"
            else:
                if not isinstance(obj, dict):
                    reason = f"malformed record: expected a JSON object, got {type(obj).__name__}"
                else:
                    v = json.dumps(obj, separators=(",", ":")).encode()  # one line
                    try:
                        pl.read_ndjson(io.BytesIO(v), schema=schema)
                    except (pl.exceptions.PolarsError, ValueError) as e:
                        reason = f"malformed record: {str(e).splitlines()[0]}"
        if reason:
            dead.append((i, reason))
        else:
            good.append(v)
            idx.append(i)
    if not good:
        return pl.DataFrame(schema=schema), idx, dead
    return pl.read_ndjson(io.BytesIO(b"\n".join(good)), schema=schema), idx, dead


def _envelope_reason(kind: str) -> pl.Expr:
    """Why a record's envelope is unacceptable, or null."""
    return (
        pl.when(pl.col("rejected").is_not_null()).then(pl.format("refused at the edge: {}", pl.col("rejected")))
        .when(pl.col("v").is_null()).then(pl.lit("missing envelope version 'v'"))
        .when(pl.col("v") != VERSION)
        .then(pl.format("unsupported envelope version v={} (this pipeline reads v={})", pl.col("v"), pl.lit(VERSION)))
        .when(pl.col("kind").is_null() | (pl.col("kind") != kind))
        .then(pl.format("unknown record kind '{}' on a {} topic", pl.col("kind").fill_null("null"), pl.lit(kind)))
        .otherwise(None)
    )


def _split(df: pl.DataFrame, idx: list[int], reason: pl.Expr, dead: list[Dead]) -> pl.DataFrame:
    df = df.with_columns(_i=pl.Series(idx, dtype=pl.Int64), _why=reason)
    if df["_why"].null_count() == df.height:  # the common case: nothing to refuse, nothing to copy
        return df.drop("_why")
    bad = df.filter(pl.col("_why").is_not_null())
    dead.extend(zip(bad["_i"].to_list(), bad["_why"].to_list(), strict=True))
    return df.filter(pl.col("_why").is_null()).drop("_why")


def decode_k8s(values: list[bytes]) -> Decoded:
    """Watch events -> rows of ``raw.k8s_objects`` (plus ``_i``, the input index)."""
    df, idx, dead = _read(values, K8S_SCHEMA)
    if df.height:
        # The object's exact JSON text (the schema read above keeps only its identity fields).
        text = pl.Series([values[i] for i in idx], dtype=pl.Binary).cast(pl.String)
        df = df.with_columns(object_json=text.str.json_path_match("$.object"),
                             observed=pl.col("observed_at").str.to_datetime(time_zone="UTC", strict=False))
    else:
        df = df.with_columns(object_json=pl.lit(None, pl.String), observed=pl.lit(None, pl.Datetime("us", "UTC")))
    marker = pl.col("type").is_in([RELIST_BEGIN, RELIST_END])
    reason = (
        pl.when(_envelope_reason(K8S).is_not_null()).then(_envelope_reason(K8S))
        .when(~pl.col("type").is_in(list(K8S_TYPES)))
        .then(pl.format("unknown watch event type '{}'", pl.col("type").fill_null("null")))
        .when(pl.col("observed").is_null())
        .then(pl.format("bad observed_at '{}' (expected RFC 3339)", pl.col("observed_at").fill_null("null")))
        .when(~marker & pl.col("object_json").is_null()).then(pl.lit("watch event without an object"))
        .when(marker & (pl.col("api_version").is_null() | pl.col("resource_kind").is_null()))
        .then(pl.lit("relist marker without api_version/resource_kind"))
        .otherwise(None)
    )
    df = _split(df, idx, reason, dead)
    meta = pl.col("object").struct.field("metadata")
    rows = df.select(
        cluster=pl.col("cluster"),
        observed_at=pl.col("observed"),
        event_type=pl.col("type"),
        api_version=pl.coalesce(pl.col("object").struct.field("apiVersion"), pl.col("api_version")),
        kind=pl.coalesce(pl.col("object").struct.field("kind"), pl.col("resource_kind")),
        namespace=pl.coalesce(meta.struct.field("namespace"), pl.col("namespace")),
        name=meta.struct.field("name"),
        uid=meta.struct.field("uid"),
        resource_version=pl.coalesce(meta.struct.field("resourceVersion"), pl.col("resource_version")),
        # A marker has no object; RELIST_END's count of sent events lands in its place, as {"sent": N}.
        object=pl.coalesce(pl.col("object_json"), pl.format('{{"sent":{}}}', pl.col("sent"))),
        _i=pl.col("_i"),
    )
    return Decoded(rows, dead)


def _has_bad_label_set(df: pl.DataFrame) -> pl.Expr:
    """Whether a record carries a label set that is not a JSON object.

    Each distinct label set of the batch is parsed once (a 2,000-record dcgm batch has 16,000 label
    sets but only a few hundred distinct ones): checking every one per record took 20% of decoding.
    """
    sets = df.get_column("ls").explode().drop_nulls().unique()
    bad = sets.filter(~sets.str.starts_with("{") | sets.str.json_path_match("$").is_null())
    if not bad.len():
        return pl.lit(False)
    return pl.col("ls").list.eval(pl.element().is_in(bad.implode())).list.any()


def _has_null(col: str) -> pl.Expr:
    return pl.col(col).list.len() != pl.col(col).list.drop_nulls().list.len()


def series_ids(target: pl.Series, metric: pl.Series, labels: pl.Series, day: pl.Series) -> pl.Series:
    """The id of each sample's series: a 64-bit hash of its text and its UTC day (``raw.metric_series``).

    ``target`` is the hash of (cluster, target, job, instance) (``target_hashes``), ``metric`` and
    ``labels`` the hashes of the metric name and label-set text, ``day`` days since 1970: text is
    hashed once per distinct string, only integers per sample. Ids are day-scoped so retention can
    drop a day's series rows with that day's samples. The hash is Polars' (stable within a Polars
    version): one with another hash only adds rows to ``raw.metric_series``, it never mixes series.
    """
    return pl.DataFrame([target.alias("t"), metric.alias("m"), labels.alias("l"), day.alias("d")]).hash_rows()


def target_hashes(frame: pl.DataFrame) -> pl.Series:
    """Hash of (cluster, target, job, instance) per row: the ``target`` input of ``series_ids``."""
    return frame.select("cluster", "target", "job", "instance").hash_rows()


def with_series_ids(samples: pl.DataFrame) -> pl.DataFrame:
    """Rows naming a series (``cluster``, ``target``, ``job``, ``instance``, ``metric``, ``labels`` text) at a
    ``ts``, plus the ``series`` id and ``day`` the pipeline would give them: for samples that reach the lake
    without Kafka (tests, benchmarks, imports)."""
    ts = samples["ts"].cast(_TS)
    day = ts.dt.epoch("d").cast(pl.Int32)
    ids = series_ids(target_hashes(samples), samples["metric"].cast(pl.String).hash(),
                     samples["labels"].cast(pl.String).hash(), day)
    return samples.with_columns(series=ids, day=day.cast(pl.Date))


def decode_scrapes(values: list[bytes]) -> Decoded:
    """Scrape batches -> samples as (ts, series, value) (``rows``), one row per scrape (``scrapes``, with
    ``_i``) and one per series id (``series``)."""
    df, idx, dead = _read(values, SCRAPE_SCHEMA)
    df = df.with_columns(
        _nm=pl.col("mc").list.sum().fill_null(0),  # series in the record
        _lf=pl.col("lr").list.gather_every(2),  # label-set runs: first index, count
        _lc=pl.col("lr").list.gather_every(2, 1),
    )
    # Empty ``s``/``dt`` are the compact common case (sample j is series j / at scraped_at).
    df = df.with_columns(
        # (bounded by the samples: a record claiming 10^9 series must not allocate them before it is refused)
        s=pl.when(pl.col("s").list.len().fill_null(0) == 0)
        .then(pl.int_ranges(0, pl.min_horizontal("_nm", pl.col("x").list.len().fill_null(0))))
        .otherwise(pl.col("s")),
        _dt0=pl.col("dt").list.len().fill_null(0) == 0,
        _s0=pl.col("s").list.len().fill_null(0) == 0,
    )
    ln = {c: pl.col(c).list.len().fill_null(0) for c in ("s", "dt", "x", "mn", "mc", "ls", "lr", "n", "ni", "nv")}
    ns, nm, nls = ln["s"], pl.col("_nm"), ln["ls"]

    def out_of(col: str, n: pl.Expr) -> pl.Expr:
        return (pl.col(col).list.min() < 0) | (pl.col(col).list.max() >= n)

    reason = (
        pl.when(_envelope_reason(SCRAPE).is_not_null()).then(_envelope_reason(SCRAPE))
        .when(pl.col("scraped_at").is_null()).then(pl.lit("scrape without scraped_at"))
        .when(ln["mc"] != ln["mn"]).then(pl.format("series counts per name differ in length (mn={} mc={})",
                                                    ln["mn"], ln["mc"]))
        .when(pl.any_horizontal(_has_null(c) for c in ("mc", "lr", "s", "ni")))
        .then(pl.lit("a null in an index or count list (mc, lr, s, ni)"))
        .when(pl.col("mc").list.min() < 0).then(pl.lit("a negative series count in mc"))
        .when(ln["lr"] % 2 != 0).then(pl.lit("label-set runs (lr) are not (first, count) pairs"))
        .when((pl.col("_lc").list.min() < 0) | (pl.col("_lc").list.sum().fill_null(0) != nm))
        .then(pl.format("label-set runs cover {} series, mc {}", pl.col("_lc").list.sum().fill_null(0), nm))
        .when(pl.col("_s0") & (ln["x"] != nm))
        .then(pl.format("one value per series expected, got x={} for {} series", ln["x"], nm))
        .when((~pl.col("_dt0") & (ns != ln["dt"])) | (ns != ln["x"]))
        .then(pl.format("sample columns differ in length (s={} dt={} x={})", ns, ln["dt"], ln["x"]))
        .when(ln["n"] != nls)
        .then(pl.format("label-set columns differ in length (ls={} n={})", nls, ln["n"]))
        .when(out_of("s", nm)).then(pl.format("a sample refers to a series that does not exist (series={})", nm))
        .when(nm > ln["x"]).then(pl.format("more series (mc: {}) than samples (x: {})", nm, ln["x"]))
        .when((pl.col("_lf").list.min() < 0)
              | ((pl.col("_lf") + pl.col("_lc")).list.max() > nls))  # a run's last set is first + count - 1
        .then(pl.lit("a series refers to a label set that does not exist"))
        .when(ln["ni"] != ln["nv"]).then(pl.lit("non-finite columns differ in length (ni, nv)"))
        .when(out_of("ni", ns)).then(pl.lit("a non-finite marker refers to a sample that does not exist"))
        .when(_has_bad_label_set(df)).then(pl.lit("a label set is not a JSON object"))
        .when(pl.col("dt").list.eval(pl.element().is_null()).list.any())
        .then(pl.lit("a sample without a time offset (dt)"))
        .otherwise(None)
    )
    df = _split(df, idx, reason, dead)
    ns = pl.col("s").list.len()
    scrapes = df.select(
        cluster="cluster", scraped_at=pl.col("scraped_at").cast(_TS), target="target", job="job",
        instance="instance", up=pl.col("up") != 0, duration_s="duration_s", samples=ns.cast(pl.Int32),
        error="error", _i="_i",
    )
    # Only scrapes with samples (so every list below is non-empty and explodes without nulls).
    withs = df.filter(ns > 0).with_columns(
        _series0=pl.col("_nm").cum_sum() - pl.col("_nm"),
        _sets0=ln["ls"].cum_sum() - ln["ls"],
        _sample0=ns.cum_sum() - ns,
    )
    if withs["_dt0"].all():
        ex = withs.with_row_index("_r").select("_r", "scraped_at", "_series0", "s", "x").explode(["s", "x"])
        ts = ex["scraped_at"]
    else:
        withs = withs.with_columns(dt=pl.when(pl.col("_dt0")).then(pl.col("s").list.eval(pl.element() * 0))
                                   .otherwise(pl.col("dt")))
        ex = (withs.with_row_index("_r").select("_r", "scraped_at", "_series0", "s", "dt", "x")
              .explode(["s", "dt", "x"]))
        ts = ex["scraped_at"] + ex["dt"]
    gidx = (ex["_series0"] + ex["s"]).to_numpy()  # flat series index of each sample
    value = ex["x"]
    nf = withs.filter(pl.col("ni").list.len() > 0)
    if nf.height:
        nfx = nf.select("_sample0", "ni", "nv").explode(["ni", "nv"])
        value = value.scatter((nfx["_sample0"] + nfx["ni"]).to_numpy(),
                              nfx["nv"].replace_strict(_NONFINITE, default=None, return_dtype=pl.Float64))
    # Flat series (record after record): the name index from the counts per name, the label-set index
    # from the runs (first + position in the run), both offset into the batch's flat names / sets.
    names = withs["mn"].explode()
    sets = withs.select(pl.col("ls").explode(), pl.col("n").explode())
    counts = withs["mc"].explode().to_numpy()
    series_name = np.repeat(np.arange(len(counts)), counts)
    runs = withs.select("_sets0", "_lf", "_lc").explode(["_lf", "_lc"])
    first = (runs["_sets0"] + runs["_lf"]).to_numpy()
    length = runs["_lc"].to_numpy()
    series_set = np.repeat(first - (np.cumsum(length) - length), length) + np.arange(length.sum())
    name_idx = pl.Series(series_name[gidx])
    set_idx = pl.Series(series_set[gidx])
    rec = ex["_r"]
    ts = ts.cast(_TS)
    day = ts.dt.epoch("d").cast(pl.Int32)
    ids = series_ids(target_hashes(withs).gather(rec), names.hash().gather(name_idx),
                     sets["ls"].hash().gather(set_idx), day)
    rows = pl.DataFrame({"ts": ts, "series": ids, "value": value})
    # One row per distinct series id: a few thousand per batch, against ~10^6 samples.
    one = pl.DataFrame({"series": ids, "_j": pl.int_range(0, ids.len(), eager=True)}).unique("series")["_j"]
    r, n, k = rec.gather(one), name_idx.gather(one), set_idx.gather(one)
    meta = withs.select("cluster", "target", "job", "instance")[r]
    new_series = pl.DataFrame({
        "series": ids.gather(one), "day": day.gather(one).cast(pl.Date), "cluster": meta["cluster"],
        "metric": names.gather(n), "labels": sets["ls"].gather(k), "node": sets["n"].gather(k),
        "target": meta["target"], "job": meta["job"], "instance": meta["instance"],
    })
    return Decoded(rows, dead, scrapes, new_series)
