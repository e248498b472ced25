"""Fast parser for the Prometheus text exposition format (0.0.4) and OpenMetrics 1.0 text.

The grammar is the one the upstream parsers' own test suites pin down (prometheus/common expfmt,
Prometheus' textparse, prometheus_client's parsers); ``tests/collectors_metrics/upstream_cases.json``
holds their cases as data and docs/collectors-metrics.md says where the three disagree and which way
gangscope goes. Prometheus 3 names: a quoted metric name inside the braces (``{"http.status", a="b"}``),
quoted label names, quoted names in ``# HELP``/``# TYPE``/``# UNIT``.

Speed: lines are split and the common escape-free label list is read with ``str`` methods, once per
text (a label set met again is a copy of the first reading); ``# HELP``/``# TYPE`` lines as exporters write
them take an exact fast path; legacy names are checked once per process; a char-by-char path takes
escapes, quoted names and anything unusual, and the strict checks run only for what ordinary exporter
output does not contain (a typed histogram or summary, OpenMetrics, a line that already failed). On the
bench's 8-GPU scrapes it took 0.39-0.44x the CPU time of the parser before issue 38 (``bench/scrape.py
--against 2aef836``) and was 28-124x faster than prometheus_client's in the same runs (varying load).

Every broken line is reported with its line number in ``errors`` and skipped; the other lines are
parsed as if it were not there (callers decide: a live scrape lands the good lines and records the
error, a replay file stops naming file and line). Metric names are kept exactly as written (no
``_total`` appended), timestamps are integer milliseconds in both formats (OpenMetrics seconds
converted exactly, sub-millisecond digits cut as Prometheus does), ``le``/``quantile`` of classic
histograms and summaries are written as Prometheus 3 stores them (``le="1"`` -> ``"1.0"``).

OpenMetrics (``fmt="openmetrics"``): ``# EOF`` required, exemplars checked and dropped, the
``_created`` samples of counters, histograms and summaries dropped (a creation time, not a value),
native-histogram lines (``name {count:24,sum:100,...}``) skipped with one warning per family. Both
formats also take the name inside the braces (``{__name__="m", k="v"} 1 ts``, as ``promtool tsdb
dump`` prints).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from gangscope.records import ScrapeBatch

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_NAME_OK = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "summary": "summary",
          "untyped": "untyped", "gaugehistogram": "gaugehistogram", "gauge_histogram": "gaugehistogram"}
_OM_TYPES = {t: t for t in ("counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset",
                            "unknown")}
_OM_CREATED = {"counter", "histogram", "gaugehistogram", "summary"}  # families whose _created is a time
_CHECKED = {"histogram", "gaugehistogram", "summary"}  # text: types whose samples get the typed checks
_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created", "_gcount", "_gsum", "_info")
_TEXT_META = re.compile(r"#[ \t]+(HELP|TYPE)[ \t]+")
_OM_TS = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SURROGATE = re.compile("[\udc80-\udcff]")
_NATIVE = re.compile(r"\{[a-z_]+:(?:\[[^\[\]{}]*\]|[^,\[\]{}]+)(?:,[a-z_]+:(?:\[[^\[\]{}]*\]|[^,\[\]{}]+))*\}")
_INT64 = 1 << 63
FORMATS = ("text", "openmetrics")


@dataclass(slots=True)
class Parsed:
    """Samples of one exposition text, column by column (sample ``i`` is one series)."""

    metric: list[str] = field(default_factory=list)
    labels: list[dict[str, str]] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    ts_ms: list[int | None] = field(default_factory=list)
    line: list[int] = field(default_factory=list)  # 1-based line of each sample, for error messages
    types: dict[str, str] = field(default_factory=dict)  # from # TYPE lines (gauge_histogram as gaugehistogram)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason), lines skipped
    warnings: list[tuple[int, str]] = field(default_factory=list)  # skipped on purpose (native histograms, ...)
    cut: bool = False  # OpenMetrics without its "# EOF": the text may be cut short, so none of it is trusted

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


def _q(s: str) -> str:
    """``s`` quoted for an error message, cut short (a 1 MB garbage line must not become a 1 MB reason)."""
    return repr(s[:40] + "..." if len(s) > 40 else s)


def _read_quoted(s: str, i: int) -> tuple[str, int]:
    """The string quoted at ``s[i]`` (only ``\\\\``, ``\\"`` and ``\\n`` escapes) and the index after it."""
    out: list[str] = []
    i += 1
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            esc = _ESCAPES.get(s[i + 1:i + 2])
            if esc is None:
                raise ParseError(f"invalid escape sequence {_q(s[i:i + 2])}")
            out.append(esc)
            i += 2
        elif c == '"':
            return "".join(out), i + 1
        else:
            out.append(c)
            i += 1
    raise ParseError("unterminated quoted string")


def _labels_slow(body: str, om: bool) -> tuple[dict[str, str], str | None]:
    """Slow path: escapes, quoted names, whitespace. Returns (labels, metric name quoted inside the braces).

    Text 0.0.4 takes whitespace around names, ``=`` and commas, a label set of a lone comma, and (as
    Prometheus does) pairs without a comma between them; OpenMetrics only a space after a comma."""
    labels: dict[str, str] = {}
    quoted_name: str | None = None
    ws = "" if om else " \t"
    i, n = 0, len(body)
    while i < n and body[i] in ws:
        i += 1
    if not om and body[i:].strip(" \t") == ",":
        return labels, None
    while i < n:
        if body[i] == '"':
            key, i = _read_quoted(body, i)
            quoted = True
        else:
            m = _LABEL_NAME.match(body, i)
            if not m:
                raise ParseError(f"invalid label name at {_q(body[i:])}")
            key, i, quoted = m.group(0), m.end(), False
        while i < n and body[i] in ws:
            i += 1
        if i < n and body[i] == "=":
            i += 1
            while i < n and body[i] in ws:
                i += 1
            if i >= n or body[i] != '"':
                raise ParseError(f"label {_q(key)}: value is not quoted")
            val, i = _read_quoted(body, i)
            if key in labels:
                raise ParseError(f"duplicate label {_q(key)}")
            labels[key] = val
        elif not quoted:
            raise ParseError(f"label {_q(key)}: expected '='")
        elif quoted_name is not None:
            raise ParseError("metric name given twice")
        else:
            quoted_name = key  # {"metric.name", ...}
        while i < n and body[i] in ws:
            i += 1
        if i >= n:
            break
        if body[i] == ",":
            i += 1
            while i < n and body[i] in (ws or " "):
                i += 1
            if i < n and body[i] == ",":
                raise ParseError("two commas in the label set")
            if i >= n and om:
                raise ParseError("trailing comma in the label set")
        elif om or not (body[i] == '"' or _LABEL_NAME.match(body, i)):
            raise ParseError(f"expected ',' at {_q(body[i:])}")
    return labels, quoted_name


_NAMES_OK: set[str] = set()  # metric names that are legacy names (``_NAME_OK``), none other: a cache of the check
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
    v = float(text)
    if v != v and text[0] in "+-":  # Go's ParseFloat (what Prometheus uses) has no signed NaN
        raise ValueError(text)
    return v


def _text_ts_ms(text: str) -> int:
    if "_" in text:
        raise ValueError(text)
    ts = int(text)
    if not -_INT64 <= ts < _INT64:
        raise ValueError(text)
    return ts


def _om_ts_ms(text: str) -> int:
    """OpenMetrics timestamp (seconds) to integer milliseconds, exactly (no float rounding, so
    ``12345678901234567890.123`` stays itself), sub-millisecond digits cut toward zero as Prometheus does."""
    if not _OM_TS.fullmatch(text):
        raise ValueError(text)
    if "e" in text or "E" in text:
        try:
            return int(Decimal(text) * 1000)
        except InvalidOperation:
            raise ValueError(text) from None
    neg = text[0] == "-"
    whole, _, frac = text.lstrip("+-").partition(".")
    ms = int(whole or "0") * 1000 + int((frac + "000")[:3])
    return -ms if neg else ms


_NORMAL: dict[str, str] = {}  # le/quantile text -> as Prometheus stores it


def _normal_float(text: str) -> str:
    """A ``le``/``quantile`` value as Prometheus 3 stores it (Go's shortest ``%g``, ``.0`` added to integers)."""
    out = _NORMAL.get(text)
    if out is not None:
        return out
    f = _value(text)
    if text != text.strip():
        raise ValueError(text)
    if f != f:
        out = "NaN"
    elif f in (float("inf"), float("-inf")):
        out = "+Inf" if f > 0 else "-Inf"
    elif f == 0:
        out = "-0.0" if str(f)[0] == "-" else "0.0"
    else:
        sign, digits, exp = Decimal(repr(f)).normalize().as_tuple()
        d = "".join(map(str, digits))
        x = len(d) + int(exp) - 1  # decimal exponent of the first digit
        if x < -4 or x >= 21 or x >= 6:  # Go: %e when the exponent is < -4 or >= 6 (shortest precision)
            out = d[0] + ("." + d[1:] if len(d) > 1 else "") + f"e{'-' if x < 0 else '+'}{abs(x):02d}"
        elif x < 0:
            out = "0." + "0" * (-x - 1) + d
        else:
            out = d[:x + 1] + ("." + d[x + 1:] if len(d) > x + 1 else "") + "0" * max(0, x + 1 - len(d))
        if sign:
            out = "-" + out
        if "." not in out and "e" not in out:
            out += ".0"
    if len(_NORMAL) < 10_000:
        _NORMAL[text] = out
    return out


def _family(name: str, types: dict[str, str]) -> tuple[str, str, str] | None:
    """(family, type, suffix) of a sample name, from the # TYPE lines seen."""
    t = types.get(name)
    if t is not None:
        return name, t, ""
    for s in _SUFFIXES:
        if name.endswith(s):
            t = types.get(name[:-len(s)])
            if t is not None:
                return name[:-len(s)], t, s
    return None


def _integral(v: float) -> bool:
    return v == v and v not in (float("inf"), float("-inf")) and v == int(v)


def _typed(name: str, labels: dict[str, str], v: float, types: dict[str, str], om: bool,
           exemplar: bool) -> str | None:
    """Per-line checks that need the sample's family type; returns the reason of an error, or None.
    Normalises ``le``/``quantile`` in place. Text: expfmt's checks; OpenMetrics: prometheus_client's."""
    fam = _family(name, types)
    if fam is None:
        return None  # no TYPE: exemplars allowed (Prometheus' suite), nothing to check
    _, t, suffix = fam
    if om and exemplar and suffix == "_created":
        return f"exemplar on {_q(name)}: not on a creation time"
    negative = v < 0 or v != v
    if t in ("histogram", "gaugehistogram"):
        if suffix == "_bucket":
            le = labels.get("le")
            if le is None:
                return "histogram bucket without le" if om else None
            try:
                norm = _normal_float(le)
            except ValueError:
                return f"le {_q(le)} is not a float"
            if om and le.lstrip("+-").lower() in ("inf", "infinity") and le not in ("+Inf", "Inf"):
                return f"le {_q(le)} is not a float"
            if t == "histogram":
                labels["le"] = norm
            if negative if om else v < 0:
                return "negative or NaN bucket count"
            if om and not _integral(v):
                return "bucket count is not an integer"
        elif suffix in ("_count", "_gcount"):
            if negative if om else v < 0:
                return "negative or NaN count"
            if om and not _integral(v):
                return "count is not an integer"
        elif om and suffix in ("_sum", "_gsum"):
            if v != v or (suffix == "_sum" and t == "histogram" and v < 0):
                return "negative or NaN sum"
            if exemplar:
                return f"exemplar on {_q(name)}: not on a histogram's sum"
    elif t == "summary":
        if suffix == "":
            q = labels.get("quantile")
            if q is None:
                return "summary sample without quantile" if om else None
            try:
                norm = _normal_float(q)
                qf = float(q)
            except ValueError:
                return f"quantile {_q(q)} is not a float"
            if om and not 0 <= qf <= 1:
                return f"quantile {_q(q)} is not in [0, 1]"
            labels["quantile"] = norm
            if om and v < 0:
                return "negative quantile value"
            if om and exemplar:
                return f"exemplar on {_q(name)}: not on a quantile"
        elif om and suffix in ("_count", "_sum") and (negative or (suffix == "_count" and not _integral(v))):
            return f"negative, NaN or fractional {suffix[1:]}"
    elif not om:
        return None
    elif t == "counter":
        if suffix == "":
            return f"counter sample {_q(name)} must end with _total"
        if suffix == "_total" and negative:
            return "negative or NaN counter value"
    elif t in ("stateset", "info", "gauge", "unknown"):
        if exemplar:
            return f"exemplar on {_q(name)}: not on a {t}"
        if t == "stateset" and (v not in (0, 1) or not labels):
            return "stateset sample must be 0 or 1 and have a state label"
        if t == "info" and v != 1:
            return "info sample must be 1"
    return None


def _exemplar(text: str) -> None:
    """Check an OpenMetrics exemplar, ``{labels} value [timestamp]`` (the part after `` # ``)."""
    i, n, inq = 1, len(text), False
    while i < n and (inq or text[i] != "}"):
        if text[i] == "\\" and inq:
            i += 1
        elif text[i] == '"':
            inq = not inq
        i += 1
    if i >= n:
        raise ParseError("exemplar: missing '}'")
    body = text[1:i]
    labels, quoted = _labels_slow(body, True) if body else ({}, None)
    if quoted is not None:
        raise ParseError("exemplar: a label without a value")
    if any("\x00" in v for v in labels.values()):  # Prometheus refuses it here, though not in a series' labels
        raise ParseError("exemplar: a NUL byte in a label value")
    if sum(len(k) + len(v) for k, v in labels.items()) > 128:
        raise ParseError("exemplar labels longer than 128 characters")
    rest = text[i + 1:]
    parts = rest[1:].split(" ")
    if rest[:1] != " " or not 1 <= len(parts) <= 2 or "" in parts:
        raise ParseError("exemplar: expected one space, a value and an optional timestamp")
    try:
        _value(parts[0])
        if len(parts) == 2:
            _om_ts_ms(parts[1])
    except ValueError:
        raise ParseError(f"exemplar: bad value or timestamp {_q(rest)}") from None


def _strip_exemplar(line: str) -> tuple[str, str | None]:
    """(sample part, exemplar) of an OpenMetrics line: the exemplar starts at a `` # {`` that is not inside a
    quoted label value (an even number of unescaped quotes before it)."""
    i = line.find(" # {")
    while i >= 0:
        head = line[:i]
        if (head.count('"') - head.count('\\"')) % 2 == 0:
            return head, line[i + 3:]
        i = line.find(" # {", i + 1)
    return line, None


def _om_strict(raw: str, line: str) -> None:
    """What OpenMetrics forbids and text 0.0.4 allows (the OpenMetrics parsers' own rules): stray whitespace,
    a trailing comma in the label set, anything but one space between fields."""
    if raw != raw.strip(" \t\r"):
        raise ParseError("leading or trailing whitespace")
    close = line.rfind("}")
    if close >= 0:
        if line[:close].endswith(","):
            raise ParseError("trailing comma in the label set")
        if " " in line[:line.find("{")] or "\t" in line:
            raise ParseError("whitespace where OpenMetrics allows none")
        tail = line[close + 1:]
        if not tail.startswith(" "):
            raise ParseError("expected one space after the labels")
    else:
        tail = line[line.find(" "):] if " " in line else ""
    if "  " in tail or tail.endswith(" ") or "\t" in line:
        raise ParseError("fields are separated by exactly one space")


def _meta(line: str, om: bool) -> tuple[str, str, str] | None:
    """(keyword, metric name, rest) of a ``# HELP``/``# TYPE``/``# UNIT`` line; None for a text comment."""
    if om:
        kw = line[2:6]
        if line[:2] != "# " or kw not in ("HELP", "TYPE", "UNIT") or line[6:7] != " ":
            raise ParseError("expected '# HELP', '# TYPE', '# UNIT' or '# EOF'")
        i = 7
    else:
        m = _TEXT_META.match(line)
        if not m:
            return None
        kw, i = m.group(1), m.end()
    if line[i:i + 1] == '"':
        name, i = _read_quoted(line, i)
    else:
        m = _NAME_OK.match(line, i)
        if not m:
            raise ParseError(f"invalid metric name in # {kw}")
        name, i = m.group(0), m.end()
    if om:
        if line[i:i + 1] != " ":
            raise ParseError(f"expected one space and text after the name in # {kw}")
        return kw, name, line[i + 1:]
    if i < len(line) and line[i] not in " \t":
        raise ParseError(f"invalid metric name in # {kw}")
    return kw, name, line[i:].strip(" \t")


def _text_meta_fast(line: str, names_ok: set[str]) -> tuple[str, str, str] | None:
    """``_meta(line, False)`` for the lines exporters write (``# HELP name text``, ``# TYPE name type``:
    one space each, a legacy name), by one ``split``; None for anything else, which ``_meta`` reads.

    Exact, not an approximation (``test_metadata_fast_path_reads_as_the_grammar``): split on single spaces,
    ``#``, ``HELP``/``TYPE`` and a whole legacy name are the spans ``_TEXT_META`` and ``_NAME_OK`` match, and
    the rest after one space, stripped of blanks and tabs, is what ``_meta`` strips. ``names_ok`` holds only
    legacy names (``_NAMES_OK``); a valid name is added to it, as the caller does after ``_meta``."""
    parts = line.split(" ", 3)
    if len(parts) < 3 or parts[0] != "#" or parts[1] not in ("HELP", "TYPE"):
        return None
    name = parts[2]
    if name not in names_ok:
        if not _NAME_OK.fullmatch(name):
            return None
        names_ok.add(name)
    return parts[1], name, parts[3].strip(" \t") if len(parts) == 4 else ""


def _native(line: str) -> str | None:
    """The family of a native-histogram sample line (``name{labels} {count:..,sum:..}``), else None."""
    i = line.find(" {")
    while i >= 0:
        if _NATIVE.fullmatch(line, i + 1) or _NATIVE.fullmatch(line.rstrip(), i + 1):
            head = line[:i].strip()
            if head.startswith("{"):
                try:
                    return _labels_slow(head[1:-1], False)[1] or None
                except ParseError:
                    return None
            return head.split("{", 1)[0] or None
        i = line.find(" {", i + 1)
    return None


def _bad_utf8_lines(text: str, first_line: int) -> dict[int, str]:
    """Lines holding bytes that were not UTF-8 (decoded with ``surrogateescape``), with the first such byte."""
    out: dict[int, str] = {}
    for m in _SURROGATE.finditer(text):
        line = text.count("\n", 0, m.start()) + first_line
        out.setdefault(line, f"not UTF-8 (byte 0x{ord(m.group(0)) - 0xDC00:02x})")
    return out


def parse_text(text: str, *, require_timestamps: bool = False, first_line: int = 1, fmt: str = "text",
               eof_required: bool = True, one_exposition: bool = True) -> Parsed:
    """Parse one exposition text; broken lines go to ``errors`` (with their line number) and are skipped.

    ``fmt`` is ``text`` (0.0.4) or ``openmetrics``. ``require_timestamps`` makes a sample without a
    timestamp an error (replay files). ``first_line`` numbers the lines when ``text`` is a slice of a
    larger file; ``eof_required=False`` for such slices of OpenMetrics (the file's end has ``# EOF``).
    ``one_exposition=False`` for replay files, which hold many scrapes: ``# HELP``/``# TYPE`` may repeat
    (CONTRACT section 2), where in one exposition a second one, or one after the family's samples, is an
    error. Bytes that were not UTF-8 (decoded with ``surrogateescape``) make their line an error.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown exposition format {fmt!r}")
    om = fmt == "openmetrics"
    types_ok = _OM_TYPES if om else _TYPES
    out = Parsed()
    metric, labels_col, value_col, ts_col, line_col = out.metric, out.labels, out.value, out.ts_ms, out.line
    errors, types = out.errors, out.types
    name_ok = _NAME_OK.fullmatch
    names_ok = _NAMES_OK  # legacy names already checked (each repeats per series, and scrape after scrape)
    if len(names_ok) > 100_000:
        names_ok.clear()
    bad_utf8 = None
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:  # bytes that were not UTF-8, kept as surrogates by the caller's decode
            bad_utf8 = _bad_utf8_lines(text, first_line)
    checked = False  # a # TYPE made some family need the typed checks (text: histograms and summaries)
    helps: set[str] = set()
    units: set[str] = set()
    sampled: set[str] = set()  # sample names so far (one_exposition: metadata after samples)
    prev_name = ""
    bodies: dict[str, dict[str, str]] = {}  # label set text -> its labels (dcgm: 25 metrics share each set)
    seen_ts: set[tuple[str, int]] = set()  # (series as written, timestamp): a repeat is dropped, first kept
    dup_ts: list[int] = []
    natives: dict[str, int] = {}
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
            if om:
                errors.append((lineno, "blank line"))
            continue
        last = lineno
        if eof_at:
            if om:
                errors.append((lineno, "content after # EOF"))
                break
            eof_at = 0
        if bad_utf8 and lineno in bad_utf8:
            errors.append((lineno, bad_utf8[lineno]))
            continue
        if line[0] == "#":
            if line == "# EOF" and (raw == line or not om):
                eof_at = lineno
                continue
            try:
                if om and raw != line and raw.rstrip(" ") != raw.rstrip():
                    raise ParseError("leading or trailing whitespace")
                meta = None if om else _text_meta_fast(line, names_ok)
                if meta is not None:
                    kw, name, rest = meta  # the common case: one space each, a legacy name
                else:
                    meta = _meta(raw if om else line, om)
                    if meta is None:
                        continue
                    kw, name, rest = meta
                    if not om and _NAME_OK.fullmatch(name):
                        names_ok.add(name)
                if one_exposition:
                    if om and (name in sampled or any(name + s in sampled for s in _SUFFIXES)):
                        raise ParseError(f"# {kw} {_q(name)} after its samples")
                    if kw == "HELP" and (rest or om):
                        if name in helps:
                            raise ParseError(f"second # HELP for {_q(name)}")
                        helps.add(name)
                    elif kw == "TYPE":
                        if name in types:
                            raise ParseError(f"second # TYPE for {_q(name)}")
                        if name in sampled:
                            raise ParseError(f"# TYPE {_q(name)} after its samples")
                        if om and any(name + s in types or (name.endswith(s) and types.get(name[:-len(s)]))
                                      for s in _SUFFIXES):
                            raise ParseError(f"# TYPE {_q(name)} clashes with another family's names")
                    elif kw == "UNIT":
                        if name in units:
                            raise ParseError(f"second # UNIT for {_q(name)}")
                        units.add(name)
                if kw == "TYPE":
                    typ = types_ok.get(rest)
                    if typ is None:
                        raise ParseError(f"unknown metric type {_q(rest)}")
                    types[name] = typ
                    checked = checked or om or typ in _CHECKED
                elif kw == "UNIT" and rest:
                    if not name.endswith("_" + rest):
                        raise ParseError(f"unit {_q(rest)} does not end the metric name {_q(name)}")
                    if types.get(name) in ("info", "stateset"):
                        raise ParseError(f"a {types[name]} has no unit")
            except ParseError as e:
                errors.append((lineno, str(e)))
            continue
        exemplar = None
        if om and " # {" in line:
            line, exemplar = _strip_exemplar(line)
        try:
            brace = line.find("{")
            if brace >= 0:
                close = line.rfind("}")
                if close < brace:
                    raise ParseError("missing '}'")
                name = line[:brace].rstrip()
                body = line[brace + 1:close]
                rest = line[close + 1:]
                labels = bodies.get(body)
                if labels is not None:
                    labels = labels.copy()  # each sample owns its dict
                elif (labels := _fast_labels(body)) is not None:
                    # this line may change its dict only by taking __name__ out or by the typed checks (le,
                    # quantile), and only before the next line; then the set is kept as it was read
                    bodies[body] = labels.copy() if checked or "__name__" in labels else labels
                else:
                    labels, quoted = _labels_slow(body, om)
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
                        raise ParseError(f"invalid metric name {_q(name)}")
                    names_ok.add(name)
                parts = rest.split()
            else:
                parts = line.split()
                name = parts.pop(0)
                if name not in names_ok:
                    if not name_ok(name):
                        raise ParseError(f"invalid metric name {_q(name)}")
                    names_ok.add(name)
                labels = {}
            if not parts or len(parts) > 2:
                raise ParseError("expected a value and an optional timestamp after the labels")
            v = parts[0]
            try:  # _value inline (once per sample)
                value = float(v)
            except ValueError:
                raise ParseError(f"bad value {_q(v)}") from None
            if "_" in v or (value != value and v[0] in "+-"):
                raise ParseError(f"bad value {_q(v)}")
            if len(parts) == 2:
                try:
                    ts: int | None = _om_ts_ms(parts[1]) if om else _text_ts_ms(parts[1])
                except ValueError:
                    unit = "seconds" if om else "integer milliseconds"
                    raise ParseError(f"bad timestamp {_q(parts[1])} (expected {unit})") from None
            elif require_timestamps:
                raise ParseError("sample has no timestamp (replay files need one on every sample)")
            else:
                ts = None
            if om:
                _om_strict(raw, line)
                if exemplar is not None:
                    _exemplar(exemplar)
            if checked:
                why = _typed(name, labels, value, types, om, exemplar is not None)
                if why:
                    raise ParseError(why)
                if om and name.endswith("_created") and types.get(name[:-8]) in _OM_CREATED:
                    continue
        except ParseError as e:
            family = _native(line if exemplar is None else line + " # " + exemplar)
            if family is not None:
                if family not in natives:
                    natives[family] = lineno
                continue
            errors.append((lineno, str(e)))
            continue
        if name != prev_name:
            prev_name = name
            if one_exposition:
                sampled.add(name)
        if ts is not None:
            key = (line[:close + 1] if brace >= 0 else name, ts)
            if key in seen_ts:
                dup_ts.append(lineno)
                continue
            seen_ts.add(key)
        metric.append(name)
        labels_col.append(labels)
        value_col.append(value)
        ts_col.append(ts)
        line_col.append(lineno)
    for family, at in natives.items():
        out.warnings.append((at, f"native histogram samples of {_q(family)} skipped (not stored)"))
    if dup_ts:
        out.warnings.append((dup_ts[0], f"{len(dup_ts)} sample(s) repeating a timestamp of their series dropped "
                                        "(the first is kept)"))
    if om and eof_required and not eof_at:
        out.cut = True
        if not errors:
            errors.append((max(last, first_line), "OpenMetrics text does not end with # EOF"))
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
