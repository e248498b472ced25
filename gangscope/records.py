"""The record contract: the only code that knows gangscope's wire format.

Collectors build records with the constructors here and hand them to a publisher;
the pipeline decodes them. The format is documented in ``docs/records.md``; change
both together and bump ``VERSION`` on any incompatible change.

Two record kinds travel on two topics:

* ``k8s`` (topic ``<prefix>k8s``): one Kubernetes watch event, the full object as the
  API server sent it, plus relist markers. Key: ``<apiVersion>/<kind>/<namespace>/<name>``
  so one object's events stay in order on one partition.
* ``scrape`` (topic ``<prefix>metrics``): every sample of one scrape of one target, in
  columnar form with each series' labels written once. Key: the scrape target.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

VERSION = 2

K8S = "k8s"
SCRAPE = "scrape"

WATCH_TYPES = ("ADDED", "MODIFIED", "DELETED")
RELIST_BEGIN = "RELIST_BEGIN"
RELIST_END = "RELIST_END"
K8S_TYPES = (*WATCH_TYPES, RELIST_BEGIN, RELIST_END)

_NONFINITE = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}


def topic_names(prefix: str) -> dict[str, str]:
    """Topic per record kind."""
    return {K8S: f"{prefix}k8s", SCRAPE: f"{prefix}metrics"}


def rfc3339(ts: datetime) -> str:
    """RFC 3339 UTC with milliseconds and a Z, the one time format on the wire."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_rfc3339(text: str) -> datetime:
    """Parse the RFC 3339 forms Kubernetes writes (``Z``, offsets, fractional seconds)."""
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def k8s_key(obj: dict[str, Any]) -> bytes:
    meta = obj.get("metadata") or {}
    return (
        f"{obj.get('apiVersion', '')}/{obj.get('kind', '')}/{meta.get('namespace', '')}/{meta.get('name', '')}"
    ).encode()


@dataclass(frozen=True, slots=True)
class K8sEvent:
    """One watch event (ADDED/MODIFIED/DELETED) or a relist marker.

    Markers carry no object: ``RELIST_BEGIN`` says a full list of ``api_version``/``kind`` (in
    ``namespace``, or all) follows, re-sending every object when its ``resource_version`` is ``""``
    (a list from nothing) or only what changed since that version; ``RELIST_END`` says it is
    complete (``resource_version`` is the list's; ``sent``: how many events the list sent, so that a
    reader can tell when all of them have landed).
    """

    cluster: str
    type: str
    observed_at: datetime
    object: dict[str, Any] | None = None
    api_version: str | None = None
    kind: str | None = None
    resource_version: str | None = None
    namespace: str | None = None  # of a marker whose list was namespace-scoped
    sent: int | None = None  # of a RELIST_END
    rejected: str | None = None  # why the edge refused it (time sanity): it lands as a dead letter

    def key(self) -> bytes:
        if self.object is not None:
            return k8s_key(self.object)
        return f"{self.api_version}/{self.kind}//".encode()

    def to_bytes(self) -> bytes:
        if self.type not in K8S_TYPES:
            raise ValueError(f"unknown watch event type {self.type!r}")
        rec: dict[str, Any] = {
            "v": VERSION,
            "kind": K8S,
            "cluster": self.cluster,
            "type": self.type,
            "observed_at": rfc3339(self.observed_at),
        }
        if self.object is not None:
            rec["object"] = self.object
        else:
            rec["api_version"] = self.api_version
            rec["resource_kind"] = self.kind
            rec["resource_version"] = self.resource_version
            if self.namespace:
                rec["namespace"] = self.namespace
            if self.sent is not None:
                rec["sent"] = self.sent
        if self.rejected:
            rec["rejected"] = self.rejected
        return json.dumps(rec, separators=(",", ":")).encode()


