"""The parser's shortcuts read exactly as its full grammar: the ``# HELP``/``# TYPE`` fast path against
``_meta``, and the label sets shared by several samples of one text against each sample parsed alone,
on chosen lines and on fuzzed ones (fixed seed, so a failure reproduces)."""

from __future__ import annotations

import math
import random

import pytest

from collectors.metrics import parse
from collectors.metrics.parse import ParseError, _meta, _text_meta_fast, parse_text

# Lines exporters write, and every way to be almost like them.
META_LINES = [
    "# HELP m Some help.",
    "# TYPE m counter",
    "# TYPE m gauge",
    "# TYPE m gauge_histogram",
    "# HELP m",
    "# HELP m ",
    "# TYPE m",
    '# HELP a:b_c9 text with # = " quotes and \\n',
    "# HELP m  two spaces",
    "# HELP m \ttab then text",
    "# HELP  m x",
    "# HELP\tm x",
    "#\tHELP m x",
    "#  HELP m x",
    "# HELP\x0bm x",
    "# HELP m\x0bx",
    "# TYPE m\x0bcounter",
    "# TYPE m \x0bcounter",
    "# TYPE m counter\x0b",
    "#\x0bTYPE m gauge",
    "# TYPE m\tcounter",
    "# TYPE m\xa0counter",
    "# HELP m\u2003x",
    "# HELP 9m x",
    "# HELP m-x y",
    "# HELP m.x y",
    '# HELP "m.x" y',
    '# TYPE "m.x" gauge',
    '# HELP "m x',
    "# HELP é x",
    "# HELPX m x",
    "# help m x",
    "# UNIT m_s s",
    "# EOF",
    "#",
    "# ",
    "# HELP",
    "# HELP ",
    "# TYPE  ",
    "#HELP m x",
    "# HELP :m x",
    "# HELP _ x",
    "# HELP m\rx",
    "# HELP m\x00 x",
    "# TYPE m counter extra",
    "# TYPE m_bucket histogram",
]


def _grammar(line: str) -> tuple[str, str, str] | str | None:
    try:
        return _meta(line, False)
    except ParseError as e:
        return f"error: {e}"


def _agrees(line: str, names_ok: set[str]) -> bool:
    """The fast path answers ``_meta``'s own (kw, name, rest) or passes (None); it takes the line exactly when
    its name is a legacy name, and then remembers it as ``parse_text`` does after ``_meta``."""
    before = set(names_ok)
    fast = _text_meta_fast(line, names_ok)
    if fast is None:
        assert names_ok == before, line
        return False
    assert fast == _grammar(line), (line, fast, _grammar(line))
    assert names_ok == before | {fast[1]} and parse._NAME_OK.fullmatch(fast[1]), line
    return True


def test_metadata_fast_path_reads_as_the_grammar() -> None:
    taken = [line for line in META_LINES if _agrees(line, set())]
    # The common lines go the fast way (a fast path that never answers would pass the check above).
    assert {
        "# HELP m Some help.",
        "# TYPE m counter",
        "# HELP m",
        "# HELP m  two spaces",
        "# TYPE m counter extra",
    } <= set(taken)
    assert "# TYPE m\x0bcounter" not in taken and "#\tHELP m x" not in taken
    # A name already known (parse_text remembers only legacy names) takes the same answers.
    assert [line for line in META_LINES if _agrees(line, {"m", "a:b_c9"})] == taken


def test_whitespace_in_metadata_is_blank_and_tab_only() -> None:
    """The grammar separates the fields of a HELP/TYPE line by blanks and tabs only (expfmt, and Prometheus' lexer
    up to the name); the shortcut taken before this fast path split on any whitespace, so it read a comment as a
    TYPE and, once ``m`` was known, set the type of ``# TYPE m\\vcounter``."""
    p = parse_text("# HELP m x\n# TYPE m\x0bcounter\nm 1\n")
    assert p.types == {} and p.errors == [(2, "invalid metric name in # TYPE")] and p.metric == ["m"]
    p = parse_text("# TYPE m counter\n#\x0bTYPE m gauge\nm 1\n")  # a comment, not a second TYPE
    assert p.types == {"m": "counter"} and not p.errors


_PIECES = [
    " ",
    "  ",
    "\t",
    "\x0b",
    "\x0c",
    "\xa0",
    "\u2003",
    "#",
    "HELP",
    "TYPE",
    "UNIT",
    "EOF",
    "m",
    "a_b",
    ":",
    "9",
    ".",
    "-",
    '"',
    "\\",
    "\\n",
    "=",
    "counter",
    "gauge",
    "histogram",
    "summary",
    "é",
    "{",
    "}",
    ",",
    "\r",
    "\x00",
    "",
]


def _mutate(rng: random.Random, line: str) -> str:
    for _ in range(rng.randint(1, 3)):
        i = rng.randint(0, len(line))
        op = rng.random()
        if op < 0.4:
            line = line[:i] + rng.choice(_PIECES) + line[i:]
        elif op < 0.7:
            line = line[:i] + rng.choice(_PIECES) + line[i + rng.randint(1, 3) :]
        else:
            line = line[:i] + line[i + rng.randint(1, 3) :]
    return line


