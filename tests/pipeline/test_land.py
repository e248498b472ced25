"""Decoding and landing against a real DuckLake lake (no broker needed)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangscope import config
from gangscope.records import VERSION, K8sEvent, LabelSet, ScrapeBatch
from pipeline import lake
from pipeline.land import land, stored_offsets
from tests.pipeline.helpers import dcgm_scrape, pod_event

K, M = "gs.k8s", "gs.metrics"


@pytest.fixture
def con(offline_settings: config.Settings):
    c = lake.connect(offline_settings)
    yield c
    c.close()


def test_values_timestamps_and_labels_round_trip_exactly(con) -> None:
    b = ScrapeBatch("c1", "http://n1:9400/metrics", "dcgm", "n1:9400", 1_767_000_000_123, up=True, duration_s=0.25)
    labels = {"gpu": "0", "Hostname": "n1", "weird": 'quote " back \\ slash, ünïcode, {brace}=', "empty": ""}
    s0 = b.add_series("DCGM_FI_DEV_GPU_UTIL", labels)
    s1 = b.add_series("node_infiniband_port_data_received_bytes_total", {"kubernetes_node": "n2", "port": "1"})
    s2 = b.add_series("no_node_metric", {"instance": "10.0.0.1:9100"})
    s3 = b.add_series("DCGM_FI_DEV_GPU_UTIL", dict(labels, gpu="1"))  # a name seen before: series get regrouped
    values = [(s0, 42.5, None), (s0, math.nan, 1_767_000_000_999), (s1, math.inf, None), (s1, -math.inf, None),
              (s3, math.nan, 1_767_000_000_500), (s2, None, None), (s2, 4294967295.0, 1), (s0, -0.0, None),
              (s3, 7.0, None), (s1, 1.7976931348623157e308, None)]
    for s, v, t in values:
        b.add_sample(s, v, t)
    stats = land(con, [(M, 0, 0, b.to_bytes())])
    assert (stats.samples, stats.scrapes, stats.dead) == (10, 1, 0)
    rows = con.execute("SELECT epoch_ms(ts), metric, labels, value, node, target, job, instance "
                       "FROM raw.metric_samples").fetchall()

    def same(value: float | None) -> object:  # NaN equal to NaN, -0.0 apart from 0.0
        if value is None or math.isnan(value):
            return None if value is None else "NaN"
        return value, math.copysign(1, value)

    node = {s0: "n1", s1: "n2", s2: None, s3: "n1"}
    got = [(t, m, json.dumps(json.loads(lbl), sort_keys=True), same(v), n) for t, m, lbl, v, n, *_ in rows]
    want = [(1_767_000_000_123 if t is None else t, b.series_metric[s], json.dumps(b.series_labels[s], sort_keys=True),
             same(v), node[s]) for s, v, t in values]
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert {r[5:8] for r in rows} == {("http://n1:9400/metrics", "dcgm", "n1:9400")}
    # The oldest sample is from 1970 (t=1): what the model runner rebuilds from stops 5 minutes before the scrape.
    assert con.execute("SELECT up, duration_s, samples, epoch_ms(scraped_at), epoch_ms(first_sample_at) "
                       "FROM raw.scrapes").fetchall() == [(True, 0.25, 10, 1_767_000_000_123, 1_766_999_700_123)]


def test_a_scrape_keeps_its_oldest_sample_time(con) -> None:
    """raw.scrapes.first_sample_at is where an incremental model build starts over when the scrape lands late: the
    scrape time for plain samples, a sample's own older time when it carries one, NULL without samples."""
    at = 1_767_000_000_000
    plain = ScrapeBatch("c1", "http://n1:9400/metrics", "dcgm", "n1:9400", at)
    plain.add_sample(plain.add_series("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}), 50.0)
    stamped = ScrapeBatch("c1", "http://n2:9400/metrics", "dcgm", "n2:9400", at)
    s = stamped.add_series("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"})
    stamped.add_sample(s, 50.0, at - 90_000)
    stamped.add_sample(s, 51.0, at - 30_000)
    stamped.add_sample(s, 52.0)
    down = ScrapeBatch("c1", "http://n3:9400/metrics", "dcgm", "n3:9400", at, up=False, error="timeout")
    land(con, [(M, 0, i, b.to_bytes()) for i, b in enumerate((plain, stamped, down))])
    assert con.execute("SELECT target, samples, epoch_ms(first_sample_at) FROM raw.scrapes ORDER BY target"
                       ).fetchall() == [("http://n1:9400/metrics", 1, at), ("http://n2:9400/metrics", 3, at - 90_000),
                                        ("http://n3:9400/metrics", 0, None)]


def test_an_object_time_out_of_range_is_flagged_at_landing_and_no_model_reads_it(con) -> None:
    """raw.k8s_objects.bad_time: an object time field in a year before 2000 or after 2099 (the collectors refuse
    them; a producer of its own may not) is matched once, when the row lands, with the pattern the staging view keeps
    for rows landed before the column existed. The row stays in raw; the view leaves it out."""
    from pipeline.decode import BAD_OBJECT_TIME
    from pipeline.models import SQL_DIR

    assert BAD_OBJECT_TIME in (SQL_DIR / "staging" / "stg_k8s_watch.sql").read_text()  # one pattern, both places
    good, old, late = pod_event(1), pod_event(2), pod_event(3)
    old.object["metadata"]["creationTimestamp"] = "1970-01-01T00:00:00Z"
    late.object["status"]["startTime"] = "2107-03-01T12:00:00Z"
    land(con, [(K, 0, i, e.to_bytes()) for i, e in enumerate((good, old, late))])
    assert con.execute("SELECT name, bad_time FROM raw.k8s_objects ORDER BY name").fetchall() == [
        ("trainer-1", False), ("trainer-2", True), ("trainer-3", True)]
    view = (SQL_DIR / "staging" / "stg_k8s_watch.sql").read_text()
    assert con.execute(f"SELECT name FROM ({view})").fetchall() == [("trainer-1",)]


def test_k8s_event_rows_keep_the_object_exactly(con) -> None:
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
           "metadata": {"name": "job-a", "namespace": "team", "uid": "u-1", "resourceVersion": "77"},
           "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                      "message": "couldn't assign flavors: insufficient unused quota \"gpu\""}],
                      "f": 0.30000000000000004, "big": 9007199254740993}}
    seen = datetime(2026, 3, 1, 12, 0, 1, 250000, tzinfo=UTC)
    recs = [(K, 2, 10, K8sEvent("c1", "ADDED", seen, obj).to_bytes()),
            (K, 2, 11, K8sEvent("c1", "RELIST_BEGIN", seen, api_version="v1", kind="Pod", resource_version="",
                                namespace="team").to_bytes()),
            (K, 2, 12, K8sEvent("c1", "RELIST_END", seen, api_version="v1", kind="Pod",
                                resource_version="9", namespace="team", sent=1).to_bytes())]
    stats = land(con, recs)
    assert (stats.k8s_rows, stats.dead) == (3, 0)
    rows = con.execute("SELECT cluster, observed_at, event_type, api_version, kind, namespace, name, uid, "
                       "resource_version, object, kafka_partition, kafka_offset FROM raw.k8s_objects "
                       "ORDER BY kafka_offset").fetchall()
    assert rows[0][:9] == ("c1", seen, "ADDED", "kueue.x-k8s.io/v1beta2", "Workload", "team", "job-a", "u-1", "77")
    assert json.loads(rows[0][9]) == obj
    assert rows[0][10:] == (2, 10)
    assert rows[1][2:6] == ("RELIST_BEGIN", "v1", "Pod", "team") and rows[1][8] == "" and rows[1][9] is None
    assert rows[2][2] == "RELIST_END" and rows[2][5] == "team" and rows[2][8] == "9"
    assert json.loads(rows[2][9]) == {"sent": 1}


