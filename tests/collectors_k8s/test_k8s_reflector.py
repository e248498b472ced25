"""The reflector against the fake API server over HTTP: pagination, bookmarks, resume, 410 relist."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from collectors.k8s.client import Client
from collectors.k8s.discovery import Resource
from collectors.k8s.reflector import Reflector
from gangscope.records import RELIST_BEGIN, RELIST_END, K8sEvent
from tests.collectors_k8s import objects

PODS = Resource("", "v1", "pods", "Pod", True)


def wait_for(cond: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@contextmanager
def running(api, resource: Resource = PODS, **kw) -> Iterator[tuple[Reflector, list[K8sEvent]]]:
    got: list[K8sEvent] = []
    r = Reflector(Client(api.url), resource, got.append, "c1", backoff_base_s=0.05, watch_timeout_s=5, **kw)
    t = threading.Thread(target=r.run, daemon=True)
    t.start()
    try:
        yield r, got
    finally:
        r.stop.set()
        r.client.close()
        t.join(10)
        assert not t.is_alive()


def pods(got: list[K8sEvent], etype: str | None = None) -> list[str]:
    return [e.object["metadata"]["name"] for e in got if e.object and (etype is None or e.type == etype)]


def put_pods(api, reference, names: list[str]) -> None:
    for n in names:
        api.put("", "v1", "pods", objects.pod(reference, n))


def test_paginated_list_then_watch_with_bookmarks(api, reference):
    api.serve("", "v1", "pods", "Pod")
    put_pods(api, reference, [f"p{i}" for i in range(7)])
    with running(api, page_limit=3) as (r, got):
        wait_for(lambda: any(e.type == RELIST_END for e in got))
        assert got[0].type == RELIST_BEGIN and got[0].kind == "Pod" and got[0].api_version == "v1"
        assert got[0].resource_version == ""  # a list from nothing: every object follows
        assert pods(got, "ADDED") == [f"p{i}" for i in range(7)]
        end = got[-1]
        assert end.type == RELIST_END and end.resource_version == str(api.rv) and end.sent == 7
        lists = [q for p, q in api.requests if p == "/api/v1/pods" and "watch" not in q]
        assert len(lists) == 3 and "continue" in lists[1] and lists[0]["limit"] == ["3"]
        # list items come without apiVersion/kind; the reflector restores them
        assert all(e.object["apiVersion"] == "v1" and e.object["kind"] == "Pod" for e in got if e.object)
        api.serve("", "v1", "nodes", "Node", namespaced=False)
        rv_before = int(r.resource_version)
        api.put("", "v1", "nodes", objects.node("n1"))  # moves the global RV; pods' watch gets a BOOKMARK
        wait_for(lambda: int(r.resource_version) > rv_before)
        assert not any(e.type == "BOOKMARK" for e in got)
        put_pods(api, reference, ["p1"])  # MODIFIED
        api.delete("", "v1", "pods", "p2", "team-a")
        wait_for(lambda: len(got) >= 11)
        assert [(e.type, e.object["metadata"]["name"]) for e in got[9:]] == [("MODIFIED", "p1"), ("DELETED", "p2")]
        watches = [q for p, q in api.requests if p == "/api/v1/pods" and "watch" in q]
        assert watches[0]["allowWatchBookmarks"] == ["true"] and watches[0]["resourceVersion"] == [end.resource_version]


def test_dropped_stream_resumes_without_loss_or_duplicates(api, reference):
    api.serve("", "v1", "pods", "Pod")
    put_pods(api, reference, ["a"])
    with running(api) as (r, got):
        wait_for(lambda: any(e.type == RELIST_END for e in got))
        api.drop_watch_after = 3  # cut the stream mid-line after 3 events
        put_pods(api, reference, [f"w{i}" for i in range(10)])
        wait_for(lambda: len(pods(got)) >= 11)
        time.sleep(0.5)
        assert pods(got) == ["a"] + [f"w{i}" for i in range(10)]
        assert r.reconnects >= 1 and r.lists == 1  # resumed from the last RV, not relisted
        watches = [q for p, q in api.requests if p == "/api/v1/pods" and "watch" in q]
        assert len(watches) >= 2 and int(watches[-1]["resourceVersion"][0]) >= int(watches[0]["resourceVersion"][0])
        api.break_watches()  # every open stream cut at once
        put_pods(api, reference, ["after-break"])
        wait_for(lambda: "after-break" in pods(got))
        time.sleep(0.3)
        assert len(pods(got)) == len(set(e.object["metadata"]["resourceVersion"] for e in got if e.object)) == 12


@pytest.mark.parametrize("gone_as", ["http", "event"])
def test_relist_after_410_emits_deleted_for_vanished_objects(api, reference, gone_as):
    api.serve("", "v1", "pods", "Pod")
    api.gone_as = gone_as
    put_pods(api, reference, ["keep", "change", "vanish"])
    with running(api) as (r, got):
        wait_for(lambda: any(e.type == RELIST_END for e in got))
        vanish_uid = next(e.object["metadata"]["uid"] for e in got if e.object and
                          e.object["metadata"]["name"] == "vanish")
        # While the collector is away (its watch broken, history compacted): changes it never sees.
        with api.cond:  # atomically for the watchers: they only ever see the compacted history
            put_pods(api, reference, ["change", "new"])
            api.delete("", "v1", "pods", "vanish", "team-a")
            api.compact()
            api.break_watches()  # the collector reconnects with a resourceVersion now too old
        wait_for(lambda: r.relists >= 1 and sum(e.type == RELIST_END for e in got) >= 2)
        second = got[[i for i, e in enumerate(got) if e.type == RELIST_BEGIN][1]:]
        second = second[:[i for i, e in enumerate(second) if e.type == RELIST_END][0] + 1]
        body = [(e.type, e.object["metadata"]["name"]) for e in second[1:-1]]
        first_end = next(e for e in got if e.type == RELIST_END)
        # a relist from a known version: only changes follow, so it says nothing about unchanged objects
        assert second[0].resource_version == first_end.resource_version != ""
        assert second[-1].sent == 3
        assert sorted(body) == [("ADDED", "new"), ("DELETED", "vanish"), ("MODIFIED", "change")]
        tomb = next(e.object for e in second if e.type == "DELETED")
        assert tomb["metadata"]["uid"] == vanish_uid and tomb["kind"] == "Pod" and tomb["apiVersion"] == "v1"
        assert tomb["metadata"]["namespace"] == "team-a"
        assert "keep" not in [n for _, n in body]  # unchanged objects are not sent twice
        assert len(r.known) == 3 and r.lists == 2
        put_pods(api, reference, ["later"])
        wait_for(lambda: "later" in pods(got))


def test_namespace_limited_reflector_lists_and_watches_one_namespace(api, reference):
    api.serve("", "v1", "pods", "Pod")
    api.put("", "v1", "pods", objects.pod(reference, "mine", namespace="team-a"))
    api.put("", "v1", "pods", objects.pod(reference, "theirs", namespace="team-b"))
    with running(api, namespace="team-a") as (_, got):
        wait_for(lambda: any(e.type == RELIST_END for e in got))
        api.put("", "v1", "pods", objects.pod(reference, "theirs-2", namespace="team-b"))
        api.put("", "v1", "pods", objects.pod(reference, "mine-2", namespace="team-a"))
        wait_for(lambda: "mine-2" in pods(got))
        assert pods(got) == ["mine", "mine-2"]
        assert {e.namespace for e in got if e.type in (RELIST_BEGIN, RELIST_END)} == {"team-a"}
        assert all(p.startswith("/api/v1/namespaces/team-a/pods") for p, _ in api.requests if "pods" in p)


def test_expired_continue_token_restarts_the_list_without_duplicates(api, reference):
    api.serve("", "v1", "pods", "Pod")
    put_pods(api, reference, [f"p{i}" for i in range(5)])
    client = Client(api.url)
    orig = client.get_json
    calls = {"n": 0}

    def compact_after_first_page(path, params=None, timeout_s=60.0):
        out = orig(path, params, timeout_s)
        calls["n"] += 1
        if calls["n"] == 1:
            api.compact()  # the continue token of page 1 is now too old
        return out

    client.get_json = compact_after_first_page  # type: ignore[method-assign]
    got: list[K8sEvent] = []
    r = Reflector(client, PODS, got.append, "c1", page_limit=2)
    r._list()
    assert pods(got, "ADDED") == [f"p{i}" for i in range(5)]
    assert [e.type for e in got].count(RELIST_END) == 1


def test_hostile_watch_lines_are_dead_letters_and_the_stream_goes_on(api, reference):
    """Whole lines that are not watch events (garbage, 100k-deep JSON, invalid UTF-8, a non-object) each become
    one dead letter naming the resource, the stream is not reconnected for them, and the events after them
    arrive; a year-9999 condition time is refused by time sanity. A stream cut mid-line still resumes."""
    api.serve("", "v1", "pods", "Pod")
    put_pods(api, reference, ["before"])
    bad = [b"this is not JSON", b"[" * 100_000, b'{"type": "ADDED", "object": {"metadata": {"name": "\xff"}}}',
           b'{"type": "ADDED", "object": "x"}']
    with running(api) as (r, got):
        wait_for(lambda: api.count_requests(watch=True) >= 1)
        for line in bad:
            api.inject("", "v1", "pods", line)
        future = objects.pod(reference, "future")
        future["status"]["conditions"][0]["lastTransitionTime"] = "9999-12-31T23:59:59Z"
        api.put("", "v1", "pods", future)
        put_pods(api, reference, ["after"])
        wait_for(lambda: "after" in pods(got))
        assert api.count_requests(watch=True) == 1 and r.reconnects == 0
    dead = [e.rejected for e in got if e.rejected]
    assert len(dead) == len(bad) + 1, dead
    assert all(d.startswith("Pod /api/v1/pods: undecodable watch line") for d in dead[:4])
    assert "JSON nested too deep" in dead[1] and "'this is not JSON'" in dead[0]
    assert "status.conditions[0].lastTransitionTime 9999-12-31" in dead[4]
    assert [p for p in pods(got) if p != "future"] == ["before", "after"]
    for e in got:
        e.to_bytes()  # every one can travel