def _meta_line(rng: random.Random) -> str:
    name = rng.choice(["m", "m_total", "a:b_c9", "node_cpu_seconds_total", '"m.x"', "h"])
    kw = rng.choice(["HELP", "TYPE", "TYPE", "UNIT"])
    tail = rng.choice(
        [
            "counter",
            "gauge",
            "histogram",
            "summary",
            "untyped",
            "gauge_histogram",
            "",
            "Help text.",
            'text with # = " and \\n',
            "seconds",
        ]
    )
    line = f"# {kw} {name} {tail}"
    return line if rng.random() < 0.3 else _mutate(rng, line)


def test_metadata_fast_path_fuzzed() -> None:
    rng = random.Random(38)
    taken = sum(_agrees(_meta_line(rng), rng.choice([set(), {"m", "h", "a:b_c9"}])) for _ in range(20_000))
    assert taken > 4_000  # the fuzz reaches the fast path, not only the fallback


def _sample_line(rng: random.Random) -> str:
    name = rng.choice(["m", "m_total", "h_bucket", "h_count", "s", "node_cpu_seconds_total"])
    body = rng.choice(
        [
            'a="1"',
            'le="1"',
            'le="+Inf"',
            'quantile="0.5"',
            'cpu="0",mode="idle"',
            '"m.x"',
            '__name__="m",a="1"',
            'a="x\\"y"',
            "",
        ]
    )
    line = f"{name}{{{body}}} {rng.choice(['1', '2.5', 'NaN', '-1'])}" + rng.choice(["", " 1000", " 2000"])
    return line if rng.random() < 0.8 else _mutate(rng, line)


def _fuzzed_text(rng: random.Random) -> str:
    lines = [_meta_line(rng) if rng.random() < 0.4 else _sample_line(rng) for _ in range(rng.randint(1, 12))]
    lines = [rng.choice(["", " ", "\t"]) + ln + rng.choice(["", "", " ", "\r", "\t"]) for ln in lines]
    return "\n".join(lines) + rng.choice(["\n", ""])


def _seen(p: parse.Parsed) -> tuple:
    values = ["NaN" if math.isnan(v) else repr(v) for v in p.value]
    return (p.metric, p.labels, values, p.ts_ms, p.line, p.types, p.errors, p.warnings, p.cut)


@pytest.mark.parametrize("one_exposition", [True, False])
def test_metadata_fast_path_fuzzed_texts_parse_as_without_it(monkeypatch, one_exposition: bool) -> None:
    """Whole texts, the line stripping and the checks after the metadata included, with and without the fast path."""
    rng = random.Random(3838)
    texts = [_fuzzed_text(rng) for _ in range(3_000)]
    parse._NAMES_OK.clear()  # each pass checks the names itself
    fast = [_seen(parse_text(t, one_exposition=one_exposition)) for t in texts]
    remembered = set(parse._NAMES_OK)
    parse._NAMES_OK.clear()
    monkeypatch.setattr(parse, "_text_meta_fast", lambda line, names_ok: None)
    for t, seen in zip(texts, fast, strict=True):
        assert _seen(parse_text(t, one_exposition=one_exposition)) == seen, t
    assert sum(bool(s[5]) for s in fast) > 300  # many texts had a # TYPE read
    # the names remembered from text to text (checked once) are legacy names only, which the fast path relies on
    assert remembered and all(parse._NAME_OK.fullmatch(n) for n in remembered | parse._NAMES_OK)


def test_samples_sharing_a_label_set_each_own_their_labels() -> None:
    """The labels of a label set seen earlier in the text are reused: the changes one sample gets (``le``
    written as Prometheus stores it, ``__name__`` taken out) must not reach the other."""
    p = parse_text(
        '# TYPE h histogram\nh_bucket{le="1"} 1\nother{le="1"} 2\nh_bucket{le="1"} 3\n'
        '{__name__="n",a="1"} 1 1000\n{__name__="n",a="1"} 2 2000\n'
    )
    assert p.metric == ["h_bucket", "other", "h_bucket", "n", "n"] and not p.errors
    assert p.labels == [{"le": "1.0"}, {"le": "1"}, {"le": "1.0"}, {"a": "1"}, {"a": "1"}]
    assert len({id(lb) for lb in p.labels}) == 5
    # read before any # TYPE made the typed checks run, then reused by a bucket they change
    p = parse_text('other{le="1"} 2\n# TYPE h histogram\nh_bucket{le="1"} 1\nother{le="1"} 3\n')
    assert p.labels == [{"le": "1"}, {"le": "1.0"}, {"le": "1"}] and not p.errors


def test_shared_label_sets_fuzzed_parse_as_each_line_alone() -> None:
    rng = random.Random(838)
    for _ in range(500):
        head = "# TYPE h histogram\n# TYPE s summary\n"
        lines = [_sample_line(rng) for _ in range(rng.randint(2, 15))]
        whole = parse_text(head + "\n".join(lines), one_exposition=False)
        alone = {}
        for i, line in enumerate(lines, start=3):
            q = parse_text(head + line, one_exposition=False)
            if q.metric:
                alone[i] = (q.metric[0], q.labels[0])
        got = {i: (n, lb) for i, n, lb in zip(whole.line, whole.metric, whole.labels, strict=True)}
        assert got == {i: v for i, v in alone.items() if i in got}, lines
        assert len({id(lb) for lb in whole.labels}) == len(whole.labels)