def test_bad_records_become_dead_letters_and_good_ones_around_them_land(con) -> None:
    good = pod_event(1).to_bytes()
    wrong_v = good.replace(f'"v":{VERSION}'.encode(), b'"v":7')
    unknown_kind = good.replace(b'"kind":"k8s"', b'"kind":"telepathy"')
    bad_type = good.replace(b'"type":"MODIFIED"', b'"type":"BOOKMARK"')
    sc = dcgm_scrape(3)
    uneven = json.loads(sc.to_bytes())
    uneven["x"] = uneven["x"][:-1]
    short_dt = dict(uneven, s=[0, 1, 2], dt=[0, 5])
    bad_series = dict(uneven, s=[0, 1, 9], dt=[])
    batch = [
        (K, 0, 0, pod_event(0).to_bytes()), (K, 0, 1, b'{"v":1,"kind":"k8s",'), (K, 0, 2, wrong_v),
        (K, 0, 3, unknown_kind), (K, 0, 4, bad_type), (K, 0, 5, b""), (K, 0, 6, pod_event(2).to_bytes()),
        (K, 0, 7, b"[1,2,3]"), (K, 0, 8, b'{"v":"one"}'), (K, 0, 9, b"\xff\xfe"),
        (M, 1, 0, dcgm_scrape(1).to_bytes()), (M, 1, 1, json.dumps(uneven).encode()),
        (M, 1, 2, pod_event(5).to_bytes()), (M, 1, 3, dcgm_scrape(2).to_bytes()),
        (M, 1, 4, json.dumps(short_dt).encode()), (M, 1, 5, json.dumps(bad_series).encode()),
        ("someone.else", 0, 0, b"{}"),
    ]
    stats = land(con, batch)
    assert stats.k8s_rows == 2 and stats.scrapes == 2 and stats.samples == 8
    dead = con.execute('SELECT topic, "partition", "offset", reason, payload FROM raw.dead_letters '
                       'ORDER BY topic, "offset"').fetchall()
    reasons = {(t, o): r for t, _, o, r, _ in dead}
    assert reasons[(K, 1)].startswith("malformed JSON")
    assert reasons[(K, 2)] == f"unsupported envelope version v=7 (this pipeline reads v={VERSION})"
    assert reasons[(K, 3)] == "unknown record kind 'telepathy' on a k8s topic"
    assert reasons[(K, 4)] == "unknown watch event type 'BOOKMARK'"
    assert reasons[(K, 5)] == "empty record"
    assert "expected a JSON object" in reasons[(K, 7)]
    assert reasons[(K, 8)].startswith("malformed record")
    assert reasons[(K, 9)].startswith("malformed JSON")
    assert reasons[(M, 1)] == "one value per series expected, got x=3 for 4 series"
    assert reasons[(M, 4)] == "sample columns differ in length (s=3 dt=2 x=3)"
    assert reasons[(M, 5)] == "a sample refers to a series that does not exist (series=4)"
    assert reasons[(M, 2)] == "unknown record kind 'k8s' on a scrape topic"
    assert reasons[("someone.else", 0)].startswith("unknown topic")
    assert len(dead) == 13
    assert {p for t, _, o, _, p in dead if (t, o) == (K, 2)} == {wrong_v}  # raw bytes kept
    assert sorted(r[0] for r in con.execute("SELECT uid FROM raw.k8s_objects").fetchall()) == [
        "uid-000000", "uid-000002"]
    # offsets advance past dead letters too
    assert stored_offsets(con)[(K, 0)] == 10 and stored_offsets(con)[(M, 1)] == 6


