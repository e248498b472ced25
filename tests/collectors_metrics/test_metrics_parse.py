"""The fast parser against prometheus_client's, sample for sample, on real and synthetic scrapes."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.metrics.parse import parse_many, parse_text, to_batch
from tests.collectors_metrics.synthetic import IB_SAMPLE, L4_SAMPLE, h100_scrape, reference_text

EDGE = r'''# HELP esc_total Escapes in label values.
# TYPE esc_total counter
esc_total{path="C:\\dir\\file",quote="say \"hi\"",nl="line1\nline2",eq="a=b,c}d"} 3
# TYPE temps gauge
temps{sensor="a"} NaN
temps{sensor="b"} +Inf
temps{sensor="c"} -Inf
temps{sensor="d"} -1.5e-3 1700000000123
temps{ sensor = "e" , } 7
# TYPE lat_seconds histogram
lat_seconds_bucket{le="0.1"} 1
lat_seconds_bucket{le="+Inf"} 4
lat_seconds_sum 2.5
lat_seconds_count 4
untyped_thing 42 1700000000000
no_labels_empty{} 1
'''


def reference(text: str) -> list[tuple[str, dict[str, str], float, float | None]]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, dict(s.labels), float(s.value), s.timestamp))
    return out


def mine(text: str) -> list[tuple[str, dict[str, str], float, float | None]]:
    p = parse_text(text)
    assert not p.errors, p.errors
    out = []
    for name, labels, value, ts in zip(p.metric, p.labels, p.value, p.ts_ms, strict=True):
        # prometheus_client appends _total to counter samples without it; we keep the name as written.
        if p.types.get(name) == "counter" and not name.endswith("_total"):
            name += "_total"
        out.append((name, labels, value, None if ts is None else ts / 1000))
    return out


def same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x[0] == y[0] and x[1] == y[1] and x[3] == y[3], (x, y)
        assert (math.isnan(x[2]) and math.isnan(y[2])) or x[2] == y[2], (x, y)


@pytest.mark.parametrize("path", [L4_SAMPLE, IB_SAMPLE], ids=["dcgm-L4", "node-infiniband"])
def test_real_samples_match_prometheus_client(path) -> None:
    text = reference_text(path)
    same(mine(text), reference(text))
    assert len(parse_text(text)) > 20


def test_synthetic_h100_scrapes_match_prometheus_client() -> None:
    for host in ("gpu-node-1", "gpu-node-2"):
        text = h100_scrape(host)
        got = mine(text)
        same(got, reference(text))
        assert len(got) == 25 * 8
    p = parse_text(h100_scrape("gpu-node-1"))
    i = p.metric.index("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")
    assert p.labels[i]["Hostname"] == "gpu-node-1" and p.labels[i]["pod"] == "llm-train-worker-0"
    assert "pod" not in p.labels[p.metric.index("DCGM_FI_DEV_GPU_TEMP") + 7]  # idle GPU 7: no pod labels


def test_names_kept_as_written_and_types_known() -> None:
    p = parse_text(L4_SAMPLE.read_text() if L4_SAMPLE.exists() else h100_scrape("n"))
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" in p.metric
    assert not any(m.endswith("_total_total") or m.endswith("COUNTER_total") for m in p.metric)
    assert p.types["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == "counter"
    assert p.types["DCGM_FI_DEV_GPU_TEMP"] == "gauge"


def test_escapes_nonfinite_timestamps_histograms() -> None:
    same(mine(EDGE), reference(EDGE))
    p = parse_text(EDGE)
    labels = p.labels[0]
    assert labels == {"path": "C:\\dir\\file", "quote": 'say "hi"', "nl": "line1\nline2", "eq": "a=b,c}d"}
    v = dict(zip([lb.get("sensor") for lb in p.labels], p.value, strict=True))
    assert math.isnan(v["a"]) and v["b"] == math.inf and v["c"] == -math.inf
    assert p.ts_ms[p.labels.index({"sensor": "d"})] == 1700000000123
    assert p.ts_ms[p.metric.index("untyped_thing")] == 1700000000000
    assert p.labels[p.metric.index("no_labels_empty")] == {}


def test_broken_lines_reported_with_line_number_and_skipped() -> None:
    good = h100_scrape("gpu-node-9", gpus=1).splitlines()
    broken = list(good)
    broken.insert(5, 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="x" 31')  # missing }
    broken.insert(9, 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} thirty-one')  # bad value
    broken.insert(12, 'DCGM_FI_DEV_GPU_TEMP{gpu="0",gpu="1"} 1')  # duplicate label
    text = "\n".join(broken) + "\n"
    p = parse_text(text)
    assert [line for line, _ in p.errors] == [6, 10, 13]
    assert "value" in p.errors[1][1]
    assert p.error_summary().startswith("line 6: ")
    # Everything else is parsed exactly as prometheus_client parses the text without the broken lines.
    got = [(m, lb, v) for m, lb, v in zip(p.metric, p.labels, p.value, strict=True)]
    ref = parse_text("\n".join(good) + "\n")
    assert got == list(zip(ref.metric, ref.labels, ref.value, strict=True))
    assert len(got) == 25


def test_require_timestamps_and_bad_timestamp() -> None:
    p = parse_text("a 1 1000\nb 2\nc 3 1.5\n", require_timestamps=True, first_line=100)
    assert p.metric == ["a"]
    assert [line for line, _ in p.errors] == [101, 102]
    assert "no timestamp" in p.errors[0][1]


def test_parse_many_and_batch() -> None:
    texts = [h100_scrape(f"n{i}") for i in range(3)]
    parsed = parse_many(texts)
    assert [len(p) for p in parsed] == [200, 200, 200]
    b = to_batch(parsed[0], cluster="c", target="http://x:9400/metrics", job="dcgm", instance="x:9400",
                 scraped_at_ms=5, extra_labels={"node": "n0", "Hostname": "ignored"})
    assert len(b.series_metric) == len(b.sample_value) == 200 and b.sample_ts_ms[0] is None
    assert b.series_labels[0]["Hostname"] == "n0" and b.series_labels[0]["node"] == "n0"  # exporter's label wins
    assert b.error is None and b.up


# OpenMetrics cases in the manner of prometheus_client's and the OpenMetrics conformance suite's: the reference is
# prometheus_client.openmetrics.parser (the strict parser), sample for sample; _created is dropped by design.
OM_VALID = [
    "# TYPE a counter\n# HELP a help\na_total 1\n# EOF\n",
    '# TYPE a counter\na_total{foo="bar"} 1 123.456\na_created{foo="bar"} 12 123.456\n# EOF\n',
    '# TYPE a gauge\na{a="\\\\\\n\\""} 1\n# EOF\n',
    '# TYPE a histogram\na_bucket{le="1.0"} 0 # {a="b"} 0.5\na_bucket{le="+Inf"} 3 # {a="c"} 4 123\n'
    "a_count 3\na_sum 2\n# EOF\n",
    '# TYPE a stateset\na{a="bar"} 0\na{a="foo"} 1.0\n# EOF\n',
    '# TYPE a info\na_info{foo="bar"} 1\n# EOF\n',
    '# TYPE a gaugehistogram\na_bucket{le="1.0"} 0\na_bucket{le="+Inf"} 3\na_gcount 3\na_gsum 2\n# EOF\n',
    "# TYPE a unknown\na NaN\nb +Inf\nc -Inf\n# EOF\n",
    "# TYPE a_seconds gauge\n# UNIT a_seconds seconds\na_seconds 1\n# EOF\n",
    "a{} 1\n# EOF\n",
    '# TYPE a summary\na_count 1\na_sum 2\na{quantile="0.5"} 0.7\n# EOF\n',
    "a 1 -1.5\n# EOF\n",
    "# TYPE a counter\na_total 1 1\na_total 2 2\n# EOF\n",
    '# TYPE a counter\na_total{x="# {"} 1 # {t="a # {b}"} 1 5\n# EOF\n',
]
OM_INVALID = [
    "a 1\n", "a 1\n# EOF\nb 1\n", "a  1\n# EOF\n", "a 1 1 1\n# EOF\n", "# TYPE a untyped\na 1\n# EOF\n",
    "a 1_000\n# EOF\n", '# TYPE a gauge\na 1 # {a="b"} 1\n# EOF\n', 'a{a="1",} 1\n# EOF\n', "a{a=1} 1\n# EOF\n",
    "# TYPE a counter\na 1\n# EOF\n", "a 1 z\n# EOF\n", 'a{a="b"}1\n# EOF\n', "a 1\n#EOF\n", "a 1 \n# EOF\n",
    "a 0x1\n# EOF\n", "a 1\n# EOF\n\n", "a 1\n\n# EOF\n", "# TYPE a gauge\n# UNIT a seconds\na 1\n# EOF\n",
]


@pytest.mark.parametrize("text", OM_VALID)
def test_openmetrics_valid_cases_match_the_reference_parser(text: str) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om

    ref = sorted((s.name, tuple(sorted(s.labels.items())), float(s.value),
                  None if s.timestamp is None else round(float(s.timestamp) * 1000))
                 for f in om(text) for s in f.samples if not s.name.endswith("_created"))
    p = parse_text(text, fmt="openmetrics")
    assert not p.errors
    ours = sorted((m, tuple(sorted(lb.items())), v, ts)
                  for m, lb, v, ts in zip(p.metric, p.labels, p.value, p.ts_ms, strict=True))
    assert [(a, b, repr(v), t) for a, b, v, t in ours] == [(a, b, repr(v), t) for a, b, v, t in ref]  # nan == nan


@pytest.mark.parametrize("text", OM_INVALID)
def test_openmetrics_invalid_cases_are_errors_with_their_line(text: str) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om

    with pytest.raises(ValueError):
        list(om(text))
    p = parse_text(text, fmt="openmetrics")
    assert p.errors and all(1 <= line <= text.count("\n") + 1 for line, _ in p.errors)
