"""Each job kind watched live (issue 33): the sandbox serves ``gang_assembly@<kind>`` (every job submitted as a
RayCluster, TrainJob, PyTorchJob, MPIJob, LeaderWorkerSet or Kueue plain-pod group, with their CRDs) on a fast
clock, and gangscope's real k8s collector lists and watches it through its capture sink twice at once: from the
start (everything watched live) and from the middle of life (its first sight an initial list at minute 12, history
only in the objects' own timestamps). Each capture lands with the scenario's scrapes up to the moment it stopped,
the models build, and ``diagnose`` must give the truth's jobs (no RayCluster, JobSet, launcher Job, StatefulSet,
exporter pod or pod taken for a job), each under its submitted kind, with the truth's class: the three gangs that
cannot assemble (their timeout passed by minute 16) ``gang_assembly``, the healthy ones healthy.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collectors.k8s.capture import capture
from collectors.k8s.client import Client
from collectors.k8s.discovery import SLOTS
from collectors.simulate.kinds import KINDS
from collectors.simulate.sandbox import OPERATORS, RESOURCES, Sandbox, served
from gangscope import clock, config
from gangscope.app.evaluate import land_files, primary
from gangscope.records import parse_rfc3339
from pipeline import lake, models
from reports import diagnose

SCENARIO = "gang_assembly"
SPEED = 60.0  # simulated seconds per real second
MID_S = 12 * 60.0  # the second collector starts here: its first sight is the initial list
UNTIL_S = 18 * 60.0  # every fault's onset plus the gang timeout (5 min) is behind us by now
NODES = 16


class Watch:
    """``gangscope capture k8s`` (the real collector, writing through its JSON Lines sink) on a thread."""

    def __init__(self, sb: Sandbox, work: Path) -> None:
        work.mkdir()
        self.out, self.stop = work / "k8s.jsonl", threading.Event()
        settings = config.load(sb.config, overrides={"data": str(work / "data")}, environ={})
        client = Client.from_config(str(sb.kubeconfig), None)
        self.thread = threading.Thread(target=capture, args=(settings, client, self.out, None, self.stop),
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


def _sleep_until(sb: Sandbox, sim_s: float) -> None:
    time.sleep(max(0.0, sb.at_wall(sb.sim_origin + timedelta(seconds=sim_s)) - time.time()))


def _cut(metrics: Path, out: Path, until_ms: int) -> Path:
    """The scenario's scrapes up to ``until_ms``: what scraping the exporters until then would have landed."""
    with metrics.open() as f, out.open("w") as w:
        for line in f:
            if line.startswith("#") or not line.strip() or int(line.rsplit(" ", 1)[1]) <= until_ms:
                w.write(line)
    return out


def _diagnose(work: Path, k8s: Path, metrics: Path) -> list[dict[str, Any]]:
    settings = config.load(overrides={"data": str(work / "data")}, environ={})
    land_files(settings, [str(k8s)], [str(metrics)])
    con = lake.connect(settings)
    try:
        # nothing refused at the edge: the collector's times and the receipts share the sandbox's time line
        assert con.execute("SELECT count(*) FROM raw.dead_letters").fetchone() == (0,)
        models.build(settings, con)
        return diagnose.findings(con, include_healthy=True)
    finally:
        con.close()


def _check(rows: list[dict[str, Any]], truth: dict[str, Any], kind: str, cut: float, form: str) -> None:
    expected = {(j["namespace"], j["job"]): j for j in truth["jobs"]
                if parse_rfc3339(j["created"]).timestamp() <= cut}
    got = {(r["namespace"], r["job"]) for r in rows}
    assert got == set(expected), f"{form}: phantom {sorted(got - set(expected))}, missing {sorted(set(expected) - got)}"
    assert {(r["namespace"], r["job"], r["job_kind"]) for r in rows} == {(*k, kind) for k in expected}, form
    pred = primary(rows)
    classes = {k: j["root_cause"] for k, j in expected.items()}
    assert pred == classes, form
    assert {"gang_assembly", "healthy"} <= set(classes.values())  # the scenario did show both by then


@pytest.fixture
def sandbox_clock():
    """gangscope's clock set to the sandbox's, as `gangscope run --config <sandbox>/gangscope.yaml` sets it: the
    collector stamps, and the pipeline receives, on the sandbox's time line."""
    yield clock.configure
    clock.configure(None)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", list(KINDS))