def test_a_batch_landed_twice_lands_once(con) -> None:
    batch = [(K, 0, i, pod_event(i).to_bytes()) for i in range(10)]
    assert land(con, batch).k8s_rows == 10
    again = land(con, batch[5:] + [(K, 0, 10, pod_event(10).to_bytes())])
    assert (again.k8s_rows, again.skipped) == (1, 5)
    assert con.execute("SELECT count(*), count(DISTINCT uid) FROM raw.k8s_objects").fetchone() == (11, 11)


def test_offsets_of_another_topic_incarnation_are_ignored(con) -> None:
    land(con, [(K, 0, i, pod_event(i).to_bytes()) for i in range(5)], topic_ids={K: "id-old"})
    assert stored_offsets(con, {K: "id-old"}) == {(K, 0): 5}
    assert stored_offsets(con, {K: "id-new"}) == {}
    # A fresh broker (new topic id) starts at offset 0 again: those records are new, not duplicates.
    stats = land(con, [(K, 0, i, pod_event(100 + i).to_bytes()) for i in range(3)], topic_ids={K: "id-new"})
    assert stats.k8s_rows == 3 and stats.skipped == 0


def test_compaction_merges_small_files_and_keeps_every_row(con) -> None:
    from datetime import timedelta

    from pipeline.compaction import compact

    for b in range(6):
        land(con, [(M, 0, b * 20 + i, dcgm_scrape(b * 20 + i).to_bytes()) for i in range(20)])
    before = con.execute("SELECT count(*) FROM ducklake_list_files('lake', 'metric_points', schema => 'raw')"
                         ).fetchone()
    q = "SELECT ts, metric, labels, value FROM raw.metric_samples ORDER BY ALL"
    rows = con.execute(q).fetchall()
    stats = compact(con, keep=timedelta(0))
    after = con.execute("SELECT count(*) FROM ducklake_list_files('lake', 'metric_points', schema => 'raw')"
                        ).fetchone()
    assert before and after and before[0] == 6 and after[0] == 1
    assert stats.merged_files >= 6 and stats.deleted_files >= 6
    assert con.execute(q).fetchall() == rows
    # the pipeline goes on landing after compaction
    land(con, [(M, 0, 120, dcgm_scrape(120).to_bytes())])
    assert con.execute("SELECT count(*) FROM raw.metric_samples").fetchone() == (len(rows) + 4,)


