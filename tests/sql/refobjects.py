"""Reference objects (tests/fixtures/reference) moved onto the lakefix timeline, copied and renamed for variants.

The reference YAML files carry their own times (2026-09-02T08:00:00Z, ...). ``load`` shifts every
RFC 3339 time in a document by one offset, so the objects keep their own history (creation, condition
transitions) relative to each other and land at lakefix's T0.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from tests.sql.lakefix import T0

_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def _shift(value: Any, delta: timedelta) -> Any:
    if isinstance(value, dict):
        return {k: _shift(v, delta) for k, v in value.items()}
    if isinstance(value, list):
        return [_shift(v, delta) for v in value]
    if isinstance(value, str) and _TIME.match(value):
        t = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) + delta
        return t.strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def load(reference: Path, rel: str, base: str) -> list[dict[str, Any]]:
    """The documents of one reference file, with ``base`` (an RFC 3339 time in it) moved to T0."""
    docs = [d for d in yaml.safe_load_all((reference / rel).read_text()) if isinstance(d, dict)]
    delta = T0 - datetime.strptime(base, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return [_shift(d, delta) for d in docs]


def minutes_of(obj: dict[str, Any], path: str = "metadata.creationTimestamp") -> float:
    """Minutes after T0 of a time inside an object (dotted path)."""
    v: Any = obj
    for part in path.split("."):
        v = v[int(part)] if isinstance(v, list) else v[part]
    return (datetime.strptime(v, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) - T0).total_seconds() / 60


def variant(obj: dict[str, Any], old: str, new: str, api_version: str | None = None) -> dict[str, Any]:
    """A copy with every occurrence of ``old`` in names, links and uids replaced by ``new``."""
    out = yaml.safe_load(yaml.safe_dump(obj).replace(old, new))
    if old != new:  # another object: its own uid
        out["metadata"]["uid"] = f"{out['metadata'].get('uid', '')}-{new}"
    if api_version:
        out["apiVersion"] = api_version
    return out


def clone_pod(pod: dict[str, Any], name: str, uid: str, index: int | None = None, **status: Any) -> dict[str, Any]:
    """Another member of the same group (the reference files elide them): new name, uid and completion index."""
    out = copy.deepcopy(pod)
    out["metadata"]["name"], out["metadata"]["uid"] = name, uid
    if index is not None:
        out["metadata"].setdefault("labels", {})["batch.kubernetes.io/job-completion-index"] = str(index)
    out["status"] = {**out.get("status", {}), **status}
    return out
