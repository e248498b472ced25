"""The watch JSON Lines replay format: observedAt, the derived time rule, errors with file:line."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest

from collectors.k8s.jsonl import Writer, object_time, read_events
from gangscope.errors import UserError
from gangscope.records import K8sEvent
from tests.collectors_k8s import objects


def write_lines(path, lines):
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def test_observed_at_wins_over_object_times(tmp_path, reference):
    pod = objects.pod(reference, "w0")
    f = write_lines(tmp_path / "a.jsonl", [
        {"type": "ADDED", "object": pod, "observedAt": "2026-03-01T12:00:00.250Z"},
        {"type": "MODIFIED", "object": pod, "observedAt": "2026-03-01T14:00:00+02:00"},
    ])
    evs = list(read_events(f, "east"))
    assert [e.type for e in evs] == ["ADDED", "MODIFIED"]
    assert evs[0].observed_at == datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
    assert evs[1].observed_at == datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert evs[0].cluster == "east" and evs[0].object == pod


def test_time_without_observed_at_follows_the_contract(tmp_path, reference):
    ev = objects.event("e1", "0/4 nodes are available", ts="2026-03-01T10:01:00Z")
    ev["eventTime"] = "2026-03-01T10:02:00.123456Z"
    ev["series"] = {"count": 3, "lastObservedTime": "2026-03-01T10:05:00.000000Z"}
    wl = objects.workload_v1beta1(reference)  # conditions from the Kueue docs: 2024-03-21T13:43:00Z
    pg = objects.with_meta(objects.docs(reference, "gang/volcano_podgroup_v1beta1.yaml")[0])
    pg["metadata"]["deletionTimestamp"] = "2026-03-02T00:00:00Z"
    assert object_time(ev) == datetime(2026, 3, 1, 10, 5, tzinfo=UTC)
    del ev["series"]
    assert object_time(ev) == datetime(2026, 3, 1, 10, 2, 0, 123456, tzinfo=UTC)
    # events.k8s.io/v1 shape
    assert object_time({"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": {},
                        "deprecatedLastTimestamp": "2026-03-01T09:00:00Z"}) == datetime(2026, 3, 1, 9, tzinfo=UTC)
    wl["metadata"]["creationTimestamp"] = "2024-03-21T13:00:00Z"
    assert object_time(wl) == datetime(2024, 3, 21, 13, 43, tzinfo=UTC)
    assert object_time(pg) == datetime(2026, 3, 2, tzinfo=UTC)
    f = write_lines(tmp_path / "b.jsonl", [{"type": "ADDED", "object": wl}, "", {"type": "BOOKMARK", "object": {
        "kind": "Workload", "apiVersion": "kueue.x-k8s.io/v1beta1", "metadata": {"resourceVersion": "9"}}},
        {"type": "DELETED", "object": pg}])
    evs = list(read_events(f, "c"))
    assert [(e.type, e.observed_at) for e in evs] == [("ADDED", datetime(2024, 3, 21, 13, 43, tzinfo=UTC)),
                                                       ("DELETED", datetime(2026, 3, 2, tzinfo=UTC))]


@pytest.mark.parametrize("line, why", [
    ("{not json", "not JSON"),
    ('["ADDED"]', "expected a JSON object"),
    ('{"type": "UPDATED", "object": {"metadata": {}}}', "type must be one of"),
    ('{"type": "ADDED"}', "'object' must be"),
    ('{"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "x"}}}', "no apiVersion/kind"),
    ('{"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}}',
     "no observedAt and no timestamp"),
    ('{"type": "ADDED", "observedAt": "yesterday", "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {}}}',
     "bad timestamp"),
])
def test_malformed_line_names_file_and_line(tmp_path, reference, line, why):
    good = {"type": "ADDED", "object": objects.pod(reference, "ok"), "observedAt": "2026-03-01T10:00:00Z"}
    f = write_lines(tmp_path / "bad.jsonl", [good, good, line])
    it = read_events(f, "c")
    assert next(it).type == "ADDED" and next(it).type == "ADDED"  # streams: good lines come first
    with pytest.raises(UserError, match=rf"bad\.jsonl:3: .*{why}"):
        next(it)


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        list(read_events(tmp_path / "nope.jsonl", "c"))


def test_writer_round_trips_and_skips_markers(reference):
    buf = io.StringIO()
    w = Writer(buf)
    t = datetime(2026, 3, 1, 10, 0, 0, 5000, tzinfo=UTC)
    pod = objects.pod(reference, "w1")
    w.write(K8sEvent("c", "RELIST_BEGIN", t, api_version="v1", kind="Pod"))
    w.write(K8sEvent("c", "ADDED", t, pod))
    assert w.count == 1
    line = json.loads(buf.getvalue())
    assert line == {"type": "ADDED", "object": pod, "observedAt": "2026-03-01T10:00:00.005Z"}