def test_compact_common_case_one_sample_per_series_at_scrape_time(con) -> None:
    b = dcgm_scrape(7, gpus=3)
    wire = json.loads(b.to_bytes())
    assert wire["s"] == [] and wire["dt"] == []  # the compact form is what travels
    assert len(wire["ls"]) == 3 and len(wire["mn"]) == 2  # each label set and name once
    land(con, [(M, 0, 0, b.to_bytes())])
    rows = con.execute("SELECT epoch_ms(ts), metric, labels, value, node FROM raw.metric_samples").fetchall()
    want = sorted((b.scraped_at_ms, b.series_metric[s], json.dumps(b.series_labels[s], sort_keys=True), v,
                   "gpu-node-3") for s, v in zip(b.sample_series, b.sample_value, strict=True))
    got = sorted((t, m, json.dumps(json.loads(lbl), sort_keys=True), v, n) for t, m, lbl, v, n in rows)
    assert got == want


def test_a_failed_scrape_lands_its_health_row_and_no_samples(con) -> None:
    down = ScrapeBatch("c1", "http://n9:9400/metrics", "dcgm", "n9:9400", 1_767_000_000_000, up=False,
                       duration_s=5.0, error="HTTP 503")
    stats = land(con, [(M, 3, 0, down.to_bytes())])
    assert (stats.scrapes, stats.samples, stats.dead) == (1, 0, 0)
    assert con.execute("SELECT up, samples, error, target FROM raw.scrapes").fetchall() == [
        (False, 0, "HTTP 503", "http://n9:9400/metrics")]
    assert con.execute("SELECT count(*) FROM raw.metric_samples").fetchone() == (0,)


def test_a_bad_label_set_kills_only_its_record_and_shared_label_sets_land_per_record(con) -> None:
    """Label sets are checked once per distinct set and stored deduplicated across the batch: neither may
    mix records up (a set shared by two scrapes lands for both; a broken one kills only its scrape)."""
    rec = json.loads(dcgm_scrape(4).to_bytes())
    not_object = dict(rec, ls=['["gpu","0"]', *rec["ls"][1:]])
    not_json = dict(rec, ls=['{"gpu":', *rec["ls"][1:]])
    same_sets = [dcgm_scrape(7), dcgm_scrape(7)]  # identical label sets in two records
    same_sets[1].target = "http://other:9400/metrics"
    batch = [(M, 0, 0, same_sets[0].to_bytes()), (M, 0, 1, json.dumps(not_object).encode()),
             (M, 0, 2, json.dumps(not_json).encode()), (M, 0, 3, same_sets[1].to_bytes())]
    stats = land(con, batch)
    assert (stats.scrapes, stats.samples, stats.dead) == (2, 8, 2)
    reasons = dict(con.execute('SELECT "offset", reason FROM raw.dead_letters').fetchall())
    assert reasons == {1: "a label set is not a JSON object", 2: "a label set is not a JSON object"}
    rows = con.execute("SELECT target, metric, labels->>'gpu', labels->>'seq', node, value "
                       "FROM raw.metric_samples ORDER BY ALL").fetchall()
    want = []
    for b in same_sets:
        for s, v in zip(b.sample_series, b.sample_value, strict=True):
            lbl = b.series_labels[s]
            want.append((b.target, b.series_metric[s], lbl["gpu"], "7", lbl["Hostname"], v))
    assert rows == sorted(want)


