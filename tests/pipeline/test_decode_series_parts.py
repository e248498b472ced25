"""A target sends the same series part (``mn`` .. ``n``) at every scrape: a batch's records share theirs, which is
parsed and checked once (``decode._cut_heads``), and everything decodes exactly as when each record is read whole."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangscope.records import ScrapeBatch
from pipeline import decode
from tests.pipeline.test_decode_readers import _same

DAY_MS = 86_400_000
# Broken records, each refused with its own reason, in the middle of well-formed ones.
BROKEN = [
    {"mc": [2]}, {"mc": [5, -1]}, {"lr": [0, 2, 0]}, {"lr": [0, 2, 0, 1]}, {"lr": [0, 2, 1, 2]},
    {"mc": [2, None]}, {"s": [0, None, 2, 3]}, {"ls": ["[1]", "{}"]}, {"n": ["x"]}, {"ni": [9], "nv": ["NaN"]},
    {"dt": [1, None, 3, 4]}, {"v": 2}, {"scraped_at": None}, {"x": [1.0]}, {"s": [0, 0, 0, 9]}, {"mn": None},
]


def _whole(monkeypatch: pytest.MonkeyPatch, values: list[bytes]) -> decode.Decoded:
    with monkeypatch.context() as m:
        m.setattr(decode, "_cut_heads", lambda values: None)
        return decode.decode_scrapes(values)


def _cuts(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records, batch by batch, whether the series parts were cut out."""
    seen: list[bool] = []
    cut = decode._cut_heads

    def spy(values: list[bytes]) -> object:
        out = cut(values)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(decode, "_cut_heads", spy)
    return seen


def _broken(i: int | None) -> bytes:
    """Broken record ``i`` of BROKEN (None: the same record well-formed)."""
    b = ScrapeBatch("c1", "http://n0:9400/metrics", "dcgm", "n0:9400", 1_772_366_400_000)
    for g in range(2):
        for metric in ("util", "power"):
            b.add_sample(b.add_series(metric, {"gpu": str(g)}), 1.0)
    rec = dict(json.loads(b.to_bytes()), **({} if i is None else BROKEN[i]))
    return json.dumps(rec, separators=(",", ":")).encode()


value = st.sampled_from([0.0, 1.5, -2.25, 1e300, math.nan, math.inf, -math.inf])


@st.composite
def batches(draw: st.DrawFn) -> list[bytes]:
    """Scrapes of a few targets, each with its own series, around a UTC midnight (so a record's own sample times
    can fall on two days), some with their own sample times, repeated series and non-finite values."""
    targets = draw(st.integers(1, 3))
    layouts = [draw(st.lists(st.tuples(st.sampled_from(["a", "b", "c_total"]), st.integers(0, 3)), min_size=1,
                             max_size=6, unique=True)) for _ in range(targets)]
    midnight = draw(st.sampled_from([1_772_409_600_000, 0, -3 * DAY_MS]))
    out = []
    for k in range(draw(st.integers(4, 24))):
        t = k % targets
        at = midnight + draw(st.integers(-3, 3)) * 3_600_000
        b = ScrapeBatch("c1", f"http://n{t}:9100/metrics", "node", f"n{t}:9100", at, up=draw(st.booleans()) or k > 0)
        if b.up:
            for metric, i in layouts[t]:
                s = b.add_series(metric, {"i": str(i), "node": f"n{t}"})
                for _ in range(draw(st.integers(1, 2))):
                    own = draw(st.none() | st.integers(-4, 4))
                    b.add_sample(s, draw(value), None if own is None else at + own * 3_600_000)
        out.append(b.to_bytes())
    for at in draw(st.lists(st.integers(0, len(out) - 1), max_size=2)):
        out[at] = _broken(draw(st.integers(0, len(BROKEN) - 1)))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=batches())
