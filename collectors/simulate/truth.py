"""Ground truth of a scenario (``truth.json``): every job, its true root-cause class, onset and nodes.

The classifier is scored against this file, so it names every injected fault: one entry per job run
(a re-run of the same name is a second entry), ``onset`` when the injected condition begins (null for
healthy jobs), ``nodes`` the nodes the job's pods were bound to (empty if none ever were), and
``faults`` the telemetry-level injections (including traps that must *not* be called faults). In a
first-contact variant (``capture_at``) a job whose objects were all gone before the capture began is left out:
gangscope cannot meet it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from collectors.simulate.scenarios import Scenario

TRAPS = {"exporter_silent", "nvlink_missing", "hot_gpu", "clock_dip"}
# Node changes that are normal life unless a job's fault is injected with them: a node cordoned under a job that
# keeps running, a node NotReady or cordoned that holds none of any job's pods.
DECOYS_UNLESS_OWNED = {"node_lost", "cordon", "drain", "gpu_unhealthy"}


def _ts(start: datetime, t: float | None) -> str | None:
    if t is None:
        return None
    return (start + timedelta(seconds=t)).isoformat(timespec="seconds").replace("+00:00", "Z")


def build(scn: Scenario, start: datetime, variant: str | None = None,
          capture_at: float | None = None) -> dict[str, Any]:
    from collectors.simulate.variants import visible

    jobs = []
    for j in scn.jobs:
        if not visible(j, capture_at):
            continue
        jobs.append({
            "namespace": j.namespace, "job": j.name, "job_kind": j.submitted_as or j.kind, "uid": j.uid,
            "root_cause": j.root_cause, "onset": _ts(start, j.onset) if j.root_cause != "healthy" else None,
            "nodes": [n.name for n in j.nodes],
            "workload": j.name if j.submitted_as == "PodGroup" and j.kueue else j.workload, "pod_group": j.pod_group,
            "gang": j.gang, "kueue": j.kueue, "created": _ts(start, j.created),
            "cluster_queue": j.cq if j.kueue else None, "gpus_per_pod": j.gpus_per_pod,
            "topology": None if not j.kueue or j.required is None else
            {"level": j.required, "mode": "preferred" if j.preferred else "required"},
            "preemptor": f"{j.preemptor.namespace}/{j.preemptor.name}" if j.preemptor else None,
            "unscheduled_pods": j.pod_names if j.volcano_unschedulable else j.pod_names[len(j.nodes):],
        })
    faults = []
    for f in scn.faults:
        owner = next((j for j in scn.jobs if f.node in j.nodes and j.root_cause != "healthy"
                      and j.onset is not None and abs(j.onset - f.at) < 120), None)
        trap = f.kind in TRAPS or (f.kind == "xid" and f.xid in (13, 31, 43, 45)) \
            or (f.kind in DECOYS_UNLESS_OWNED and owner is None)
        entry: dict[str, Any] = {"kind": f.kind, "node": f.node.name, "onset": _ts(start, f.at),
                                 "until": _ts(start, f.until), "trap": trap}
        if f.gpu is not None:
            entry.update(gpu=f.gpu, uuid=f.node.gpu_uuids[f.gpu])
        if f.xid is not None:
            entry["xid"] = f.xid
        if f.device is not None:
            entry["ib_device"] = f"mlx5_{f.device}"
        entry["job"] = f"{owner.namespace}/{owner.name}" if owner else None
        faults.append(entry)
    return {"scenario": scn.name, "variant": variant, "seed": scn.seed, "nodes": len(scn.cluster.nodes),
            "start": _ts(start, 0), "capture_at": _ts(start, capture_at), "end": _ts(start, scn.duration),
            "jobs": jobs, "faults": faults}


def write(scn: Scenario, start: datetime, path: Path, variant: str | None = None,
          capture_at: float | None = None) -> dict[str, Any]:
    truth = build(scn, start, variant, capture_at)
    path.write_text(json.dumps(truth, indent=2) + "\n")
    return truth
