"""Live, end to end: the sandbox at 20x + `gangscope run` (killed and restarted mid-scenario) ->
findings in diagnose, on the findings topic and in a real Alertmanager; nothing lost, nothing doubled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition

from collectors.simulate.sandbox import Sandbox
from gangscope import config
from gangscope.rootcauses import FAULTS
from gangscope.transport import kafka as pkafka
from pipeline import lake
from pipeline.land import stored_offsets
from reports.diagnose import findings
from reports.lifecycle import STATE_FILE

SPEED = 20.0
PRECEDENCE = FAULTS


def _run_env(sandbox_config: Path, data: Path, bootstrap: str, prefix: str, alertmanager_url: str) -> dict[str, str]:
    """`gangscope run` against a sandbox: models every 3 s, no reports / compaction / retention, alerts kept
    far beyond the test (an alert that leaves Alertmanager was resolved by gangscope, not expired)."""
    return {**os.environ, "GANGSCOPE_CONFIG": str(sandbox_config), "GANGSCOPE_DATA": str(data),
            "GANGSCOPE_KAFKA_BOOTSTRAP_SERVERS": bootstrap, "GANGSCOPE_KAFKA_TOPIC_PREFIX": prefix,
            "GANGSCOPE_PIPELINE_GROUP_ID": f"{prefix}pipeline", "GANGSCOPE_PIPELINE_FLUSH_SECONDS": "1",
            "GANGSCOPE_SCHEDULE_MODELS_BUILD": "interval:3", "GANGSCOPE_SCHEDULE_REPORT_HOURLY": "off",
            "GANGSCOPE_SCHEDULE_REPORT_DAILY": "off", "GANGSCOPE_SCHEDULE_COMPACTION": "off",
            "GANGSCOPE_SCHEDULE_RETENTION": "off", "GANGSCOPE_SERVER_LISTEN": "127.0.0.1:0",
            "GANGSCOPE_FINDINGS_ALERTMANAGER_URL": alertmanager_url, "GANGSCOPE_FINDINGS_ALERT_TTL_S": "7200"}


def _start_run(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "gangscope.app.cli", "run"], env=env,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _topic(settings: config.Settings, bootstrap: str, name: str) -> list[Any]:
    """Every record of a topic: read until nothing more comes for 3 s (the embedded broker's end offsets
    lag the records a consumer can read, so they are no stopping point)."""
    c = pkafka.consumer(settings, bootstrap, group_id=None, consumer_timeout_ms=500)
    try:
        tps = [TopicPartition(name, p) for p in c.partitions_for_topic(name) or set()]
        c.assign(tps)
        c.seek_to_beginning()
        out: list[Any] = []
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 3:
            for batch in c.poll(timeout_ms=500).values():
                out.extend(batch)
                quiet_since = time.monotonic()
        return out
    finally:
        c.close()


def _next_offsets(settings: config.Settings, bootstrap: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> one past the last record of gangscope's input topics."""
    out: dict[tuple[str, int], int] = {}
    for name in pkafka.topics(settings).values():
        for m in _topic(settings, bootstrap, name):
            out[(m.topic, m.partition)] = max(out.get((m.topic, m.partition), 0), m.offset + 1)
    return out


