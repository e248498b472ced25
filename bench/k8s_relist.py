"""Benchmark: a relist of 50,000 Pods and 20,000 Events from the fake API server, published to Kafka.

The fake API server runs in a child process (as a real one is remote), so the figures
and the peak RSS are the collector's own. Baseline, measured in the same run: the same
paginated list fetched and decoded with nothing else (what any client must pay). Then
the reflectors list both kinds and publish every object through the Publisher to the
broker, timed until Kafka has acknowledged everything.

    .venv/bin/python bench/k8s_relist.py [--pods 50000] [--events 20000] [--bootstrap-servers H:P]
        [--kubeconfig FILE [--namespace gangscope-bench]]

Ends with ``relist: objects=<n> seconds=<s> objects_per_s=<r>``. With ``--kubeconfig``, the same pods (status
written through the status subresource, as a kubelet does) and events are created in a namespace of that real API
server when missing, relisted from it in the same run, and the run ends with
``ratio real/fake objects_per_s = <x>``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.k8s.client import Client  # noqa: E402
from collectors.k8s.collector import locked  # noqa: E402
from collectors.k8s.discovery import Resource  # noqa: E402
from collectors.k8s.reflector import Reflector  # noqa: E402
from gangscope import config  # noqa: E402

PODS = Resource("", "v1", "pods", "Pod", True)
EVENTS = Resource("", "v1", "events", "Event", True)


def make_pod(i: int) -> dict[str, Any]:
    """A training pod of realistic size (~3 KB of JSON): labels, resources, env, status."""
    ns, job = f"team-{i % 20}", f"train-{i // 8}"
    return {
        "metadata": {"name": f"{job}-worker-{i % 8}", "namespace": ns,
                     "labels": {"jobset.sigs.k8s.io/jobset-name": job, "kueue.x-k8s.io/queue-name": "user-queue",
                                "scheduling.x-k8s.io/pod-group": job, "batch.kubernetes.io/job-completion-index":
                                str(i % 8), "app.kubernetes.io/name": "trainer"},
                     "annotations": {"kueue.x-k8s.io/workload": f"jobset-{job}-1a2b3",
                                     "kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{job}-workers-0",
                                          "uid": f"00000000-0000-0000-0000-{i:012d}", "controller": True}],
                     "creationTimestamp": "2026-03-01T10:00:00Z"},
        "spec": {"nodeName": f"gpu-node-{i % 500}", "schedulerName": "scheduler-plugins-scheduler",
                 "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                 "command": ["torchrun", "--nnodes=8", "--nproc-per-node=8", "train.py"],
                                 "env": [{"name": f"ENV_{k}", "value": f"value-{k}-{i}"} for k in range(12)],
                                 "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                                               "requests": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"}}}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "nodeSelector": {"cloud.provider.com/accelerator": "h100"}},
        "status": {"phase": "Running", "hostIP": f"10.0.{i % 250}.{i % 200}", "podIP": f"10.1.{i % 250}.{i % 200}",
                   "startTime": "2026-03-01T10:00:05Z",
                   "conditions": [{"type": t, "status": "True", "lastTransitionTime": f"2026-03-01T10:00:0{k}Z"}
                                  for k, t in enumerate(("PodScheduled", "Initialized", "ContainersReady", "Ready"))],
                   "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0,
                                          "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                          "state": {"running": {"startedAt": "2026-03-01T10:00:09Z"}}}]},
    }


def make_event(i: int) -> dict[str, Any]:
    ns, pod = f"team-{i % 20}", f"train-{i // 8}-worker-{i % 8}"
    return {"metadata": {"name": f"{pod}.{i:x}", "namespace": ns, "creationTimestamp": "2026-03-01T10:00:00Z"},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": pod, "apiVersion": "v1"},
            "reason": "FailedScheduling", "type": "Warning", "count": 3,
            "message": "0/500 nodes are available: 12 Insufficient nvidia.com/gpu, 488 node(s) didn't match pod "
                       "topology spread constraints. preemption: 0/500 nodes are available: 500 No preemption "
                       "victims found for incoming pod.",
            "firstTimestamp": "2026-03-01T10:00:00Z", "lastTimestamp": "2026-03-01T10:01:00Z",
            "source": {"component": "default-scheduler"}, "reportingComponent": "default-scheduler"}


def serve(n_pods: int, n_events: int, conn: Any) -> None:
    from collectors.simulate.apiserver import ApiServer as FakeApiServer

    api = FakeApiServer().start()
    api.serve("", "v1", "pods", "Pod")
    api.serve("", "v1", "events", "Event")
    for i in range(n_pods):
        api.put("", "v1", "pods", make_pod(i))
    for i in range(n_events):
        api.put("", "v1", "events", make_event(i))
    api.compact()  # no history to keep around
    conn.send(api.url)
    conn.recv()  # until told to stop
    api.stop()


def raw_list(client: Client, res: Resource, limit: int, namespace: str | None = None) -> int:
    n, cont = 0, None
    while True:
        doc = client.get_json(res.path(namespace), {"limit": limit, **({"continue": cont} if cont else {})})
        n += len(doc["items"])
        cont = doc["metadata"].get("continue")
        if not cont:
            return n


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def relist(client: Client, resources: list[Resource], settings: config.Settings, page_limit: int,
           namespace: str | None = None) -> tuple[int, float, float, bool]:
    """The reflectors list ``resources`` and publish every object to Kafka: (objects, list-and-queue seconds,
    seconds until Kafka acknowledged everything, whether it did and nothing was dropped)."""
    from gangscope.transport.broker import bootstrap_servers
    from gangscope.transport.publish import Publisher

    with bootstrap_servers(settings) as bootstrap:
        publisher = Publisher(settings, bootstrap)
        sink = locked(publisher.publish)
        reflectors = [Reflector(client, r, sink, "bench", page_limit=page_limit, namespace=namespace)
                      for r in resources]
        t = time.monotonic()
        threads = [threading.Thread(target=r._list) for r in reflectors]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        listed_s = time.monotonic() - t
        ok = publisher.flush(300)
        seconds = time.monotonic() - t
        dropped = publisher.dropped
        publisher.close()
    return sum(len(r.known) for r in reflectors), listed_s, seconds, ok and dropped == 0


def populate_real(kubeconfig: str, namespace: str, n_pods: int, n_events: int) -> float:
    """The same pods and events created in ``namespace`` of a real API server (pods for a scheduler that does not
    exist, so nothing binds or changes them); returns the seconds it took."""
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client as kclient
    from kubernetes import config as kconfig

    api = kclient.CoreV1Api(kconfig.new_client_from_config(config_file=kubeconfig))
    t = time.monotonic()
    try:
        api.create_namespace({"metadata": {"name": namespace}})
    except kclient.ApiException as e:
        if e.status != 409:
            raise

    def pod(i: int) -> None:
        body = real_pod(i, namespace)
        status = body.pop("status")
        api.create_namespaced_pod(namespace, body)
        # The status a kubelet would write: the objects are then as large as the fake server's.
        api.patch_namespaced_pod_status(body["metadata"]["name"], namespace, {"status": status})

    def event(i: int) -> None:
        api.create_namespaced_event(namespace, real_event(i, namespace))

    have_pods = len(api.list_namespaced_pod(namespace).items)
    have_events = len(api.list_namespaced_event(namespace).items)
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(pod, range(have_pods, n_pods)))
        list(ex.map(event, range(have_events, n_events)))
    return time.monotonic() - t


def real_pod(i: int, namespace: str) -> dict[str, Any]:
    pod = make_pod(i)
    pod["metadata"].update(namespace=namespace, ownerReferences=[])
    pod["spec"].pop("nodeName")  # a pod bound to a node that does not exist is garbage-collected
    pod["spec"]["schedulerName"] = "nobody"
    return pod


def real_event(i: int, namespace: str) -> dict[str, Any]:
    ev = make_event(i)
    ev["metadata"]["namespace"] = ev["involvedObject"]["namespace"] = namespace
    return ev


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=50_000)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--page-limit", type=int, default=500)
    ap.add_argument("--bootstrap-servers", default=None)
    ap.add_argument("--kubeconfig", metavar="FILE", help="also relist the same objects from this real API server "
                    "(created in namespace --namespace if missing) and print the ratio to the fake one")
    ap.add_argument("--namespace", default="gangscope-bench")
    args = ap.parse_args()

    parent, child = mp.Pipe()
    server = mp.Process(target=serve, args=(args.pods, args.events, child), daemon=True)
    t = time.monotonic()
    server.start()
    url = parent.recv()
    print(f"fake API server with {args.pods} pods, {args.events} events ready in {time.monotonic() - t:.1f}s",
          file=sys.stderr)
    client = Client(url)
    rss_start = rss_mb()

    t = time.monotonic()
    n = raw_list(client, PODS, args.page_limit) + raw_list(client, EVENTS, args.page_limit)
    base_s = time.monotonic() - t
    print(f"baseline: paginated list+decode alone: objects={n} seconds={base_s:.2f} objects_per_s={n / base_s:,.0f}")

    total = args.pods + args.events
    settings = config.load(overrides={"kafka": {"bootstrap_servers": args.bootstrap_servers,
                                                "topic_prefix": f"bench{int(time.time())}."},
                                      "k8s": {"buffer_max_records": total + 1000}}, environ={})
    objects, listed_s, seconds, ok = relist(client, [PODS, EVENTS], settings, args.page_limit)
    parent.send("stop")
    server.join(10)
    print(f"relist: listed and queued in {listed_s:.2f}s; all acknowledged by Kafka after {seconds:.2f}s "
          f"(acked and none dropped: {'yes' if ok else 'NO'})")
    print(f"ratio: relist+publish / list alone = {seconds / base_s:.2f}x; peak RSS {rss_mb():.0f} MB "
          f"(before relist {rss_start:.0f} MB); resume state kept: {objects} x (uid, resourceVersion, ns, name)")
    line = f"relist: objects={objects} seconds={seconds:.2f} objects_per_s={objects / seconds:.0f}"
    ok = ok and objects == total
    if not args.kubeconfig:
        print(line)
        return 0 if ok else 1
    made_s = populate_real(args.kubeconfig, args.namespace, args.pods, args.events)
    print(f"real API server: {args.pods} pods and {args.events} events in {args.namespace} ({made_s:.1f}s to create)")
    real = Client.from_config(args.kubeconfig)
    t = time.monotonic()
    n_real = raw_list(real, PODS, args.page_limit,
                      args.namespace) + raw_list(real, EVENTS, args.page_limit, args.namespace)
    real_base_s = time.monotonic() - t
    r_objects, _, r_seconds, r_ok = relist(real, [PODS, EVENTS], settings, args.page_limit, args.namespace)
    print(f"fake: {line}")
    print(f"real: baseline: paginated list+decode alone: objects={n_real} seconds={real_base_s:.2f} "
          f"objects_per_s={n_real / real_base_s:,.0f}")
    print(f"real: relist: objects={r_objects} seconds={r_seconds:.2f} objects_per_s={r_objects / r_seconds:.0f}")
    print(f"ratio real/fake objects_per_s = {(r_objects / r_seconds) / (objects / seconds):.2f} "
          f"(list alone: {(n_real / real_base_s) / (n / base_s):.2f})")
    return 0 if ok and r_ok and r_objects == total else 1

if __name__ == "__main__":
    sys.exit(main())
