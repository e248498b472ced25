"""``gangscope sandbox``: a simulated cluster served live, on a clock that can run faster than real time.

The scenario is generated exactly as ``gangscope simulate`` writes it (``k8s.jsonl``, ``metrics.prom``,
``truth.json`` under ``<dir>/scenario``), starting at the moment the sandbox starts. Then it plays:

* the Kubernetes API (:mod:`collectors.simulate.apiserver`) applies each watch event of the timeline
  when the sandbox clock reaches its ``observedAt``: list, watch, bookmarks, selectors, single GETs,
  discovery for every group gangscope reads, and ``kubectl`` works against the written kubeconfig;
* every exporter of the scenario (dcgm-exporter and node_exporter per node, Kueue, each training job's
  rank-0 pod) answers ``GET /exporters/<job>/<instance>/metrics`` with its latest scrape at or before
  the sandbox clock, as Prometheus text with the sample timestamps of the scenario (the exporter's own
  ``job``/``instance`` labels are left to the scraper, as a real exporter leaves them). An exporter
  whose last scrape is older than two intervals (it went silent, or its pod is gone) answers 503.
  Each is also a pod, as in a cluster: the DaemonSet pods of the GPU Operator's dcgm-exporter and of
  node_exporter, Kueue's controller-manager (labelled as their charts label them), and the rank-0 training
  pods carry ``prometheus.io/scrape``; the API server's pod proxy
  (``/api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics``) reaches each, so ``gangscope run`` with only the
  kubeconfig discovers and scrapes them as it would a real cluster's from outside.

The clock reads the wall clock at start and runs ``speed`` times faster (faster than real time, it starts at the
scenario's first second, the cluster set up, once the scenario is generated: no minute of it plays before the API
server serves).
``gangscope.yaml`` beside the kubeconfig carries the kubeconfig, the targets and the clock, so ``gangscope run
--config`` observes (and ``gangscope replay --config`` receives) on the same time line. Objects are served in the
API version the scenario wrote them (the sandbox does no conversion): the few Kueue Workloads written in v1beta1
also appear on a v1beta2 watch as v1beta1.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import mmap
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import yaml

from collectors.simulate.apiserver import ApiServer

log = logging.getLogger(__name__)

# (group, versions, plural, kind, namespaced): every kind the simulator writes and gangscope reads.
RESOURCES = (
    ("", ("v1",), "pods", "Pod", True),
    ("", ("v1",), "nodes", "Node", False),
    ("", ("v1",), "events", "Event", True),
    ("batch", ("v1",), "jobs", "Job", True),
    ("jobset.x-k8s.io", ("v1alpha2",), "jobsets", "JobSet", True),
    ("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", "Workload", True),
    ("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "clusterqueues", "ClusterQueue", False),
    ("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "localqueues", "LocalQueue", True),
    ("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "resourceflavors", "ResourceFlavor", False),
    ("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "topologies", "Topology", False),
    ("scheduling.x-k8s.io", ("v1alpha1",), "podgroups", "PodGroup", True),
    ("scheduling.volcano.sh", ("v1beta1",), "podgroups", "PodGroup", True),
    ("scheduling.k8s.io", ("v1alpha2",), "workloads", "Workload", True),
    ("scheduling.k8s.io", ("v1alpha2",), "podgroups", "PodGroup", True),
)
# The CRDs of the operators teams submit jobs through (issue 33), at the version discovery prefers
# (collectors/k8s/discovery.py): served when the scenario submits one of their kinds, as a cluster serves them
# once the operator is installed (KubeRay installs RayJob with RayCluster).
OPERATORS = (
    (("ray.io", ("v1",), "rayclusters", "RayCluster", True), ("ray.io", ("v1",), "rayjobs", "RayJob", True)),
    (("trainer.kubeflow.org", ("v1alpha1",), "trainjobs", "TrainJob", True),),
    (("kubeflow.org", ("v1",), "pytorchjobs", "PyTorchJob", True),),
    (("kubeflow.org", ("v2beta1",), "mpijobs", "MPIJob", True),),
    (("leaderworkerset.x-k8s.io", ("v1",), "leaderworkersets", "LeaderWorkerSet", True),),
)
SETUP_S = 1.0  # the simulator writes the cluster (Nodes, Kueue queues, Topology) in the scenario's first second
PIPELINE_FLUSH_S = 2.0  # gangscope's default pipeline.flush_seconds
_LABEL = re.compile(rb',?\b(?:job|instance)="[^"]*"')
_JOB = re.compile(rb'\bjob="([^"]*)",instance="([^"]*)"')
_POD = re.compile(rb'\bnamespace="([^"]*)",pod="([^"]*)"')
# Exporter pods as their charts make them: scenario job -> (namespace, owner kind and name, labels the discovery
# presets select, port, scheme, image, hostNetwork).
EXPORTER_PODS: dict[str, tuple[str, str, str, dict[str, str], int, str, str, bool]] = {
    "dcgm-exporter": ("gpu-operator", "DaemonSet", "nvidia-dcgm-exporter", {"app": "nvidia-dcgm-exporter"}, 9400,
                      "http", "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04", False),
    "node-exporter": ("monitoring", "DaemonSet", "prometheus-node-exporter",
                      {"app.kubernetes.io/name": "prometheus-node-exporter"}, 9100, "http",
                      "quay.io/prometheus/node-exporter:v1.9.1", True),
    "kueue": ("kueue-system", "ReplicaSet", "kueue-controller-manager-6d8f7b9c4",
              {"control-plane": "controller-manager"}, 8443, "https", "registry.k8s.io/kueue/kueue:v0.19.2", False),
}
CONTAINERS = {"dcgm-exporter": "nvidia-dcgm-exporter", "node-exporter": "node-exporter", "kueue": "manager"}
TRAINING_PORT = 8000


@dataclass
class Exporter:
    """One simulated scrape target: its scrapes in the scenario file as (ts_ms, start, end) byte ranges."""

    job: str
    instance: str
    ts: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"/exporters/{quote(self.job, safe='')}/{quote(self.instance, safe='')}/metrics"


def index_metrics(data: bytes | mmap.mmap) -> dict[tuple[str, str], Exporter]:
    """Find each scrape (a run of lines of one job/instance/timestamp, with its ``# TYPE`` lines)."""
    out: dict[tuple[str, str], Exporter] = {}
    pos, n = 0, len(data)
    block_start = 0  # where the scrape being read began (its first # TYPE line)
    header_start: int | None = None  # first # line since the last sample line
    cur: tuple[bytes, bytes, int] | None = None
    while pos < n:
        end = data.find(b"\n", pos)
        end = n if end < 0 else end + 1
        if data[pos:pos + 1] == b"#":
            if header_start is None:
                header_start = pos
        elif end - pos > 1:
            line = data[pos:end]
            m = _JOB.search(line)
            key = (m.group(1), m.group(2), int(line.rsplit(b" ", 1)[1])) if m else None
            if key != cur:
                start = header_start if header_start is not None else pos
                if cur is not None:
                    _add(out, cur, block_start, start)
                cur, block_start = key, start
            header_start = None
        pos = end
    if cur is not None:
        _add(out, cur, block_start, n)
    return out


def _add(out: dict[tuple[str, str], Exporter], key: tuple[bytes, bytes, int], start: int, end: int) -> None:
    job, inst = key[0].decode(), key[1].decode()
    e = out.setdefault((job, inst), Exporter(job, inst))
    e.ts.append(key[2])
    e.spans.append((start, end))


Resources = tuple[tuple[str, tuple[str, ...], str, str, bool], ...]


def plurals(resources: Resources) -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> plural, at every version served."""
    return {(f"{g}/{v}" if g else v, k): p for g, vs, p, k, _ in resources for v in vs}


def served(objects: set[tuple[str, str]]) -> Resources:
    """What the sandbox serves for a scenario whose objects carry these (apiVersion, kind): RESOURCES, and the
    CRDs of every operator that makes one of them."""
    return RESOURCES + tuple(r for op in OPERATORS if objects & plurals(op).keys() for r in op)


class Sandbox:
    """Generate a scenario, serve it, and play it on the sandbox clock until :meth:`stop`."""

    def __init__(self, directory: Path, scenario: str = "mixed", *, seed: int = 1, nodes: int = 20,
                 hours: float = 1.0, interval: float = 15.0, speed: float = 1.0, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        if speed <= 0:
            raise ValueError("--speed must be positive")
        self.directory, self.scenario, self.seed, self.nodes = Path(directory), scenario, seed, nodes
        self.hours, self.interval, self.speed, self.host, self.port = hours, interval, speed, host, port
        self.api = ApiServer(bookmark_interval_s=1.0)
        self.api.now = lambda: self.now().timestamp()  # ages in kubectl's tables, the Date header
        self.exporters: dict[tuple[str, str], Exporter] = {}
        # (namespace, pod) -> (exporter, port, scheme): what the pod proxy reaches
        self.exporter_pods: dict[tuple[str, str], tuple[Exporter, int, str]] = {}
        self.applied = 0
        self._events: list[tuple[float, dict[str, Any]]] = []  # (sim unix time, watch event)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._data: mmap.mmap | None = None
        self._file: Any = None
        self.wall_origin = 0.0
        self.sim_origin = datetime.now(UTC)

    # -- clock --------------------------------------------------------------------------
    def now(self) -> datetime:
        """The sandbox clock."""
        return self.sim_origin + timedelta(seconds=(time.time() - self.wall_origin) * self.speed)

    def advance(self, seconds: float) -> None:
        """Move the sandbox clock ``seconds`` (simulated) forward at once; what was due meanwhile plays now."""
        self.wall_origin -= seconds / self.speed
        self._play()

    def at_wall(self, sim: datetime) -> float:
        """Unix wall time at which the sandbox clock reads ``sim``."""
        return self.wall_origin + (sim - self.sim_origin).total_seconds() / self.speed

    @property
    def end(self) -> datetime:
        return self.sim_origin + timedelta(hours=self.hours)

    @property
    def finished(self) -> bool:
        return self.now() >= self.end

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Sandbox:
        from collectors.simulate import generate

        self.wall_origin = float(int(time.time()))
        self.sim_origin = datetime.fromtimestamp(self.wall_origin, UTC)
        g = generate(self.scenario, self.directory, seed=self.seed, nodes=self.nodes, hours=self.hours,
                     start=self.sim_origin, interval=self.interval, subdir="scenario")
        self.scenario_dir = g.directory
        with (g.directory / "k8s.jsonl").open() as f:
            for line in f:
                ev = json.loads(line)
                at = datetime.fromisoformat(ev.pop("observedAt").replace("Z", "+00:00")).timestamp()
                self._events.append((at, ev))
        wanted = {(ev["object"]["apiVersion"], ev["object"]["kind"]) for _, ev in self._events}
        resources = served(wanted)
        self._plurals = plurals(resources)
        missing = sorted(f"{k} {v}" for v, k in wanted if (v, k) not in self._plurals)
        if missing:  # said now, not as a watch thread dying mid-play
            raise ValueError(f"scenario {self.scenario} has objects of {', '.join(missing)}, which the sandbox "
                             "does not serve (what it serves: docs/sandbox.md)")
        self._file = (g.directory / "metrics.prom").open("rb")
        self._data = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self.exporters = index_metrics(self._data)
        for group, versions, plural, kind, namespaced in resources:
            self.api.serve(group, versions[0], plural, kind, namespaced)
            for v in versions[1:]:  # one storage, served at every version (no conversion)
                self.api.resources[(group, v, plural)] = self.api.resources[(group, versions[0], plural)]
        self._training_pods = self._index_training_pods()
        if self.speed != 1.0:  # a fast clock starts now, past the setup: generating would be minutes played unseen
            self.wall_origin = time.time() - SETUP_S / self.speed
        self._play()  # the setup objects (Nodes, queues) exist before anyone lists
        self._put_exporter_pods()
        self.api.mount("/exporters/", self._serve_exporter)
        self.api.pod_proxy = self._proxy
        self.api.start(self.host, self.port)
        self.write_files()
        self._thread = threading.Thread(target=self._run, name="sandbox-clock", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.api.stop()
        if self._data is not None:
            self._data.close()
            self._file.close()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the timeline ---------------------------------------------------------------------
    def _play(self) -> None:
        with self._lock:
            self._play_due()

    def _play_due(self) -> None:
        now = self.now().timestamp()
        while self.applied < len(self._events) and self._events[self.applied][0] <= now:
            self._apply(self._events[self.applied][1])
            self.applied += 1

    def _apply(self, ev: dict[str, Any]) -> None:
        obj = ev["object"]
        if obj["kind"] == "Pod":
            obj = self._scrape_annotated(obj)
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = self._plurals[(obj["apiVersion"], obj["kind"])]
        meta = obj["metadata"]
        if ev["type"] == "DELETED":
            with contextlib.suppress(KeyError):  # already gone
                self.api.delete(group, version, plural, meta["name"], meta.get("namespace", ""))
        else:
            self.api.put(group, version, plural, obj)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._play()
            nxt = self._events[self.applied][0] if self.applied < len(self._events) else None
            wait = 0.5 if nxt is None else (nxt - self.now().timestamp()) / self.speed
            self._stop.wait(min(0.5, max(0.0, wait)))

    # -- exporters ------------------------------------------------------------------------
    def _index_training_pods(self) -> dict[tuple[str, str], Exporter]:
        """The pods whose throughput each training exporter serves (its samples' own namespace/pod labels)."""
        out: dict[tuple[str, str], Exporter] = {}
        assert self._data is not None
        for (job, _), e in self.exporters.items():
            if job != "training":
                continue
            for start, end in e.spans:
                for m in _POD.finditer(self._data[start:end]):
                    out.setdefault((m.group(1).decode(), m.group(2).decode()), e)
        return out

    def _scrape_annotated(self, pod: dict[str, Any]) -> dict[str, Any]:
        """A rank-0 training pod opts in to scraping as such pods do (``prometheus.io/scrape``, port, path)."""
        meta = pod.get("metadata") or {}
        e = self._training_pods.get((meta.get("namespace", ""), meta.get("name", "")))
        if e is None:
            return pod
        self.exporter_pods[(meta["namespace"], meta["name"])] = (e, TRAINING_PORT, "http")
        pod = dict(pod, metadata=dict(meta, annotations={
            **(meta.get("annotations") or {}), "prometheus.io/scrape": "true",
            "prometheus.io/port": str(TRAINING_PORT), "prometheus.io/path": "/metrics"}))
        return pod

    def _put_exporter_pods(self) -> None:
        """One Running pod per exporter of the scenario, created at the start (they run before any job)."""
        import hashlib

        created = self.sim_origin.strftime("%Y-%m-%dT%H:%M:%SZ")
        nodes = {n["metadata"]["name"]: n for (_, _), n in self.api.resources[("", "v1", "nodes")].objects.items()}
        first_node = sorted(nodes)[0] if nodes else ""
        for (job, inst), e in sorted(self.exporters.items()):
            if job not in EXPORTER_PODS:
                continue
            ns, owner_kind, owner, labels, port, scheme, image, host_net = EXPORTER_PODS[job]
            node = self._node_of_ip(inst.rsplit(":", 1)[0]) or first_node
            suffix = hashlib.sha256(f"{job}/{inst}".encode()).hexdigest()[:5]
            name = f"{owner}-{suffix}"  # a DaemonSet's or ReplicaSet's pod: its owner's name and five characters
            node_obj = nodes.get(node) or {}
            node_ip = next((a["address"] for a in node_obj.get("status", {}).get("addresses", [])
                            if a.get("type") == "InternalIP"), "")
            index = sorted(nodes).index(node) if node in nodes else 0
            ip = node_ip if host_net else f"192.168.{index % 256}.{2 + list(EXPORTER_PODS).index(job)}"
            container = CONTAINERS[job]
            running = {"startedAt": created}
            self.api.put("", "v1", "pods", {
                "metadata": {"name": name, "namespace": ns, "labels": dict(labels), "creationTimestamp": created,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner,
                                                  "uid": hashlib.sha256(owner.encode()).hexdigest()[:32],
                                                  "controller": True, "blockOwnerDeletion": True}]},
                "spec": {"nodeName": node, "hostNetwork": host_net, "containers": [{
                    "name": container, "image": image,
                    "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]}]},
                "status": {"phase": "Running", "hostIP": node_ip, "podIP": ip, "podIPs": [{"ip": ip}],
                           "startTime": created, "qosClass": "Burstable",
                           "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                                           "lastTransitionTime": created}
                                          for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                                                    "ContainersReady", "PodScheduled")],
                           "containerStatuses": [{"name": container, "image": image, "imageID": "", "ready": True,
                                                  "started": True, "restartCount": 0, "state": {"running": running}}]},
            })
            self.exporter_pods[(ns, name)] = (e, port, scheme)

    def _proxy(self, namespace: str, pod: str, scheme: str, port: int, path: str,
               query: dict[str, list[str]]) -> tuple[int, str, bytes] | None:
        """The pod proxy: the exporter a pod runs, on its port and scheme only."""
        found = self.exporter_pods.get((namespace, pod))
        if found is None:
            return None
        e, own_port, own_scheme = found
        if port != own_port or scheme != own_scheme:
            return 503, "text/plain", (f"error trying to reach service: dial tcp: {scheme}://{pod}:{port}: connect: "
                                       "connection refused").encode()
        if path.rstrip("/") != "/metrics":
            return 404, "text/plain", b"404 page not found\n"
        return self._serve_exporter(e.path, query)

    def _serve_exporter(self, path: str, query: dict[str, list[str]]) -> tuple[int, str, bytes] | None:
        parts = path.split("/")
        if len(parts) != 5 or parts[4] != "metrics":
            return None
        e = self.exporters.get((unquote(parts[2]), unquote(parts[3])))
        if e is None or self._data is None:
            return None
        now_ms = int(self.now().timestamp() * 1000)
        i = bisect.bisect_right(e.ts, now_ms) - 1
        if i < 0 and e.ts and e.ts[0] - now_ms <= 2 * self.interval * 1000:
            i = 0  # the scenario's first scrapes are staggered after the start: its exporters already answer
        if i < 0 or now_ms - e.ts[i] > 2 * self.interval * 1000:
            return 503, "text/plain", b"exporter not answering\n"
        start, end = e.spans[i]
        body = _LABEL.sub(b"", self._data[start:end]).replace(b"{}", b"")
        return 200, "text/plain; version=0.0.4; charset=utf-8", body

    # -- files ----------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def config(self) -> Path:
        return self.directory / "gangscope.yaml"

    def targets(self) -> list[dict[str, Any]]:
        """Static scrape targets for every exporter, scraped once per simulated interval."""
        wall_interval = self.interval / self.speed
        out = []
        for (job, inst), e in sorted(self.exporters.items()):
            t: dict[str, Any] = {"url": self.api.url + e.path, "job": job, "interval_s": round(wall_interval, 3),
                                 "timeout_s": round(min(5.0, wall_interval), 3)}
            node = self._node_of_ip(inst.rsplit(":", 1)[0])
            if node and job in ("node-exporter", "dcgm-exporter"):
                t["labels"] = {"node": node}  # what kubernetes_sd relabelling adds from spec.nodeName
            out.append(t)
        return out

    def _node_of_ip(self, ip: str) -> str | None:
        with self.api.cond:
            res = self.api.resources[("", "v1", "nodes")]
            for (_, name), obj in res.objects.items():
                if any(a.get("address") == ip for a in obj.get("status", {}).get("addresses", [])):
                    return name
        return None

    def write_files(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "gangscope-sandbox", "cluster": {"server": self.api.url}}],
            "users": [{"name": "sandbox", "user": {}}],
            "contexts": [{"name": "gangscope-sandbox", "context": {"cluster": "gangscope-sandbox",
                                                                   "user": "sandbox"}}],
            "current-context": "gangscope-sandbox",
        }, sort_keys=False))
        settings: dict[str, Any] = {
            "collectors": ["k8s", "metrics"],
            "k8s": {"kubeconfig": str(self.kubeconfig.resolve())},
            "metrics": {"targets": self.targets()},
        }
        if self.speed != 1.0:
            settings["clock"] = {"sim_origin": self.sim_origin.isoformat().replace("+00:00", "Z"),
                                 "wall_origin": self.wall_origin, "speed": self.speed}
            # The pipeline's batching wait is real time, like the scrape interval: scaled, so a fast clock does
            # not turn the default 2 s into 2 x speed simulated seconds of time to verdict.
            settings["pipeline"] = {"flush_seconds": round(max(0.1, PIPELINE_FLUSH_S / self.speed), 3)}
        self.config.write_text(yaml.safe_dump(settings, sort_keys=False))
