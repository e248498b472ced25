"""Captures of a real Kubernetes 1.37 control plane (tests/fixtures/real-k8s-1.37/), landed offline and judged.

``judge`` lands capture files into a fresh lake through the pipeline's own landing code (no broker), builds the
models with the thresholds the captures were played with, and returns each job's primary class. ``first_contact``
rewrites a capture as a collector that started in the middle of it would have written it.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from gangscope.rootcauses import ROOT_CAUSES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real-k8s-1.37"
# The thresholds the scenarios were played with (tests/k8s_real/scenarios.py THRESHOLDS): short, so each fault
# was judged within a minute.
THRESHOLDS = {"admission_wait_s": 30, "gang_timeout_s": 30}
PRECEDENCE = ROOT_CAUSES


def primary(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(namespace, job) -> the class of its primary finding (CONTRACT section 4 precedence)."""
    out: dict[tuple[str, str], str] = {}
    for r in rows:
        key = (r["namespace"], r["job"])
        if key not in out or PRECEDENCE.index(r["root_cause"]) < PRECEDENCE.index(out[key]):
            out[key] = r["root_cause"]
    return out


def judge(files: list[Path], data: Path) -> dict[tuple[str, str], str]:
    """Land ``files`` into a new lake under ``data``, build, and return every job's primary class."""
    rows = findings(files, data)
    return primary(rows)


def findings(files: list[Path], data: Path) -> list[dict[str, Any]]:
    from gangscope import config
    from gangscope.app.evaluate import land_files
    from pipeline import lake, models
    from reports import diagnose

    settings = config.load(overrides={"data": str(data), "cluster": "real-k8s", "thresholds": THRESHOLDS},
                           environ={})
    land_files(settings, [str(f) for f in files], [])
    con = lake.connect(settings)
    try:
        models.build(settings, con)
        return diagnose.findings(con, include_healthy=True)
    finally:
        con.close()


def observed(line: str) -> datetime:
    return datetime.fromisoformat(json.loads(line)["observedAt"].replace("Z", "+00:00"))


def first_contact(lines: list[str], at: datetime) -> list[str]:
    """The capture as a collector that started at ``at`` would have written it: every object that existed then,
    ADDED in its state at ``at`` (its history only in its own timestamps), then the events after ``at`` as watched
    (what ``Timeline.start_capture_at`` does to a simulated timeline)."""
    state: dict[tuple[str, str], dict[str, Any]] = {}
    later: list[str] = []
    stamp = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    for line in lines:
        if observed(line) > at:
            later.append(line)
            continue
        ev = json.loads(line)
        key = (ev["object"]["apiVersion"], ev["object"]["metadata"]["uid"])
        if ev["type"] == "DELETED":
            state.pop(key, None)
        else:
            state[key] = ev["object"]
    listed = [json.dumps({"type": "ADDED", "object": o, "observedAt": stamp}, separators=(",", ":"))
              for o in state.values()]
    return listed + later