def test_a_broken_series_layout_becomes_a_dead_letter(con) -> None:
    """Series counts per name (mc) and label-set runs (lr) must agree with each other and with mn/ls/x."""
    rec = json.loads(dcgm_scrape(5).to_bytes())  # 2 names x 2 GPUs: mc=[2,2], lr=[0,2,0,2]
    assert rec["mc"] == [2, 2] and rec["lr"] == [0, 2, 0, 2]
    broken = {
        1: (dict(rec, mc=[2]), "series counts per name differ in length (mn=2 mc=1)"),
        2: (dict(rec, mc=[5, -1]), "a negative series count in mc"),
        3: (dict(rec, lr=[0, 2, 0]), "label-set runs (lr) are not (first, count) pairs"),
        4: (dict(rec, lr=[0, 2, 0, 1]), "label-set runs cover 3 series, mc 4"),
        5: (dict(rec, lr=[0, 2, 1, 2]), "a series refers to a label set that does not exist"),
        6: (dict(rec, lr=[-1, 2, 0, 2]), "a series refers to a label set that does not exist"),
        7: (dict(rec, mc=[2, None]), "a null in an index or count list (mc, lr, s, ni)"),
        8: (dict(rec, s=[0, None, 2, 3]), "a null in an index or count list (mc, lr, s, ni)"),
        # Runs reuse label sets, so series could grow as len(lr) x len(ls): bounded by the samples instead.
        9: (dict(rec, mc=[2, 2000], lr=[0, 2] * 1001, s=[0, 1, 2, 3]), "more series (mc: 2002) than samples (x: 4)"),
    }
    batch = [(M, 0, 0, dcgm_scrape(4).to_bytes())]
    batch += [(M, 0, off, json.dumps(r).encode()) for off, (r, _) in broken.items()]
    batch += [(M, 0, 10, dcgm_scrape(6).to_bytes())]
    stats = land(con, batch)
    assert (stats.scrapes, stats.samples, stats.dead) == (2, 8, 9)
    assert dict(con.execute('SELECT "offset", reason FROM raw.dead_letters').fetchall()) == {
        off: why for off, (_, why) in broken.items()}
    assert con.execute("SELECT DISTINCT labels->>'seq' FROM raw.metric_samples ORDER BY 1").fetchall() == [
        ("4",), ("6",)]


def test_series_land_once_per_day_and_samples_find_them(con) -> None:
    """A series' text lands once per UTC day however many scrapes carry it; each sample joins exactly one."""
    day_ms = 86_400_000
    scrapes = [dcgm_scrape(1), dcgm_scrape(1), dcgm_scrape(1)]
    scrapes[1].scraped_at_ms += 15_000
    scrapes[2].scraped_at_ms += day_ms  # the next day: its series get their own rows
    land(con, [(M, 0, i, b.to_bytes()) for i, b in enumerate(scrapes[:2])])
    land(con, [(M, 0, 2, scrapes[2].to_bytes())])
    assert con.execute("SELECT day, count(*) FROM raw.metric_series GROUP BY day ORDER BY day").fetchall() == [
        (d, 4) for d in sorted({datetime.fromtimestamp(b.scraped_at_ms / 1000, UTC).date() for b in scrapes})]
    assert con.execute("SELECT count(*), count(DISTINCT series) FROM raw.metric_points").fetchone() == (12, 8)
    assert con.execute("SELECT count(*) FROM raw.metric_samples").fetchone() == (12,)