@pytest.mark.timeout(900)
def test_live_sandbox_run_findings_alertmanager_restart(tmp_path: Path, broker: Any, alertmanager_server: Any
                                                        ) -> None:
    am = alertmanager_server
    # The Alertmanager is the session's: alerts another test left active there (test_live_dip's, still within
    # their time to live) are not this run's (CI: one of them read as an alert whose finding was not open).
    foreign = {a["labels"].get("finding_id") for a in am.alerts()}
    prefix = f"live{os.getpid()}."
    data = tmp_path / "data"
    sb = Sandbox(tmp_path / "sandbox", "mixed", speed=SPEED, interval=30.0).start()
    try:
        env = _run_env(sb.config, data, broker.bootstrap, prefix, am.url)
        log = tmp_path / "run.log"
        run = _start_run(env, log)
        seen_in_am: dict[str, dict[str, str]] = {}  # finding id -> labels of its alert while it was active

        def watch_am() -> None:
            for a in am.alerts():
                lab = a["labels"]
                if lab.get("alertname") == "GangscopeFinding" and lab.get("finding_id") not in foreign:
                    seen_in_am[lab["finding_id"]] = lab

        # Kill it (no clean shutdown) with findings published, and start it again: the preemption (minute 25)
        # is open by then and heals when the job runs again (minute 46), after the restart.
        while sb.now() < sb.sim_origin + timedelta(minutes=36):
            assert run.poll() is None, log.read_text()[-3000:]
            watch_am()
            time.sleep(1)
        run.send_signal(signal.SIGKILL)
        assert run.wait(30) == -signal.SIGKILL
        time.sleep(2)
        run = _start_run(env, log)
        while not sb.finished:
            assert run.poll() is None, log.read_text()[-3000:]
            watch_am()
            time.sleep(1)
        # Two more builds over everything the scenario produced.
        state = data / STATE_FILE
        for _ in range(2):
            mark = state.stat().st_mtime
            deadline = time.monotonic() + 300
            while state.stat().st_mtime == mark and time.monotonic() < deadline:
                assert run.poll() is None, log.read_text()[-3000:]
                time.sleep(1)
        watch_am()
        am_end = {a["labels"]["finding_id"]: a for a in am.alerts()
                  if a["labels"].get("alertname") == "GangscopeFinding" and a["labels"]["finding_id"] not in foreign}
        at_end = set(am_end)
        final_api = {uid: rv for uid, rv in _api_versions(sb).items()}
        run.send_signal(signal.SIGTERM)
        assert run.wait(180) == 0, log.read_text()[-3000:]
    finally:
        sb.stop()
        if run.poll() is None:
            run.kill()

    settings = config.load(sb.config, overrides={"data": str(data), "kafka": {"bootstrap_servers": broker.bootstrap,
                                                                                 "topic_prefix": prefix}}, environ={})
    truth = json.loads((sb.scenario_dir / "truth.json").read_text())
    latest = {(j["namespace"], j["job"]): j["root_cause"] for j in truth["jobs"]}
    injected = {k: v for k, v in latest.items() if v != "healthy"}
    healthy = {k for k, v in latest.items() if v == "healthy"}
    assert len(injected) >= 8 and healthy

    # diagnose: every injected incident under its class as the job's primary finding; healthy jobs: nothing.
    con = lake.connect(settings, read_only=True, create=False)
    try:
        rows = findings(con, include_healthy=False)
        lake_versions = dict(con.execute("SELECT uid, max(TRY_CAST(resource_version AS BIGINT)) FROM "
                                         "raw.k8s_objects WHERE uid IS NOT NULL GROUP BY uid").fetchall())
        offsets = {(t, p): o for (t, p), o in stored_offsets(con).items()}
        dupes = con.execute("SELECT count(*) FROM (SELECT kafka_partition, kafka_offset FROM raw.k8s_objects "
                            "GROUP BY ALL HAVING count(*) > 1)").fetchone()[0]
    finally:
        con.close()
    primary: dict[tuple[str, str], str] = {}
    for r in rows:
        k = (r["namespace"], r["job"])
        if k not in primary or PRECEDENCE.index(r["root_cause"]) < PRECEDENCE.index(primary[k]):
            primary[k] = r["root_cause"]
    assert {k: primary.get(k) for k in injected} == injected
    assert not [(r["namespace"], r["job"], r["root_cause"]) for r in rows if (r["namespace"], r["job"]) in healthy]

    # The findings topic: keyed by a finding id that is one id per incident, across the kill and restart.
    records = _topic(settings, broker.bootstrap, f"{prefix}findings")
    changes = [json.loads(m.value) for m in records]
    assert all(m.key.decode() == json.loads(m.value)["finding_id"] for m in records)
    assert {c["state"] for c in changes} <= {"opened", "updated", "resolved"}
    for c in changes:
        assert set(c) >= {"cluster", "namespace", "job", "job_kind", "workload", "pod_group", "root_cause",
                          "severity", "started_at", "ended_at", "confidence", "nodes", "evidence", "summary",
                          "finding_id", "state", "changed_at"}
    ids: dict[tuple[str, str, str], set[str]] = {}
    for c in changes:
        ids.setdefault((c["namespace"], c["job"], c["root_cause"]), set()).add(c["finding_id"])
    assert {k: len(v) for k, v in ids.items() if len(v) > 1} == {}  # no incident published under two ids
    published = {(ns, job): cause for (ns, job, cause) in ids}
    for (ns, job), cause in injected.items():
        assert (ns, job, cause) in ids, f"{ns}/{job} {cause} never published"
    assert not [k for k in published if k in healthy]

    # Alertmanager: every finding that was open got its alert, with the finding's labels; a finding that
    # healed (opened, later resolved) had an active alert that is gone at the end, long before it could expire.
    states: dict[str, list[str]] = {}
    for c in changes:
        states.setdefault(c["finding_id"], []).append(c["state"])
    by_id = {c["finding_id"]: c for c in changes}
    for fid, seq in states.items():
        if "opened" in seq:
            lab = seen_in_am.get(fid)
            assert lab is not None, f"{by_id[fid]['job']} {by_id[fid]['root_cause']} never reached Alertmanager"
            c = by_id[fid]
            assert (lab["cluster"], lab["namespace"], lab["job"], lab["root_cause"]) == (
                c["cluster"], c["namespace"], c["job"], c["root_cause"])
            assert lab["severity"] in ("critical", "warning")
    final = json.loads((data / STATE_FILE).read_text())
    healed = {fid for fid, seq in states.items() if "opened" in seq and seq[-1] == "resolved"}
    assert healed, [(by_id[f]["job"], by_id[f]["root_cause"], seq) for f, seq in states.items()]
    # Issue 31: the image that could not be pulled while the registry was down, and the crash loop that ended,
    # were published open and resolved when fixed.
    for cause in ("startup_failure", "workload_crash"):
        (key,) = [k for k, v in injected.items() if v == cause]
        (fid,) = ids[(*key, cause)]
        assert states[fid][0] == "opened" and states[fid][-1] == "resolved", (key, cause, states[fid])
    assert not (healed & at_end), [(by_id[f]["job"], by_id[f]["root_cause"], states[f], am_end[f])
                                   for f in healed & at_end]
    assert {fid for fid, e in final.items() if e["state"] == "open"} == at_end

    # Nothing lost across the kill: every record on Kafka landed once, and every object's last version is in.
    assert dupes == 0
    assert _next_offsets(settings, broker.bootstrap) == offsets
    missing = {uid: rv for uid, rv in final_api.items() if lake_versions.get(uid) != rv}
    assert missing == {}


def _api_versions(sb: Sandbox) -> dict[str, int]:
    """uid -> resourceVersion of every object of a kind gangscope watches that the sandbox's API holds now."""
    from collectors.k8s.discovery import SLOTS

    watched = {(group, slot.plural) for slot in SLOTS for group, _ in slot.alternatives}
    out: dict[str, int] = {}
    with sb.api.cond:
        for (group, _, plural), res in sb.api.resources.items():
            if (group, plural) in watched:
                for obj in res.objects.values():
                    out[obj["metadata"]["uid"]] = int(obj["metadata"]["resourceVersion"])
    return out
