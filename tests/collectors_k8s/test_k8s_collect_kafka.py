"""End to end into the real broker: fake API server -> collector -> Publisher -> Kafka topic."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from collectors.k8s.client import Client
from collectors.k8s.collector import K8sCollector, locked
from gangscope.records import VERSION
from gangscope.transport.broker import EmbeddedBroker, free_port
from gangscope.transport.publish import Publisher
from tests.collectors_k8s import objects
from tests.collectors_k8s.conftest import names, read_k8s_topic
from tests.collectors_k8s.test_k8s_reflector import wait_for


@contextmanager
def collecting(settings, api, bootstrap: str | None = None) -> Iterator[tuple[K8sCollector, Publisher]]:
    publisher = Publisher(settings, bootstrap or settings.kafka.bootstrap_servers)
    coll = K8sCollector(settings, Client(api.url), locked(publisher.publish), watch_timeout_s=5,
                        backoff_base_s=0.05)
    stop = threading.Event()
    t = threading.Thread(target=coll.run, args=(stop,), daemon=True)
    t.start()
    try:
        yield coll, publisher
    finally:
        stop.set()
        t.join(15)
        assert publisher.flush(30)
        publisher.close()


def _check_no_duplicates(records):
    versions = Counter((r["object"]["metadata"]["uid"], r["object"]["metadata"]["resourceVersion"], r["type"])
                       for r in records if "object" in r)
    assert [k for k, n in versions.items() if n > 1] == []


def test_collect_every_kind_relist_resume_and_late_crd(settings, api, reference):
    settings.k8s.discovery_interval_s = 0.3
    settings.k8s.page_limit = 2
    objects.populate(api, reference, native=False)  # no scheduling.k8s.io yet
    with collecting(settings, api) as (coll, _):
        wait_for(lambda: len(coll.active) == 10 and all(s["lists"] for s in coll.stats().values()))
        # A stream cut mid-line: resumes from the last resourceVersion.
        api.drop_watch_after = 1
        for i in range(4):
            api.put("", "v1", "pods", objects.pod(reference, f"extra-{i}"))
        # Seen (resumed past the cut) before one of them is deleted: a pod created and deleted while the
        # collector was away is never seen at all, and would make this test flaky.
        wait_for(lambda: {f"extra-{i}" for i in range(4)} <= {
            name for r in coll.active["pods"][1] for _, _, name in list(r.known.values())})
        # 410 Gone while away: relist, DELETED for what vanished.
        with api.cond:
            api.delete("", "v1", "pods", "extra-0", "team-a")
            api.put("kueue.x-k8s.io", "v1beta2", "workloads", objects.workload_v1beta2(reference, "wl-late"))
            api.compact()
            api.break_watches()
        # The native scheduling.k8s.io API is switched on later (a 1.36 cluster with runtime-config).
        wl, pg, _ = objects.docs(reference, "gang/k8s-1.36_workload-podgroup-pod_v1alpha2.yaml")
        for g, v, p, k, ns in objects.NATIVE:
            api.serve(g, v, p, k, ns)
        api.put("scheduling.k8s.io", "v1alpha2", "workloads", objects.with_meta(wl))
        api.put("scheduling.k8s.io", "v1alpha2", "podgroups", objects.with_meta(pg))
        wait_for(lambda: len(coll.active) == 12 and all(s["lists"] for s in coll.stats().values()))
        wait_for(lambda: coll.stats()["pods"]["relists"] >= 1)
        wait_for(lambda: coll.stats()["pods"]["lists"] >= 2)
    records = read_k8s_topic(settings, expect=1)
    objs = [r for r in records if "object" in r]
    kinds = {(r["object"]["apiVersion"], r["object"]["kind"]) for r in objs}
    assert kinds == {("v1", "Pod"), ("v1", "Node"), ("v1", "Event"), ("kueue.x-k8s.io/v1beta2", "Workload"),
                     ("kueue.x-k8s.io/v1beta2", "ClusterQueue"), ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
                     ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"), ("kueue.x-k8s.io/v1beta2", "Topology"),
                     ("scheduling.x-k8s.io/v1alpha1", "PodGroup"), ("scheduling.volcano.sh/v1beta1", "PodGroup"),
                     ("scheduling.k8s.io/v1alpha2", "Workload"), ("scheduling.k8s.io/v1alpha2", "PodGroup")}
    _check_no_duplicates(records)
    # Every pod change reached Kafka exactly once, including the one made while the watch was away.
    pod_events = [(r["type"], r["object"]["metadata"]["name"]) for r in objs if r["object"]["kind"] == "Pod"]
    assert sorted(n for t, n in pod_events if t == "ADDED") == ["extra-0", "extra-1", "extra-2", "extra-3",
                                                               "worker-0"]
    deleted = [n for t, n in pod_events if t == "DELETED"]
    assert deleted == ["extra-0"]
    assert "wl-late" in names(records, "ADDED", "Workload")
    assert all(r["cluster"] == settings.cluster and r["v"] == VERSION for r in records)
    for r in objs:
        m = r["object"]["metadata"]
        assert r["_key"] == f"{r['object']['apiVersion']}/{r['object']['kind']}/{m.get('namespace', '')}/{m['name']}"
    # Per-key order: one object's events sit on one partition in order.
    by_key: dict[str, list[tuple[int, int]]] = {}
    for r in objs:
        by_key.setdefault(r["_key"], []).append((r["_partition"], r["_offset"]))
    assert all(len({p for p, _ in v}) == 1 for v in by_key.values())
    # Relist markers frame every list: pods were listed twice.
    markers = [(r["type"], r["resource_kind"]) for r in records if "object" not in r and r["api_version"] == "v1"]
    assert markers.count(("RELIST_BEGIN", "Pod")) == markers.count(("RELIST_END", "Pod")) == 2
    ends = [r for r in records if r["type"] == "RELIST_END" and r["resource_kind"] == "Pod"]
    assert all(int(r["resource_version"]) > 0 for r in ends)


def test_kafka_down_for_a_while_loses_nothing_under_the_bound(settings, api, reference):
    port = free_port()
    broker = EmbeddedBroker(port).start()
    bootstrap = broker.bootstrap
    settings.kafka.bootstrap_servers = bootstrap
    api.serve("", "v1", "pods", "Pod")
    api.put("", "v1", "pods", objects.pod(reference, "before"))
    try:
        with collecting(settings, api, bootstrap) as (coll, publisher):
            wait_for(lambda: publisher.published >= 3)  # BEGIN, ADDED before, END
            broker.stop()  # Kafka goes away; the in-memory broker forgets everything
            for i in range(200):
                api.put("", "v1", "pods", objects.pod(reference, f"during-{i:03d}"))
            wait_for(lambda: coll.stats()["pods"]["events"] >= 203)
            time.sleep(1.0)
            assert publisher.buffered >= 200 and publisher.dropped == 0
            broker = EmbeddedBroker(port).start()  # back, empty
            wait_for(lambda: publisher.buffered == 0, timeout_s=40)
        records = read_k8s_topic(settings, expect=200, bootstrap=bootstrap)
        assert sorted(names(records, "ADDED")) == [f"during-{i:03d}" for i in range(200)]
        assert len(records) == 200
    finally:
        broker.stop()


def test_pod_deleted_while_the_collector_was_stopped_is_deleted_in_the_lake(settings, api, reference):
    """Collector -> Kafka -> pipeline -> models across a restart: the restart's list from nothing (no DELETED
    event can exist for it) is what tells the lake the pod is gone; the pod still there stays alive."""
    import subprocess

    from pipeline import lake, models
    from tests.pipeline.helpers import ROOT, pipeline_cmd, pipeline_env

    api.serve("", "v1", "pods", "Pod")
    for name in ("stays", "goes"):
        api.put("", "v1", "pods", objects.pod(reference, name))
    for run in range(2):
        with collecting(settings, api) as (coll, _):
            wait_for(lambda: "pods" in coll.active and coll.stats()["pods"]["lists"] >= 1)
        if run == 0:
            api.delete("", "v1", "pods", "goes", "team-a")  # while no collector watches
    done = subprocess.run(pipeline_cmd(settings, "--once"), env=pipeline_env(settings), cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    con = lake.connect(settings)
    try:
        models.build(settings, con)
        assert sorted(con.execute("SELECT name, deleted FROM staging.stg_pods").fetchall()) == [
            ("goes", True), ("stays", False)]
        assert con.execute("SELECT name FROM staging.stg_k8s_gone").fetchall() == [("goes",)]
    finally:
        con.close()
