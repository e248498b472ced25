"""Findings as a lifecycle: opened, updated, resolved, each under a stable finding id.

``marts.findings`` is recomputed at every model build; people need to hear about a change once.
After each build, :class:`FindingsOutlet` compares the build's findings with the lifecycle kept in
``<data>/findings-state.json`` and publishes every change to

* the Kafka topic ``<prefix>findings``, keyed by the finding id: the finding as ``diagnose --format json``
  prints it (CONTRACT section 4) plus ``finding_id``, ``state`` and ``changed_at``;
* Alertmanager (``POST /api/v2/alerts``), resending open alerts before their ``endsAt`` lapses;
* the gauge ``gangscope_findings_active{root_cause,severity}``.

A finding is the same finding across builds while its job, class and (when it has several) start stay
the same; its id is derived from its first sighting, so it is also stable across restarts. The state file
is written after the publication succeeded: a crash in between republishes the same change under the same
id (at least once, never a second finding).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gangscope import clock
from gangscope.config import Settings

log = logging.getLogger(__name__)

STATE_FILE = "findings-state.json"
# What makes an open finding "updated" (the summary and evidence move at every build while it lasts).
SIGNIFICANT = ("severity", "confidence", "nodes", "started_at", "ended_at")
KEEP_RESOLVED = timedelta(days=7)


def finding_id(f: dict[str, Any]) -> str:
    key = "/".join(str(f.get(k) or "") for k in ("cluster", "namespace", "job", "root_cause", "started_at"))
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def _key(f: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(f.get(k)) for k in ("cluster", "namespace", "job", "root_cause"))


def _rfc3339(t: datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def diff(state: dict[str, dict[str, Any]], current: list[dict[str, Any]], now: datetime
         ) -> list[dict[str, Any]]:
    """Update ``state`` (finding id -> {"state": open|resolved, "finding": {...}}) in place from one build's
    incident findings; return the changes, each a finding with ``finding_id``, ``state`` and ``changed_at``."""
    changes: list[dict[str, Any]] = []
    by_key: dict[tuple[str, ...], list[str]] = {}
    for fid, entry in state.items():
        by_key.setdefault(_key(entry["finding"]), []).append(fid)
    matched: set[str] = set()
    at = _rfc3339(now)

    def emit(fid: str, what: str, f: dict[str, Any]) -> None:
        changes.append({**f, "finding_id": fid, "state": what, "changed_at": at})

    for f in sorted(current, key=lambda r: (r.get("started_at") or "")):
        if f.get("root_cause") == "healthy":
            continue
        same = [fid for fid in by_key.get(_key(f), []) if fid not in matched]
        exact = [fid for fid in same if state[fid]["finding"].get("started_at") == f.get("started_at")]
        open_ = [fid for fid in same if state[fid]["state"] == "open"]
        fid = (exact or open_ or [None])[0]
        if fid is None:  # a new incident
            fid = finding_id(f)
            while fid in state:  # the same start as a resolved one of this job and class: a new incident still
                fid = hashlib.sha1(fid.encode()).hexdigest()[:16]
            state[fid] = {"state": "resolved" if f.get("ended_at") else "open", "finding": f}
            by_key.setdefault(_key(f), []).append(fid)
            matched.add(fid)
            emit(fid, "resolved" if f.get("ended_at") else "opened", f)
            continue
        matched.add(fid)
        entry = state[fid]
        if entry["state"] == "resolved":
            continue  # a resolved incident stays resolved; a later one gets a new id
        old = entry["finding"]
        entry["finding"] = f
        if f.get("ended_at"):
            entry["state"] = "resolved"
            emit(fid, "resolved", f)
        elif any(old.get(k) != f.get(k) for k in SIGNIFICANT):
            emit(fid, "updated", f)
    for fid, entry in state.items():
        if entry["state"] == "open" and fid not in matched:  # the build no longer finds it: it is over
            entry["state"] = "resolved"
            entry["finding"] = {**entry["finding"], "ended_at": at}
            emit(fid, "resolved", entry["finding"])
    # Forget resolved incidents after a week, once their resolution was published (in an earlier build) and
    # Alertmanager took it: an old incident resolved only now still gets its resolved alert.
    horizon, just = _rfc3339(now - KEEP_RESOLVED), {c["finding_id"] for c in changes}
    for fid in [fid for fid, e in state.items() if e["state"] == "resolved" and fid not in just
                and e.get("alert_state") in (None, "resolved") and (e["finding"].get("ended_at") or at) < horizon]:
        del state[fid]
    return changes


def alert(entry: dict[str, Any], fid: str, settings: Settings, wall: float) -> dict[str, Any]:
    """One Alertmanager v2 alert for a finding; its times are on Alertmanager's (wall) clock."""
    f = entry["finding"]
    wall_now = datetime.fromtimestamp(wall, UTC)
    started = datetime.fromisoformat(f["started_at"].replace("Z", "+00:00")) if f.get("started_at") else wall_now
    starts = min(started, wall_now)  # a sandbox clock may run ahead of the wall clock
    if entry["state"] == "open":
        ends = wall_now + timedelta(seconds=settings.findings.alert_ttl_s)
    else:
        ends = max(starts, wall_now)
    reports = Path(settings.schedule.reports_dir) if settings.schedule.reports_dir else settings.data / "reports"
    report = settings.findings.report_url or reports.resolve().as_uri()
    return {
        "labels": {"alertname": "GangscopeFinding", "cluster": f["cluster"], "namespace": f["namespace"],
                   "job": f["job"], "root_cause": f["root_cause"], "severity": f["severity"], "finding_id": fid},
        "annotations": {"summary": f.get("summary") or "", "report": str(report), "started_at": f.get("started_at")
                        or "", "nodes": ", ".join(f.get("nodes") or [])},
        "startsAt": _rfc3339(starts), "endsAt": _rfc3339(ends),
        "generatorURL": str(report),
    }