def test_series_travel_grouped_by_name_with_each_label_set_once() -> None:
    b = ScrapeBatch("c1", "http://n1:9400/metrics", "dcgm", "n1:9400", 1_767_000_000_000)
    for metric, labels, value in (("m1", {"a": "1", "b": "2"}, 1.0), ("m2", {"b": "2", "a": "1"}, 2.0),
                                  ("m1", {"a": "3"}, 3.0)):
        b.add_sample(b.add_series(metric, labels), value)
    wire = json.loads(b.to_bytes())
    assert (wire["mn"], wire["mc"]) == (["m1", "m2"], [2, 1])
    assert wire["ls"] == ['{"a":"1","b":"2"}', '{"a":"3"}']  # one text whatever the key order
    assert wire["lr"] == [0, 2, 0, 1]  # series m1{a=1,b=2}, m1{a=3}, m2{a=1,b=2}
    assert (wire["s"], wire["x"]) == ([], [1.0, 3.0, 2.0])  # samples follow their series


_label = st.text(st.characters(codec="utf-8"), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["m1", "m2", "m3"]),
                          st.dictionaries(st.sampled_from(["gpu", "Hostname", "node", "k", "\u00fc", '"']), _label,
                                          max_size=4),
                          st.floats(allow_nan=True, allow_infinity=True)), max_size=30))
def test_label_sets_with_their_text_made_once_encode_byte_for_byte_as_plain_dicts(series) -> None:
    """The remote-write receiver hands LabelSets (text and node made once per series); the record is the same."""
    plain = ScrapeBatch("c1", "n1:9400", "dcgm", "n1:9400", 1_767_000_000_000)
    cached = ScrapeBatch("c1", "n1:9400", "dcgm", "n1:9400", 1_767_000_000_000)
    for metric, labels, value in series:
        plain.add_sample(plain.add_series(metric, dict(labels)), value, 1_767_000_000_000)
        cached.add_sample(cached.add_series(metric, LabelSet(labels)), value, 1_767_000_000_000)
    assert cached.to_bytes() == plain.to_bytes()


def test_batches_merged_into_one_transaction_land_exactly_once(con) -> None:
    """What the writer does when it fell behind: consecutive batches in one transaction. Every record lands once,
    a series seen in both batches is stored once, the offsets row says where the later batch ends, dead letters
    keep their records; and a merged batch whose first part was landed meanwhile lands only the rest."""
    from pipeline.land import merge, prepare, split, write

    # 4 targets; the second batch has 3 of them again
    first = [(M, 0, i, dcgm_scrape(i % 4).to_bytes()) for i in range(4)]
    second = [(M, 0, 4 + i, dcgm_scrape(i % 4).to_bytes()) for i in range(3)] + [(M, 0, 7, b"not json")]
    preps = [prepare(first), prepare(second)]
    stats = split(write(con, merge(preps)), preps)
    assert [(s.records, s.samples, s.dead, s.next_offsets) for s in stats] == [
        (4, 16, 0, {(M, 0): 4}), (4, 12, 1, {(M, 0): 8})]
    assert con.execute("SELECT count(*) FROM raw.metric_points").fetchone() == (28,)
    # series ids are per target, metric, labels and day: the second batch's series all came with the first
    assert con.execute("SELECT count(*), count(DISTINCT series) FROM raw.metric_series").fetchone() == (16, 16)
    assert con.execute('SELECT count(*), max(next_offset) FROM raw.kafka_offsets').fetchone() == (1, 8)
    assert con.execute('SELECT "offset", reason LIKE \'malformed JSON%\' FROM raw.dead_letters').fetchall() == [
        (7, True)]
    assert stored_offsets(con) == {(M, 0): 8}

    # Offsets 8..9 land alone; then a merged batch of 8..9 and 10..11 (prepared before that) lands 10..11 only.
    late = [[(M, 0, o, dcgm_scrape(o).to_bytes()) for o in (8, 9)], [(M, 0, o, dcgm_scrape(o).to_bytes())
                                                                     for o in (10, 11)]]
    preps = [prepare(late[0]), prepare(late[1])]
    land(con, late[0])
    stats = split(write(con, merge(preps)), preps)
    assert sum(s.skipped for s in stats) == 2 and sum(s.samples for s in stats) == 8
    assert con.execute("SELECT count(*) FROM raw.metric_points").fetchone() == (28 + 8 + 8,)
    assert con.execute("SELECT count(*) FROM raw.scrapes").fetchone() == (7 + 4,)
    assert stored_offsets(con) == {(M, 0): 12}