def test_shared_series_parts_decode_as_records_read_whole(monkeypatch, values: list[bytes]) -> None:
    seen = _cuts(monkeypatch)
    cut = decode.decode_scrapes(values)
    # A few targets, their series parts repeat: cut, unless a broken record has none ("mn": null).
    assert seen == [all(b',"mn":[' in v for v in values)]
    _same(cut, _whole(monkeypatch, values))


def test_a_broken_series_part_shared_by_records_refuses_each_of_them(monkeypatch) -> None:
    values = [_broken(2)] * 3 + [_broken(3)] * 2 + [_broken(None)] * 4
    seen = _cuts(monkeypatch)
    d = decode.decode_scrapes(values)
    assert seen == [True]
    assert d.dead == [(i, "label-set runs (lr) are not (first, count) pairs") for i in range(3)] + [
        (i, "label-set runs cover 3 series, mc 4") for i in (3, 4)]
    assert d.rows.height == 4 * 4 and d.series is not None and d.series.height == 4
    _same(d, _whole(monkeypatch, values))


def test_sample_series_ids_are_those_of_the_samples_own_text() -> None:
    """Ids come from a table per (target, series part, day): each is still the hash of the sample's own series
    text and day (``with_series_ids``, what samples landed without Kafka get), across a midnight."""
    values = []
    for k in range(12):
        b = ScrapeBatch("c1", f"http://n{k % 2}:9100/metrics", "node", f"n{k % 2}:9100",
                        1_772_409_600_000 + (k - 6) * 600_000)
        for i in range(3):
            b.add_sample(b.add_series("m", {"i": str(i)}), float(k), b.scraped_at_ms + (i - 1) * 1_200_000)
        values.append(b.to_bytes())
    d = decode.decode_scrapes(values)
    assert d.series is not None and d.series["day"].n_unique() == 2
    wide = d.rows.join(d.series.drop("day"), on="series", how="left")
    assert wide["metric"].null_count() == 0 and wide.height == 36
    again = decode.with_series_ids(wide.drop("series").with_columns(pl.col("ts")))
    assert again["series"].equals(wide["series"])
    assert d.series.height == d.rows["series"].n_unique() == 2 * 3 * 2  # n0 and n1, 3 series each, 2 days


def _record(**change: object) -> dict:
    b = ScrapeBatch("c1", "http://n0:9400/metrics", "dcgm", "n0:9400", 1_772_366_400_000)
    b.add_sample(b.add_series("util", {"gpu": "0"}), 1.0)
    return dict(json.loads(b.to_bytes()), **change)


def _text(rec: dict, **dumps: object) -> bytes:
    return json.dumps(rec, **({"separators": (",", ":")} | dumps)).encode()  # type: ignore[arg-type]


HOSTILE = {
    # the series part's keys appear again outside it: which one a reader takes is not ours to guess
    "a series key twice": _text(_record())[:-1] + b',"mn":null}',
    "our own marker key": _text(_record(_h=5)),
    "keys in another order": _text(_record(), sort_keys=True),
    "pretty-printed": _text(_record(), indent=1),
    # the series part only inside a nested object: the cut would put "_h" there, where it is not read back
    "series keys nested": _text({k: v for k, v in _record().items() if k not in decode.HEAD})[:-1]
    + b',"zz":{"a":1,"mn":["x"],"mc":[1],"ls":["{}"],"lr":[0,1],"n":[null],"s":[0]}}',
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_record_not_laid_out_as_the_encoder_writes_it_is_read_whole(monkeypatch, name: str) -> None:
    values = [_text(_record())] * 6 + [HOSTILE[name]] + [_text(_record())] * 3
    assert decode._cut_heads(values) is None or name == "series keys nested"
    d = decode.decode_scrapes(values)
    _same(d, _whole(monkeypatch, values))
    assert d.rows.height >= 9


def test_series_parts_that_do_not_repeat_are_read_whole(monkeypatch) -> None:
    values = [_text(_record(ls=[json.dumps({"gpu": str(i)})])) for i in range(40)]
    seen = _cuts(monkeypatch)
    d = decode.decode_scrapes(values)
    assert seen == [False] and d.rows.height == 40 and not d.dead
