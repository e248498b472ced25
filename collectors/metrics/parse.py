"""Fast parser for the Prometheus text exposition format (0.0.4) and OpenMetrics 1.0 text.

The correctness reference is ``prometheus_client.parser.text_string_to_metric_families``;
it does about 17k samples/s, i.e. 11.5 s of one core per round of 1,000 dcgm-exporter
scrapes. This one splits lines and escape-free label lists with ``str`` methods (a
char-by-char path only for escapes and quoted UTF-8 names); on the bench's 8-GPU scrapes
it is 10-14x faster in the same run (see ``bench/scrape.py``).

Differences from prometheus_client, on purpose: metric names are kept exactly as the
exporter wrote them (no ``_total`` appended to counters), timestamps are integer
milliseconds in both formats, and a broken line is reported with its line number (callers
decide: a scrape with a broken line fails whole, like Prometheus; a replay file names it).

OpenMetrics (``fmt="openmetrics"``): timestamps are seconds, the text must end with
``# EOF``, exemplars (`` # {...} v [ts]`` after a sample) are dropped, and the ``_created``
samples of counters, histograms and summaries are dropped (a creation time, not a value).
Both formats also take the name inside the braces (``{__name__="m", k="v"} 1 ts``, the
form ``promtool tsdb dump`` prints).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gangscope.records import ScrapeBatch

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_NAME_OK = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
_OM_TYPES = {"counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset", "unknown"}
_OM_CREATED = {"counter", "histogram", "gaugehistogram", "summary"}  # families whose _created is a time
FORMATS = ("text", "openmetrics")


@dataclass(slots=True)
class Parsed:
    """Samples of one exposition text, column by column (sample ``i`` is one series)."""

    metric: list[str] = field(default_factory=list)
    labels: list[dict[str, str]] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    ts_ms: list[int | None] = field(default_factory=list)
    line: list[int] = field(default_factory=list)  # 1-based line of each sample, for error messages
    types: dict[str, str] = field(default_factory=dict)  # from # TYPE lines, as written
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason), lines skipped

    def __len__(self) -> int:
        return len(self.value)

    def error_summary(self) -> str | None:
        """One line for scrape health: the first broken line and how many there were."""
        if not self.errors:
            return None
        line, reason = self.errors[0]
        more = f" (+{len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        return f"line {line}: {reason}{more}"


class ParseError(ValueError):
    pass


def _unescape_labels(body: str) -> tuple[dict[str, str], str | None]:
    """Slow path: label values with escapes, quoted label names. Returns (labels, quoted metric name)."""
    labels: dict[str, str] = {}
    quoted_name: str | None = None
    i, n = 0, len(body)
    while True:
        while i < n and body[i] in " \t":
            i += 1
        if i >= n:
            break
        if body[i] == '"':
            key, i = _read_quoted(body, i)
        else:
            m = _LABEL_NAME.match(body, i)
            if not m:
                raise ParseError(f"bad label name at {body[i:i + 20]!r}")
            key, i = m.group(0), m.end()
        while i < n and body[i] in " \t":
            i += 1
        if i < n and body[i] == "=":
            i += 1
            while i < n and body[i] in " \t":
                i += 1
            if i >= n or body[i] != '"':
                raise ParseError(f"label {key!r}: value is not quoted")
            val, i = _read_quoted(body, i)
            if key in labels:
                raise ParseError(f"duplicate label {key!r}")
            labels[key] = val
        else:
            if quoted_name is not None or labels:
                raise ParseError(f"label {key!r} has no value")
            quoted_name = key  # {"metric.name", ...}
        while i < n and body[i] in " \t":
            i += 1
        if i < n:
            if body[i] != ",":
                raise ParseError(f"expected ',' at {body[i:i + 20]!r}")
            i += 1
    return labels, quoted_name


def _read_quoted(s: str, i: int) -> tuple[str, int]:
    out: list[str] = []
    i += 1
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            if i + 1 >= n:
                break
            nxt = s[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        elif c == '"':
            return "".join(out), i + 1
        else:
            out.append(c)
            i += 1
    raise ParseError("unterminated quoted string")


_KEYSETS_OK: set[tuple[str, ...]] = set()  # label-name sets already validated (few distinct per exporter)


def _fast_labels(body: str) -> dict[str, str] | None:
    """The common case, ``k="v",k2="v2"`` with no escapes, by ``str`` methods; None: use the slow path.

    Without backslashes every ``"`` delimits a value, so turning ``",`` into ``="`` and splitting
    on ``="`` alternates names and values, and the quote count proves the shape; label-name
    sets are validated once and remembered.
    """
    if body[-1:] == ",":
        body = body[:-1]
    if not body:
        return {}
    if body[-1] != '"' or "\\" in body:
        return None
    if '", ' in body:  # promtool tsdb dump separates labels with ", "
        body = body.replace('", ', '",')
    parts = body[:-1].replace('",', '="').split('="')
    n = len(parts)
    if n & 1 or body.count('"') != n:
        return None
    keys = parts[0::2]
    labels = dict(zip(keys, parts[1::2], strict=True))
    if len(labels) != n >> 1:
        return None
    keyset = tuple(keys)
    if keyset not in _KEYSETS_OK:
        if not all(_LABEL_NAME.fullmatch(k) for k in keys):
            return None
        if len(_KEYSETS_OK) > 10_000:
            _KEYSETS_OK.clear()
        _KEYSETS_OK.add(keyset)
    return labels


def _value(text: str) -> float:
    if "_" in text:  # Python's float() takes 1_000; the exposition format does not
        raise ValueError(text)
    return float(text)


def _om_ts_ms(text: str) -> int:
    """OpenMetrics timestamp (seconds, maybe fractional) to integer milliseconds."""
    if "_" in text:
        raise ValueError(text)
    f = float(text)
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError(text)
    return round(f * 1000)


def _strip_exemplar(line: str) -> str:
    """The sample part of an OpenMetrics line: everything before an exemplar's `` # {``, which may not be
    inside a quoted label value (an even number of unescaped quotes before it)."""
    i = line.find(" # {")
    while i >= 0:
        head = line[:i]
        if (head.count('"') - head.count('\\"')) % 2 == 0:
            return head.rstrip()
        i = line.find(" # {", i + 1)
    return line


def _om_strict(raw: str, line: str, name: str, types: dict[str, str], exemplar: bool) -> None:
    """What OpenMetrics forbids and text 0.0.4 allows (the OpenMetrics parser's own rules): stray whitespace,
    a trailing comma in the label set, a counter sample without ``_total``, an exemplar where none may be."""
    if raw != raw.strip(" \t\r"):
        raise ParseError("leading or trailing whitespace")
    close = line.rfind("}")
    if close >= 0:
        if line[:close].endswith(","):
            raise ParseError("trailing comma in the label set")
        tail = line[close + 1:]
        if not tail.startswith(" "):
            raise ParseError("expected one space after the labels")
    else:
        tail = line[line.find(" "):] if " " in line else ""
    if "  " in tail or tail.endswith(" "):
        raise ParseError("fields are separated by exactly one space")
    if types.get(name) == "counter":
        raise ParseError(f"counter sample {name!r} must end with _total")
    if exemplar and not (name.endswith("_total") and types.get(name[:-6]) == "counter"
                         or name.endswith("_bucket") and types.get(name[:-7]) in ("histogram", "gaugehistogram")):
        raise ParseError(f"exemplar on {name!r}: only counter _total and histogram _bucket samples have them")


def parse_text(text: str, *, require_timestamps: bool = False, first_line: int = 1, fmt: str = "text",
               eof_required: bool = True) -> Parsed:
    """Parse one exposition text; broken lines go to ``errors`` (with their line number) and are skipped.

    ``fmt`` is ``text`` (0.0.4) or ``openmetrics``. ``require_timestamps`` makes a sample without a
    timestamp an error (replay files). ``first_line`` numbers the lines when ``text`` is a slice of a
    larger file; ``eof_required=False`` for such slices of OpenMetrics (the file's end has ``# EOF``).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown exposition format {fmt!r}")
    om = fmt == "openmetrics"
    types_ok = _OM_TYPES if om else _TYPES
    out = Parsed()
    metric, labels_col, value_col, ts_col, line_col = out.metric, out.labels, out.value, out.ts_ms, out.line
    errors = out.errors
    name_ok = _NAME_OK.fullmatch
    names_ok: set[str] = set()  # names seen valid in this text (each metric repeats per series)
    eof_at = 0
    lineno = last = first_line - 1
    raws = text.split("\n")
    final = len(raws) - 1 + first_line  # the element after the last newline, empty in a whole text
    for raw in raws:
        lineno += 1
        if not raw:
            if om and lineno < final:
                errors.append((lineno, "empty line"))
            continue
        line = raw.strip() if raw[0] in " \t" or raw[-1] in " \t\r" else raw
        if not line:
            continue
        last = lineno
        if eof_at:
            if om:
                errors.append((lineno, "content after # EOF"))
                break
            eof_at = 0
        if line[0] == "#":
            if line == "# EOF":
                eof_at = lineno
                continue
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                typ = parts[3].strip()
                if typ not in types_ok:
                    errors.append((lineno, f"unknown metric type {typ!r}"))
                else:
                    out.types[parts[2]] = typ
            elif om and len(parts) >= 4 and parts[1] == "UNIT" and not parts[2].endswith("_" + parts[3]):
                errors.append((lineno, f"unit {parts[3]!r} does not end the metric name {parts[2]!r}"))
            continue
        exemplar = False
        if om and " # {" in line:
            sample = _strip_exemplar(line)
            exemplar, line = sample != line, sample
        try:
            brace = line.find("{")
            if brace >= 0:
                close = line.rfind("}")
                if close < brace:
                    raise ParseError("missing '}'")
                name = line[:brace].rstrip()
                body = line[brace + 1:close]
                rest = line[close + 1:]
                labels = _fast_labels(body)
                if labels is None:
                    labels, quoted = _unescape_labels(body)
                    if quoted is not None:
                        if name:
                            raise ParseError("metric name given twice")
                        name = quoted
                if "__name__" in labels:  # {__name__="m", ...}: promtool tsdb dump
                    if name:
                        raise ParseError("metric name given twice")
                    name = labels.pop("__name__")
                if not name:
                    raise ParseError("missing metric name")
                if brace and name not in names_ok:  # a name inside the braces may be any UTF-8
                    if not name_ok(name):
                        raise ParseError(f"invalid metric name {name!r}")
                    names_ok.add(name)
                parts = rest.split()
            else:
                parts = line.split()
                name = parts.pop(0)
                if not name_ok(name):
                    raise ParseError(f"invalid metric name {name!r}")
                labels = {}
            if not parts or len(parts) > 2:
                raise ParseError("expected a value and an optional timestamp after the labels")
            try:
                value = _value(parts[0])
            except ValueError:
                raise ParseError(f"bad value {parts[0]!r}") from None
            if len(parts) == 2:
                try:
                    ts: int | None = _om_ts_ms(parts[1]) if om else int(parts[1])
                except ValueError:
                    unit = "seconds" if om else "integer milliseconds"
                    raise ParseError(f"bad timestamp {parts[1]!r} (expected {unit})") from None
            elif require_timestamps:
                raise ParseError("sample has no timestamp (replay files need one on every sample)")
            else:
                ts = None
            if om:
                _om_strict(raw, line, name, out.types, exemplar)
                if name.endswith("_created") and out.types.get(name[:-8]) in _OM_CREATED:
                    continue
        except ParseError as e:
            errors.append((lineno, str(e)))
            continue
        metric.append(name)
        labels_col.append(labels)
        value_col.append(value)
        ts_col.append(ts)
        line_col.append(lineno)
    if om and eof_required and not eof_at and not errors:
        errors.append((last, "OpenMetrics text does not end with # EOF"))
    return out


def _parse_one(text: str) -> Parsed:
    return parse_text(text)


def parse_many(texts: Sequence[str], pool=None) -> list[Parsed]:
    """Parse a round's scrapes in bulk; with a ``concurrent.futures`` process pool, across its workers.

    Returning parsed columns from a worker costs about as much pickling as the parse saves, so
    the live scraper instead has its workers parse *and* encode (``scrape._parse_encode``) and
    send back only the record bytes.
    """
    if pool is None or len(texts) < 8:
        return [parse_text(t) for t in texts]
    return list(pool.map(_parse_one, texts, chunksize=max(1, len(texts) // 16)))


def to_batch(
    parsed: Parsed,
    *,
    cluster: str,
    target: str,
    job: str,
    instance: str,
    scraped_at_ms: int,
    duration_s: float = 0.0,
    extra_labels: dict[str, str] | None = None,
) -> ScrapeBatch:
    """A ScrapeBatch of one parsed scrape; ``extra_labels`` are added where the sample lacks them
    (like Prometheus with ``honor_labels: true``: the exporter's own labels win)."""
    labels = parsed.labels
    if extra_labels:
        labels = [{**extra_labels, **lb} for lb in labels]
    n = len(parsed.value)
    return ScrapeBatch(
        cluster=cluster,
        target=target,
        job=job,
        instance=instance,
        scraped_at_ms=scraped_at_ms,
        up=True,
        duration_s=duration_s,
        error=parsed.error_summary(),
        series_metric=list(parsed.metric),
        series_labels=list(labels),
        sample_series=list(range(n)),
        sample_ts_ms=list(parsed.ts_ms),
        sample_value=list(parsed.value),
    )
