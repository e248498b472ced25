"""Live throughput dips: a dip found while it lasts is published open and alerts; it resolves only when the
throughput recovers. Sandbox (``interconnect_degradation``: dlrm-train's IB port flaps from minute 28 to 48,
llama-70b-sft's NVLink stays degraded from minute 25 to the end) + `gangscope run` (the embedded broker) +
a real Alertmanager, watched while the scenario plays."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from collectors.simulate.sandbox import Sandbox
from gangscope import config
from reports.lifecycle import STATE_FILE
from tests.e2e.test_live import _run_env, _start_run, _topic

SPEED = 20.0


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


@pytest.mark.timeout(900)
def test_live_dip_opens_alerts_and_resolves_on_recovery(tmp_path: Path, broker: Any, alertmanager_server: Any
                                                        ) -> None:
    am = alertmanager_server
    foreign = {a["labels"].get("finding_id") for a in am.alerts()}  # another test's, on the session's Alertmanager
    prefix = f"dip{os.getpid()}."
    data = tmp_path / "data"
    sb = Sandbox(tmp_path / "sandbox", "interconnect_degradation", speed=SPEED, interval=30.0).start()
    origin = sb.sim_origin
    recovered = origin + timedelta(minutes=48)  # the IB flap on dlrm-train's node ends
    active: dict[str, list[datetime]] = {}  # finding id -> sandbox times at which its alert was active
    labels: dict[str, dict[str, str]] = {}
    run = None
    try:
        env = _run_env(sb.config, data, broker.bootstrap, prefix, am.url)
        log = tmp_path / "run.log"
        run = _start_run(env, log)
        state = data / STATE_FILE

        def dlrm_resolved() -> bool:
            try:
                entries = json.loads(state.read_text()).values()
            except (FileNotFoundError, json.JSONDecodeError):
                return False
            return any(e["finding"]["job"] == "dlrm-train" and e["state"] == "resolved" for e in entries)

        deadline = None
        while True:
            assert run.poll() is None, log.read_text()[-3000:]
            now = sb.now()
            for a in am.alerts():
                lab = a["labels"]
                if lab.get("alertname") == "GangscopeFinding" and lab.get("finding_id") not in foreign:
                    active.setdefault(lab["finding_id"], []).append(now)
                    labels[lab["finding_id"]] = lab
            if sb.finished:
                deadline = deadline or time.monotonic() + 240
                if dlrm_resolved() or time.monotonic() > deadline:
                    break
            time.sleep(1)
        at_end = {a["labels"]["finding_id"] for a in am.alerts()
                  if a["labels"].get("alertname") == "GangscopeFinding" and a["labels"]["finding_id"] not in foreign}
        run.send_signal(signal.SIGTERM)
        assert run.wait(180) == 0, log.read_text()[-3000:]
    finally:
        sb.stop()
        if run is not None and run.poll() is None:
            run.kill()

    settings = config.load(sb.config, overrides={"data": str(data), "kafka": {"bootstrap_servers": broker.bootstrap,
                                                                                 "topic_prefix": prefix}}, environ={})
    changes = [json.loads(m.value) for m in _topic(settings, broker.bootstrap, f"{prefix}findings")]
    by_job: dict[str, list[dict[str, Any]]] = {}
    for c in changes:
        by_job.setdefault(c["job"], []).append(c)
    # Only the two degraded jobs: the healthy ones are never published.
    assert set(by_job) == {"dlrm-train", "llama-70b-sft"}, sorted(by_job)

    # dlrm-train: published open while the flap lasts, its alert firing, then resolved once throughput is back.
    dlrm = by_job["dlrm-train"]
    assert {c["root_cause"] for c in dlrm} == {"interconnect_degradation"}
    assert len({c["finding_id"] for c in dlrm}) == 1
    first, last = dlrm[0], dlrm[-1]
    assert first["state"] == "opened" and first["ended_at"] is None, first
    assert _t(first["changed_at"]) < recovered
    fid = first["finding_id"]
    assert labels[fid]["root_cause"] == "interconnect_degradation" and labels[fid]["namespace"] == "ml-platform"
    assert [t for t in active.get(fid, []) if t < recovered], "the open dip never fired in Alertmanager"
    assert last["state"] == "resolved" and [c["state"] for c in dlrm].count("resolved") == 1
    # Resolved by the recovery, not before it: its end is the first sample back above the threshold (the
    # start of that sample's 15 s bucket, so up to a bucket before the recovery instant).
    assert _t(last["ended_at"]) > recovered - timedelta(seconds=15) and _t(last["changed_at"]) >= recovered
    assert _t(last["ended_at"]) < recovered + timedelta(minutes=3)
    assert fid not in at_end

    # llama-70b-sft: degraded to the end, so opened and never resolved; still firing when the scenario is over.
    llama = by_job["llama-70b-sft"]
    assert llama[0]["state"] == "opened" and llama[0]["ended_at"] is None
    assert "resolved" not in {c["state"] for c in llama}
    assert llama[0]["finding_id"] in at_end