@dataclass(slots=True)
class ScrapeBatch:
    """All samples of one scrape of one target, columnar.

    ``series_metric[i]``/``series_labels[i]`` name series ``i`` (metric name exactly as
    the exporter wrote it; labels as a dict). Sample ``j`` is ``(sample_series[j],
    sample_ts_ms[j], sample_value[j])``; a ``None`` timestamp means "at ``scraped_at_ms``".
    ``up``/``duration_s``/``error`` describe the scrape itself (scrape health).
    """

    cluster: str
    target: str
    job: str
    instance: str
    scraped_at_ms: int
    up: bool = True
    duration_s: float = 0.0
    error: str | None = None
    series_metric: list[str] = field(default_factory=list)
    series_labels: list[dict[str, str]] = field(default_factory=list)
    sample_series: list[int] = field(default_factory=list)
    sample_ts_ms: list[int | None] = field(default_factory=list)
    sample_value: list[float] = field(default_factory=list)
    rejected: str | None = None  # why the edge refused these samples (time sanity): they land as a dead letter

    def add_series(self, metric: str, labels: dict[str, str]) -> int:
        self.series_metric.append(metric)
        self.series_labels.append(labels)
        return len(self.series_metric) - 1

    def add_sample(self, series: int, value: float, ts_ms: int | None = None) -> None:
        self.sample_series.append(series)
        self.sample_ts_ms.append(ts_ms)
        self.sample_value.append(value)

    def key(self) -> bytes:
        return self.target.encode()

    def to_bytes(self) -> bytes:
        return encode_scrape(self)


class EncodedScrapeBatch(ScrapeBatch):
    """A scrape whose wire form a worker process already built (``to_bytes``); no sample columns here.

    ``samples`` is the sample count. Only for emitters that publish (the scraper's ``collect``/``run``,
    the remote-write receiver).
    """

    __slots__ = ("encoded", "samples")

    def to_bytes(self) -> bytes:
        return self.encoded


NODE_LABELS = ("hostname", "node", "kubernetes_node", "nodename")  # in this order, keys compared case-insensitively


def series_node(labels: dict[str, str]) -> str | None:
    """Node named by a series' labels (CONTRACT section 2): ``Hostname``/``hostname``, then ``node``,
    ``kubernetes_node``, ``nodename``. Resolving ``instance`` against Node objects is left to the models."""
    lowered = {k.lower(): v for k, v in labels.items()}
    for key in NODE_LABELS:
        v = lowered.get(key)
        if v:
            return v
    return None


def label_text(labels: dict[str, str]) -> str:
    """A label set's wire text (``ls``): compact JSON with sorted keys, the same text for the same labels."""
    return json.dumps(labels, separators=(",", ":"), sort_keys=True)


class LabelSet(dict[str, str]):
    """Labels whose wire text and node are computed once, for a collector that sends the same series again
    and again (the remote-write receiver's series cache): encoding reads them instead. Never change one."""

    __slots__ = ("text", "node")

    def __init__(self, labels: dict[str, str]) -> None:
        super().__init__(labels)
        self.text = label_text(self)
        self.node = series_node(self)


def _finite_or_marker(values: Sequence[float]) -> tuple[list[float | None], list[int], list[str | None]]:
    out: list[float | None] = []
    idx: list[int] = []
    marks: list[str | None] = []
    for i, v in enumerate(values):
        if v is not None and math.isfinite(v):
            out.append(v)
            continue
        out.append(None)
        idx.append(i)
        marks.append(None if v is None else "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf"))
    return out, idx, marks


def _runs(indices: list[int]) -> list[int]:
    """``indices`` as flat (first, count) pairs of consecutive runs: [0,1,2,0,1,2] -> [0,3,0,3]."""
    out: list[int] = []
    for i in indices:
        if out and out[-2] + out[-1] == i:
            out[-1] += 1
        else:
            out += [i, 1]
    return out