def test_each_kind_watched_live_and_first_seen_in_the_middle(how: str, tmp_path: Path, sandbox_clock) -> None:
    kind = KINDS[how]
    sb = Sandbox(tmp_path / "sandbox", f"{SCENARIO}@{how}", nodes=NODES, speed=SPEED).start()
    sandbox_clock(sb.sim_origin, sb.wall_origin, sb.speed)
    watches: dict[str, Watch] = {}
    try:
        watches["live"] = Watch(sb, tmp_path / "live")
        _sleep_until(sb, MID_S)
        watches["mid"] = Watch(sb, tmp_path / "mid")
        _sleep_until(sb, UNTIL_S)
        for w in watches.values():
            w.close()
        cut = sb.now().timestamp()
    finally:
        for w in watches.values():
            w.stop.set()
        sb.stop()
    truth = json.loads((sb.scenario_dir / "truth.json").read_text())
    metrics = _cut(sb.scenario_dir / "metrics.prom", tmp_path / "metrics.prom", int(cut * 1000))
    for form, w in watches.items():
        events = [json.loads(line) for line in w.out.read_text().splitlines()]
        first = min(parse_rfc3339(e["observedAt"]) for e in events) - sb.sim_origin
        if kind != "PodGroup":  # the submitted objects were listed and watched through their CRD (no plain pods')
            assert any(e["object"]["kind"] == kind for e in events), form
        if form == "live":  # watching before the first fault: every fault arrives as watch events
            onset = min(parse_rfc3339(j["onset"]) for j in truth["jobs"] if j["onset"]) - sb.sim_origin
            assert first < onset and any(e["type"] == "MODIFIED" for e in events), (first, onset)
        else:  # first seen mid-life: what existed then arrives as the initial list
            assert first >= timedelta(seconds=MID_S)
        _check(_diagnose(tmp_path / form, w.out, metrics), truth, kind, cut, form)


def test_the_sandbox_serves_the_crds_of_the_kinds_a_scenario_submits() -> None:
    base = {(g, p) for g, _, p, _, _ in RESOURCES}
    ray = {(g, p) for g, _, p, _, _ in served({("v1", "Pod"), ("ray.io/v1", "RayCluster")})}
    assert ray - base == {("ray.io", "rayclusters"), ("ray.io", "rayjobs")}  # KubeRay installs both
    mpi = {(g, p) for g, _, p, _, _ in served({("kubeflow.org/v2beta1", "MPIJob")})}
    assert mpi - base == {("kubeflow.org", "mpijobs")}
    assert served({("v1", "Pod"), ("batch/v1", "Job")}) == RESOURCES
    # each at the version the collector's discovery prefers
    preferred = {s.kind: s.alternatives[0] for s in SLOTS}
    for op in OPERATORS:
        for g, versions, _, kind, _ in op:
            assert (g, versions[0]) == (preferred[kind][0], preferred[kind][1][0]), kind


@pytest.mark.timeout(120)
def test_a_scenario_with_objects_the_sandbox_does_not_serve_is_refused_at_start(tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, "healthy@k8s-1.37", nodes=20)
    with pytest.raises(ValueError, match=r"objects of .*Workload scheduling\.k8s\.io/v1beta1, which the sandbox "
                       r"does not serve"):
        sb.start()
    assert sb.api._server is None and sb._thread is None  # nothing served, no clock playing


def test_replay_receives_on_the_sandbox_clock(tmp_path: Path, sandbox_clock) -> None:
    """A capture of a fast sandbox runs ahead of the wall clock: replayed on the sandbox's clock (`gangscope replay
    --config <sandbox>/gangscope.yaml`) nothing is refused; on the wall clock, the same lines are (time sanity)."""
    from collectors.k8s.jsonl import read_events
    from collectors.metrics.replayfile import read_metrics_file

    ahead = datetime.now(UTC) + timedelta(hours=2)
    stamp = ahead.isoformat(timespec="seconds").replace("+00:00", "Z")
    k8s = tmp_path / "k8s.jsonl"
    k8s.write_text(json.dumps({"type": "ADDED", "observedAt": stamp, "object": {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "creationTimestamp": stamp}}}) + "\n")
    prom = tmp_path / "metrics.prom"
    prom.write_text(f'up{{job="node",instance="n1:9100"}} 1 {int(ahead.timestamp() * 1000)}\n')

    def refused() -> tuple[list[str | None], list[str | None]]:
        return ([e.rejected for e in read_events(k8s, "c")],
                [b.rejected for b in read_metrics_file(prom, "c")])

    wall = refused()
    assert all(wall[0]) and all(wall[1]) and wall[0] and wall[1]
    sandbox_clock(ahead - timedelta(minutes=1), time.time(), 60.0)  # a sandbox clock two hours ahead
    assert refused() == ([None], [None])
