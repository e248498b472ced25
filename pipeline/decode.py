"""Bulk decoding of Kafka record values into lake rows, with Polars.

A whole micro-batch is parsed at once: the values are joined into one NDJSON buffer and
read with an explicit schema (scrape batches by DuckDB's reader, watch events by Polars'), so
the hot path never calls ``json.loads`` per record.
Only when the bulk read fails (some record is not valid JSON, or a field has the wrong
type) are the records checked one by one to find the culprits, which become dead
letters with the parser's message; the rest are read in bulk again.

Scrape records are columnar (see docs/records.md), and a target's series part (``mn`` .. ``n``)
repeats scrape after scrape: it is parsed, checked and hashed once per batch (``_cut_heads``),
and each sample finds its series id by a gather from a table per (target, series part, day)
rather than a hash or a join. Samples leave as (ts, series id, value) plus one row per distinct
series of the batch (``series_ids``).
"""

from __future__ import annotations

import io
import json
import logging
import re
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
# raw.scrapes.first_sample_at looks back no further than this before the scrape: an exporter that stamps a series with
# a frozen old time at every scrape must not make every model build re-read the history since. Such older samples
# land all the same; the incremental models reach them at the next full build.
EARLIEST_SAMPLE_S = 300.0
_DAY_MS = 86_400_000
_SERIES = {"series": pl.UInt64, "day": pl.Date, **dict.fromkeys(
    ("cluster", "metric", "labels", "node", "target", "job", "instance"), pl.String)}


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
# A record's series part: the same bytes scrape after scrape of one target, so a batch carries a few distinct ones.
HEAD = ("mn", "mc", "ls", "lr", "n")
_CUT_COLUMNS = {**_SCRAPE_COLUMNS, "_h": "BIGINT"}
_HEAD_KEY = re.compile(rb'"(?:mn|mc|ls|lr|n|_h)":')
_local = threading.local()  # each decoder thread's own DuckDB connection
_no_temp_files: list[str] = []  # why DuckDB's reader is off in this process, once it is


def _read_duckdb(buf: bytes, columns: dict[str, str] = _SCRAPE_COLUMNS) -> pl.DataFrame | None:
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
            table = con.read_json(f.name, format="newline_delimited", columns=columns).to_arrow_table()
    except OSError as e:
        _no_temp_files.append(str(e))
        log.warning("no temporary file for DuckDB's NDJSON reader (%s); decoding with Polars' reader", e)
        return None
    return pl.DataFrame(table)