def encode_scrape(b: ScrapeBatch) -> bytes:
    """Wire form of a scrape batch (see docs/records.md).

    Series travel grouped by metric name: ``mn`` lists each name once and ``mc`` how many series
    have it, in that order; ``lr`` gives the label set (index into ``ls``, JSON text with sorted
    keys, each distinct set once) of each series as runs of consecutive indices, flat
    ``[first, count, ...]``. No per-series index lists: parsing them was a third of the pipeline's
    decoding. ``n`` is each label set's node, computed here so the pipeline need not parse labels.
    Samples follow in series order; ``s`` names each sample's series and is empty when sample
    ``j`` is series ``j``; ``dt`` is each sample's time in ms after ``scraped_at``, empty when all
    are at ``scraped_at``. JSON has no NaN/Inf, so a non-finite value travels as ``null`` in ``x``
    plus its sample index in ``ni`` and ``"NaN"|"+Inf"|"-Inf"`` at the same place in ``nv``; a
    ``null`` in ``nv`` is a value the collector marked missing (a DCGM sentinel, say).
    """
    n = len(b.sample_series)
    if not (len(b.sample_ts_ms) == len(b.sample_value) == n):
        raise ValueError("sample columns differ in length")
    if len(b.series_metric) != len(b.series_labels):
        raise ValueError("series columns differ in length")
    names: dict[str, int] = {}
    mi = [names.setdefault(m, len(names)) for m in b.series_metric]
    # Exporters write a metric's series together, so the grouping is usually there already.
    grouped = all(a <= c for a, c in zip(mi, mi[1:], strict=False))
    order = range(len(mi)) if grouped else sorted(range(len(mi)), key=mi.__getitem__)  # stable
    mc = [0] * len(names)
    for i in mi:
        mc[i] += 1
    # Each distinct label set once, as JSON text with sorted keys; dumped once per dict shape, not per
    # series (dcgm-exporter repeats one label set per GPU across all its metrics), or not at all for a LabelSet.
    by_items: dict[tuple[tuple[str, str], ...], str] = {}
    by_text: dict[str, int] = {}
    label_sets: list[dict[str, str]] = []
    li: list[int] = []
    all_labels = b.series_labels
    for old in order:
        lbl = all_labels[old]
        if type(lbl) is LabelSet:
            text = lbl.text
        else:
            items = tuple(lbl.items())
            text = by_items.get(items)  # type: ignore[assignment]
            if text is None:
                text = by_items[items] = label_text(lbl)
        j = by_text.get(text)
        if j is None:
            j = by_text[text] = len(label_sets)
            label_sets.append(lbl)
        li.append(j)
    series, values, ts = b.sample_series, b.sample_value, b.sample_ts_ms
    if not grouped:
        new_of = [0] * len(order)
        for new, old in enumerate(order):
            new_of[old] = new
        series = [new_of[k] for k in series]
        samples = sorted(range(n), key=series.__getitem__)  # stable: a series' samples keep their order
        series = [series[j] for j in samples]
        values = [values[j] for j in samples]
        ts = [ts[j] for j in samples]
    x, ni, nv = _finite_or_marker(values)
    at = b.scraped_at_ms
    dt = [0 if t is None else t - at for t in ts]
    rec = {
        "v": VERSION,
        "kind": SCRAPE,
        "cluster": b.cluster,
        "target": b.target,
        "job": b.job,
        "instance": b.instance,
        "scraped_at": b.scraped_at_ms,
        "up": 1 if b.up else 0,
        "duration_s": b.duration_s,
        "error": b.error,
        "mn": list(names),
        "mc": mc,
        "ls": list(by_text),
        "lr": _runs(li),
        "n": [lbl.node if type(lbl) is LabelSet else series_node(lbl) for lbl in label_sets],
        # The common case costs nothing to parse: one sample per series, all at scraped_at.
        "s": [] if series == list(range(len(mi))) else series,
        "dt": dt if any(dt) else [],
        "x": x,
        "ni": ni,
        "nv": nv,
    }
    if b.rejected:
        rec["rejected"] = b.rejected
    return json.dumps(rec, separators=(",", ":"), allow_nan=False).encode()


def nonfinite_value(marker: str | None) -> float | None:
    """Value of an ``nf`` marker: NaN/±Inf, or None for a missing value."""
    return None if marker is None else _NONFINITE[marker]