class FindingsOutlet:
    """Publishes the lifecycle after each build; one per ``gangscope run`` (not thread-safe: builds never overlap).

    ``send`` publishes a list of changes durably or raises (the app gives it the Kafka topic; a stage
    does not import the transport).
    """

    def __init__(self, settings: Settings, send: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.settings = settings
        self.send = send
        self.path = settings.data / STATE_FILE

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def _save(self, state: dict[str, dict[str, Any]]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, separators=(",", ":")))
        os.replace(tmp, self.path)

    def tick(self, current: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Publish what changed since the last build; returns the changes."""
        from gangscope import telemetry

        state = self.load()
        changes = diff(state, current, clock.now())
        if changes and self.send is not None:
            self.send(changes)  # raises if not taken: the state is not saved, the changes are sent again
        if self.settings.findings.alertmanager_url:
            self._alertmanager(state, {c["finding_id"] for c in changes})
        self._save(state)
        for c in changes:
            telemetry.FINDING_CHANGES.labels(c["state"]).inc()
        telemetry.FINDINGS_ACTIVE.clear()
        for e in state.values():
            if e["state"] == "open":
                telemetry.FINDINGS_ACTIVE.labels(e["finding"]["root_cause"], e["finding"]["severity"]).inc()
        return changes

    def _alertmanager(self, state: dict[str, dict[str, Any]], changed: set[str]) -> None:
        """Send changed alerts, and open ones not sent for ``alert_resend_s``; a failure is retried next build."""
        wall = time.time()
        due = [fid for fid, e in state.items()
               if fid in changed or (e["state"] == "open" and wall - e.get("alert_sent_at", 0) >= self.settings
                                     .findings.alert_resend_s) or e.get("alert_state") not in (None, e["state"])]
        if not due:
            return
        alerts = [alert(state[fid], fid, self.settings, wall) for fid in due]
        # Alertmanager knows an alert by its labels: when a finding's labels changed (its severity), the alert
        # sent under the old ones is resolved explicitly, or it would stay firing beside the new one.
        now = _rfc3339(datetime.fromtimestamp(wall, UTC))
        body = alerts + [{**a, "labels": state[fid]["alert_labels"], "startsAt": now, "endsAt": now}
                         for fid, a in zip(due, alerts, strict=True)
                         if state[fid].get("alert_labels") not in (None, a["labels"])]
        url = self.settings.findings.alertmanager_url.rstrip("/") + "/api/v2/alerts"  # type: ignore[union-attr]
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "gangscope"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the operator's URL
                resp.read()
        except (OSError, ValueError) as e:
            log.warning("Alertmanager at %s did not take %d alerts (sent again next build): %s", url, len(body), e)
            for fid in due:
                state[fid]["alert_state"] = "unsent"
            return
        for fid, a in zip(due, alerts, strict=True):
            state[fid]["alert_sent_at"] = wall
            state[fid]["alert_state"] = state[fid]["state"]
            state[fid]["alert_labels"] = a["labels"]


def publish_after_build(settings: Settings, outlet: FindingsOutlet, con: Any = None) -> list[dict[str, Any]]:
    """Read the freshly built ``marts.findings`` (on the build's own connection when given: no second
    attach of the lake between a build and its publication) and hand them to ``outlet``."""
    from pipeline import lake
    from reports.diagnose import findings

    if con is not None:
        return outlet.tick(findings(con, include_healthy=False))
    own = lake.connect(settings, read_only=True, create=False)
    try:
        rows = findings(own, include_healthy=False)
    finally:
        own.close()
    return outlet.tick(rows)