def _cut_heads(values: list[bytes]) -> tuple[bytes, list[int], int] | None:
    """The batch as NDJSON with each record's series part (``mn`` .. ``n``) cut out and replaced by ``"_h"``, its
    index among the batch's distinct ones, which follow as lines of their own; None when the batch is not laid
    out as ``encode_scrape`` writes it or its series parts do not repeat.

    Parsing the series part is most of reading a record (3.3 of 4.7 KB for an 8-GPU dcgm scrape, label sets
    as escaped JSON text) and most of checking it, yet a target sends the same bytes at every scrape.
    Exact: a cut series part holds exactly the five keys in order (parsed), and the rest of the record none
    of them, so nothing is read from a different place than in the whole record (and ``_read_scrapes`` checks
    that each record's ``_h`` was read back, which it would not be from inside a nested object).
    """
    heads: dict[bytes, int] = {}
    parts: list[bytes | memoryview] = []
    hids = []
    most = max(len(values) // 4, 8)
    for v in values:
        a = v.find(b',"mn":[')
        b = v.rfind(b'],"s":[')  # the last: one inside the series part would leave it unparseable below
        if a < 0 or b < a or _HEAD_KEY.search(v, 0, a) or _HEAD_KEY.search(v, b + 1):
            return None
        h = heads.setdefault(v[a + 1:b + 1], len(heads))
        if len(heads) > most:
            return None
        view = memoryview(v)
        parts += (view[:a], b',"_h":%d' % h, view[b + 1:], b"\n")
        hids.append(h)
    for head in heads:
        line = b"{" + head + b"}"
        try:
            pairs = json.loads(line, object_pairs_hook=lambda p: p)
        except ValueError:
            return None
        if not isinstance(pairs, list) or tuple(k for k, _ in pairs) != HEAD:
            return None
        parts += (line, b"\n")
    return b"".join(parts[:-1]), hids, len(heads)


def _read_scrapes(values: list[bytes]) -> tuple[pl.DataFrame, pl.DataFrame, list[int], list[Dead]]:
    """Scrape records as (records with ``_h``, the series parts they index by ``_h``), the input index of each
    record, and dead letters. Records cut by ``_cut_heads`` share their series parts; otherwise each record is
    read whole and has its own."""
    cut = _cut_heads(values) if all(values) else None
    if cut is not None:
        buf, hids, heads = cut
        if buf.count(b"\n") == len(values) + heads - 1:
            try:
                df = _read_duckdb(buf, _CUT_COLUMNS)
            except duckdb.Error:
                df = None  # read whole below, to find the culprits
            if df is not None and df.height == len(values) + heads:
                records = df.head(len(values)).drop(HEAD)
                if records["_h"].equals(pl.Series("_h", hids, dtype=pl.Int64)):
                    return records, df.tail(heads).select(HEAD), list(range(len(values))), []
    df, idx, dead = _read(values, SCRAPE_SCHEMA)
    return df.drop(HEAD).with_columns(_h=pl.int_range(0, df.height, dtype=pl.Int64)), df.select(HEAD), idx, dead


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


# An object time field (a key ending in Timestamp, Time or At) in a year before 2000 or after 2099 (ASCII digits:
# polars' \d would also match other scripts' digits, DuckDB's does not): such a row stays in
# raw.k8s_objects for inspection but no model reads it (staging.stg_k8s_watch, which holds the same pattern for rows
# landed before raw.k8s_objects.bad_time existed). Matched once here, not by every model at every build (a regex over
# every object's text of the history, ~20 times per build, issue 37).
BAD_OBJECT_TIME = r'(Timestamp|Time|At)"\s*:\s*"(0[0-9]{3}|1[0-9]{3}|2[1-9][0-9]{2}|[3-9][0-9]{3})-'


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
    rows = rows.with_columns(bad_time=pl.col("object").str.contains(BAD_OBJECT_TIME))
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


def _head_facts(heads: pl.DataFrame) -> pl.DataFrame:
    """What the checks need of each series part, computed once per distinct one, not per record."""
    ln = {c: pl.col(c).list.len().fill_null(0) for c in HEAD}
    nm = pl.col("mc").list.sum().fill_null(0)
    lf, lc = pl.col("lr").list.gather_every(2), pl.col("lr").list.gather_every(2, 1)  # label-set runs: first, count
    lc_sum = lc.list.sum().fill_null(0)
    return heads.select(
        _nm=nm,  # series in the record
        **{f"_len_{c}": ln[c] for c in HEAD},
        _null_mc=_has_null("mc"), _null_lr=_has_null("lr"),
        _mc_neg=pl.col("mc").list.min() < 0,
        _lc_bad=(lc.list.min() < 0) | (lc_sum != nm), _lc_sum=lc_sum,
        # a run's last set is first + count - 1 (an odd lr, refused before this, must not fail the addition)
        _lf_bad=(lf.list.min() < 0) | ((lf.list.head(lc.list.len()) + lc).list.max() > ln["ls"]),
        _bad_ls=_has_bad_label_set(heads),
    )


def _series_of_heads(heads: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For well-formed series parts: the series in each and the first flat series of each, and each flat series'
    index into the flat names and the flat label sets (series after series, part after part)."""
    nm = heads["mc"].list.sum().to_numpy()
    counts = heads["mc"].explode().to_numpy()
    name = np.repeat(np.arange(len(counts)), counts)
    nls = heads["ls"].list.len().cast(pl.Int64).to_numpy()
    runs = heads.select(_sets0=pl.Series(np.cumsum(nls) - nls), _lf=pl.col("lr").list.gather_every(2),
                        _lc=pl.col("lr").list.gather_every(2, 1)).explode(["_lf", "_lc"])
    first = (runs["_sets0"] + runs["_lf"]).to_numpy()
    length = runs["_lc"].to_numpy()
    label_set = np.repeat(first - (np.cumsum(length) - length), length) + np.arange(length.sum())
    return nm, np.cumsum(nm) - nm, name, label_set


def decode_scrapes(values: list[bytes]) -> Decoded:
    """Scrape batches -> samples as (ts, series, value) (``rows``), one row per scrape (``scrapes``, with
    ``_i``) and one per series id (``series``)."""
    df, heads, idx, dead = _read_scrapes(values)
    facts = _head_facts(heads)
    df = pl.concat([df, facts[df["_h"]]], how="horizontal")
    ln = {c: pl.col(c).list.len().fill_null(0) for c in ("s", "dt", "x", "ni", "nv")}
    lh = {c: pl.col(f"_len_{c}") for c in HEAD}
    nm, nls = pl.col("_nm"), lh["ls"]
    # Empty ``s``/``dt`` are the compact common case (sample j is series j / at scraped_at); such a record has
    # min(series, values) samples (bounded by the samples: a record claiming 10^9 series must not allocate
    # them before it is refused).
    df = df.with_columns(_dt0=ln["dt"] == 0, _s0=ln["s"] == 0)
    df = df.with_columns(_ns=pl.when("_s0").then(pl.min_horizontal(nm, ln["x"])).otherwise(ln["s"]).cast(pl.Int64))
    ns = pl.col("_ns")

    def out_of(col: str, n: pl.Expr) -> pl.Expr:
        return (pl.col(col).list.min() < 0) | (pl.col(col).list.max() >= n)

    reason = (
        pl.when(_envelope_reason(SCRAPE).is_not_null()).then(_envelope_reason(SCRAPE))
        .when(pl.col("scraped_at").is_null()).then(pl.lit("scrape without scraped_at"))
        .when(lh["mc"] != lh["mn"]).then(pl.format("series counts per name differ in length (mn={} mc={})",
                                                    lh["mn"], lh["mc"]))
        .when(pl.any_horizontal("_null_mc", "_null_lr", _has_null("s"), _has_null("ni")))
        .then(pl.lit("a null in an index or count list (mc, lr, s, ni)"))
        .when(pl.col("_mc_neg")).then(pl.lit("a negative series count in mc"))
        .when(lh["lr"] % 2 != 0).then(pl.lit("label-set runs (lr) are not (first, count) pairs"))
        .when(pl.col("_lc_bad")).then(pl.format("label-set runs cover {} series, mc {}", pl.col("_lc_sum"), nm))
        .when(pl.col("_s0") & (ln["x"] != nm))
        .then(pl.format("one value per series expected, got x={} for {} series", ln["x"], nm))
        .when((~pl.col("_dt0") & (ns != ln["dt"])) | (ns != ln["x"]))
        .then(pl.format("sample columns differ in length (s={} dt={} x={})", ns, ln["dt"], ln["x"]))
        .when(lh["n"] != nls)
        .then(pl.format("label-set columns differ in length (ls={} n={})", nls, lh["n"]))
        .when(~pl.col("_s0") & out_of("s", nm))
        .then(pl.format("a sample refers to a series that does not exist (series={})", nm))
        .when(nm > ln["x"]).then(pl.format("more series (mc: {}) than samples (x: {})", nm, ln["x"]))
        .when(pl.col("_lf_bad")).then(pl.lit("a series refers to a label set that does not exist"))
        .when(ln["ni"] != ln["nv"]).then(pl.lit("non-finite columns differ in length (ni, nv)"))
        .when(out_of("ni", ns)).then(pl.lit("a non-finite marker refers to a sample that does not exist"))
        .when(pl.col("_bad_ls")).then(pl.lit("a label set is not a JSON object"))
        .when(pl.col("dt").list.eval(pl.element().is_null()).list.any())
        .then(pl.lit("a sample without a time offset (dt)"))
        .otherwise(None)
    )
    df = _split(df, idx, reason, dead)
    scrapes = df.select(
        cluster="cluster", scraped_at=pl.col("scraped_at").cast(_TS), target="target", job="job",
        instance="instance", up=pl.col("up") != 0, duration_s="duration_s", samples=pl.col("_ns").cast(pl.Int32),
        error="error",
        # The oldest sample's time (a sample may carry its own, before the scrape's), at most EARLIEST_SAMPLE_S
        # before the scrape: where the model runner rebuilds from when the scrape lands (pipeline.models, late_from).
        first_sample_at=pl.when(pl.col("_ns") > 0).then(pl.max_horizontal(
            pl.col("scraped_at") + pl.when("_dt0").then(0).otherwise(pl.col("dt").list.min()),
            pl.col("scraped_at") - int(EARLIEST_SAMPLE_S * 1000))).cast(_TS),
        _i="_i",
    )
    # Only scrapes with samples (so every list below is non-empty and explodes without nulls).
    withs = df.filter(pl.col("_ns") > 0).with_columns(_sample0=pl.col("_ns").cum_sum() - pl.col("_ns"))
    ns = withs["_ns"].to_numpy()
    # Each sample's series (None: sample j of every record is its series j) and time.
    series = None if withs["_s0"].all() else withs.select(
        pl.when("_s0").then(pl.int_ranges(0, "_ns")).otherwise("s")).to_series().explode().to_numpy()
    at = withs["scraped_at"].to_numpy()
    if withs["_dt0"].all():
        ts = np.repeat(at, ns)
    else:
        ts = np.repeat(at, ns) + withs.select(
            pl.when("_dt0").then(pl.int_ranges(0, "_ns") * 0).otherwise("dt")).to_series().explode().to_numpy()
    value = withs["x"].explode()
    nf = withs.filter(pl.col("ni").list.len() > 0)
    if nf.height:
        nfx = nf.select("_sample0", "ni", "nv").explode(["ni", "nv"])
        value = value.scatter((nfx["_sample0"] + nfx["ni"]).to_numpy(),
                              nfx["nv"].replace_strict(_NONFINITE, default=None, return_dtype=pl.Float64))
    ids, series_rows = _series(withs, heads, series, ts)
    rows = pl.DataFrame({"ts": pl.Series(ts).cast(_TS), "series": ids, "value": value})
    return Decoded(rows, dead, scrapes, series_rows)


def _series(withs: pl.DataFrame, heads: pl.DataFrame, series: np.ndarray | None,
            ts: np.ndarray) -> tuple[pl.Series, pl.DataFrame]:
    """Each sample's series id, and one row per distinct series id of the batch.

    Ids are hashed once per (target, series part, day) and series in it, a few thousand rows per batch, not
    per sample (``series_ids``): a sample's id is a gather from that table, at its combination's first row
    plus its series. A record's samples are usually all of one day, so combinations are found per record.
    """
    if not len(ts):
        return pl.Series("series", [], pl.UInt64), pl.DataFrame(schema=_SERIES)
    ns, sample0 = withs["_ns"].to_numpy(), withs["_sample0"].to_numpy()
    used = withs["_h"].unique().sort().to_numpy()
    parts = heads[used]  # the series parts of landed samples (others may be malformed)
    part = np.searchsorted(used, withs["_h"].to_numpy())  # each record's
    nm, series0, name, label_set = _series_of_heads(parts)
    target = target_hashes(withs)
    key = pl.DataFrame({"t": target, "p": part}).select(pl.struct("t", "p").rank("dense")).to_series()
    key = key.cast(pl.Int64).to_numpy() - 1  # each record's (target, part)
    day = ts // _DAY_MS  # each sample's UTC day (floored, as a date)
    first, last = np.minimum.reduceat(day, sample0), np.maximum.reduceat(day, sample0)
    d0 = int(first.min())
    span = int(last.max()) - d0 + 1
    by_record = bool((first == last).all())
    combos, combo = np.unique(key * span + (first - d0) if by_record else np.repeat(key, ns) * span + (day - d0),
                              return_inverse=True)
    first_rec = np.unique(key, return_index=True)[1]  # the first record of each (target, part)
    c_rec, c_day = first_rec[combos // span], combos % span + d0
    c_part = part[c_rec]
    lengths = nm[c_part]
    start = np.cumsum(lengths) - lengths  # each combination's first row in the table
    row_combo = np.repeat(np.arange(len(combos)), lengths)
    flat = np.repeat(series0[c_part] - start, lengths) + np.arange(lengths.sum())  # each row's flat series
    names, sets = parts["mn"].explode(), parts.select(pl.col("ls").explode(), pl.col("n").explode())
    table = series_ids(target.gather(c_rec[row_combo]), names.hash().gather(name[flat]),
                       sets["ls"].hash().gather(label_set[flat]), pl.Series(c_day[row_combo], dtype=pl.Int32))
    if by_record:  # each sample's table row: its record's first row, plus its series
        base = start[combo]
        row = np.repeat(base - sample0, ns) + np.arange(len(ts)) if series is None else np.repeat(base, ns) + series
    else:
        row = start[combo] + (np.arange(len(ts)) - np.repeat(sample0, ns) if series is None else series)
    hit = np.zeros(len(table), dtype=bool)
    hit[row] = True
    rows = np.nonzero(hit)[0]
    meta = withs.select("cluster", "target", "job", "instance")[c_rec[row_combo[rows]]]
    out = pl.DataFrame({
        "series": table.gather(rows), "day": pl.Series(c_day[row_combo[rows]], dtype=pl.Int32).cast(pl.Date),
        "cluster": meta["cluster"], "metric": names.gather(name[flat[rows]]),
        "labels": sets["ls"].gather(label_set[flat[rows]]), "node": sets["n"].gather(label_set[flat[rows]]),
        "target": meta["target"], "job": meta["job"], "instance": meta["instance"],
    })
    return table.gather(row), out.unique("series", keep="first", maintain_order=True)
