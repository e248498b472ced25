"""List+watch of one resource, resumable: what client-go calls a reflector.

The Python client has none, so this is it: a paginated list, then a watch from the
list's resourceVersion with bookmarks; on a broken stream, resume from the last
resourceVersion seen (bookmarks advance it) after a backoff with jitter; on ``410
Gone`` (HTTP, or an ``ERROR`` event with code 410) relist, and emit DELETED for the
objects that vanished meanwhile. A list is framed by RELIST_BEGIN/RELIST_END markers.

Only ``uid -> (resourceVersion, namespace, name)`` is kept per object: enough to
detect vanished objects and skip already-sent versions, small enough for 100k pods.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from collectors.k8s.client import ApiError, Client
from collectors.k8s.discovery import Resource
from gangscope import clock, telemetry
from gangscope.records import RELIST_BEGIN, RELIST_END, WATCH_TYPES, K8sEvent
from gangscope.timesanity import DEFAULT_SKEW_S, check_object

log = logging.getLogger(__name__)

Sink = Callable[[K8sEvent], None]
# /healthz calls a watch stalled when no line (event or bookmark) came for this long: an API server sends a
# bookmark about once a minute, so three missed in a row.
WATCH_STALL_S = 180.0


class _ContinueExpired(Exception):
    """A list's continue token expired (410 on a later page): list again from the start."""


class Reflector:
    """Keeps one resource (optionally one namespace) flowing into ``sink`` until ``stop`` is set."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        sink: Sink,
        cluster: str,
        *,
        namespace: str | None = None,
        page_limit: int = 500,
        watch_timeout_s: float = 300.0,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        stop: threading.Event | None = None,
        skew_s: float = DEFAULT_SKEW_S,
    ) -> None:
        self.client = client
        self.resource = resource
        self.sink = sink
        self.cluster = cluster
        self.namespace = namespace
        self.page_limit = page_limit
        self.watch_timeout_s = watch_timeout_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.stop = stop or threading.Event()
        self.skew_s = skew_s
        self.path = resource.path(namespace)
        self.known: dict[str, tuple[str, str | None, str]] = {}
        self.resource_version: str | None = None
        # Counters for gangscope's own metrics.
        self.lists = 0
        self.relists = 0
        self.reconnects = 0
        self.events = 0

    def __repr__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"Reflector({self.resource.api_version} {self.resource.plural}{where})"

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        need_list = True
        failures = 0
        while not self.stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                    failures = 0
                if self._watch():
                    failures = 0
                    continue
                failures += 1  # an empty stream that ended at once: treat like a failure
            except ApiError as e:
                if self.stop.is_set():
                    break  # the stream was closed because we are stopping
                failures += 1
                if e.status == 410:
                    log.info("%s: resourceVersion %s expired (410 Gone); relisting", self, self.resource_version)
                    self.relists += 1
                    telemetry.WATCH_RELISTS.labels(self.resource.kind).inc()
                    need_list = True
                    if failures == 1:
                        continue  # relist at once the first time, back off if it keeps happening
                elif e.status == 403:  # RBAC: the other kinds keep flowing; this one waits for the permission
                    log.error("%s: %s; the collector's role needs get, list and watch on %s (deploy/kubernetes/"
                              "rbac.yaml); retrying", self, e, self.resource.id)
                else:
                    log.warning("%s: %s; retrying", self, e)
            except Exception:  # a bug must not end the watch for good: log, back off, relist
                if self.stop.is_set():
                    break
                log.exception("%s: unexpected error; relisting", self)
                failures += 1
                need_list = True
            self.reconnects += 1
            telemetry.WATCH_RECONNECTS.labels(self.resource.kind).inc()
            delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** min(failures - 1, 10))
            self.stop.wait(delay * (0.5 + random.random()))  # full jitter around the step

    # --- list -----------------------------------------------------------------------------
    def _list(self) -> None:
        """Paginated list; emit what changed since we last knew, DELETED for what is gone."""
        api_version, kind = self.resource.api_version, self.resource.kind
        # resource_version '' says "a list from nothing: every object follows" (first list of this process),
        # which lets the models mark what the lake knew and this list lacks as deleted (stg_k8s_gone).
        self._emit(K8sEvent(self.cluster, RELIST_BEGIN, _now(), api_version=api_version, kind=kind,
                            resource_version="" if not self.known else (self.resource_version or None),
                            namespace=self.namespace))
        seen: set[str] = set()
        rv = ""
        sent = 0  # events of this list that will land (RELIST_END says how many: the models wait for them all)
        while True:
            try:
                for doc in self._pages():
                    for item in doc.get("items") or []:
                        item.setdefault("apiVersion", api_version)  # list items carry neither
                        item.setdefault("kind", kind)
                        meta = item.get("metadata") or {}
                        uid, irv = meta.get("uid", ""), meta.get("resourceVersion", "")
                        seen.add(uid)
                        prev = self.known.get(uid)
                        if prev is not None and prev[0] == irv:
                            continue  # already published this version
                        self.known[uid] = (irv, meta.get("namespace"), meta.get("name", ""))
                        sent += self._emit(K8sEvent(self.cluster, "MODIFIED" if prev else "ADDED", _now(), item))
                    rv = (doc.get("metadata") or {}).get("resourceVersion") or rv
                    if self.stop.is_set():
                        return
                break
            except _ContinueExpired:
                # Restart from the first page; what was already sent is in ``known`` and not sent again.
                log.info("%s: list continue token expired; restarting list", self)
                seen.clear()
        for uid in [u for u in self.known if u not in seen]:
            irv, ns, name = self.known.pop(uid)
            sent += self._emit(K8sEvent(self.cluster, "DELETED", _now(), self._tombstone(uid, irv, ns, name)))
        self.resource_version = rv
        self.lists += 1
        self._emit(K8sEvent(self.cluster, RELIST_END, _now(), api_version=api_version, kind=kind,
                            resource_version=rv, namespace=self.namespace, sent=sent))

    def _page(self, cont: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": self.page_limit}
        if cont:
            params["continue"] = cont
        try:
            return self.client.get_json(self.path, params)
        except ApiError as e:
            if e.status == 410 and cont:
                raise _ContinueExpired() from None
            raise

    def _pages(self) -> Iterator[dict[str, Any]]:
        """List pages, the next one fetched while the caller processes the current one."""
        with ThreadPoolExecutor(1, thread_name_prefix="list-prefetch") as ex:
            fut = ex.submit(self._page, None)
            while True:
                doc = fut.result()
                cont = (doc.get("metadata") or {}).get("continue") or None
                if cont:
                    fut = ex.submit(self._page, cont)
                yield doc
                if not cont:
                    return

    def _tombstone(self, uid: str, rv: str, ns: str | None, name: str) -> dict[str, Any]:
        """What we know of an object that vanished while we were away (its last resourceVersion)."""
        meta: dict[str, Any] = {"name": name, "uid": uid, "resourceVersion": rv}
        if ns:
            meta["namespace"] = ns
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind, "metadata": meta}

    # --- watch ----------------------------------------------------------------------------
    def _watch(self) -> bool:
        """Watch from our resourceVersion until the stream ends; True if it delivered anything."""
        timeout = int(self.watch_timeout_s * (1 + 0.1 * random.random()))
        params = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": timeout,
                  "resourceVersion": self.resource_version or ""}
        got = False
        for line in self.client.stream_lines(self.path, params, read_timeout_s=timeout + 30):
            if self.stop.is_set():
                return got
            try:
                ev = json.loads(line)
                etype, obj = ev["type"], ev["object"]
                if not isinstance(obj, dict):
                    raise TypeError("object is not a JSON object")
            except (ValueError, KeyError, TypeError, RecursionError) as e:
                # A whole line that is not a watch event (a stream cut mid-line ends in ApiError instead): it lands
                # as a dead letter with its reason, and the stream goes on, so nothing after it is lost.
                why = "JSON nested too deep to read" if isinstance(e, RecursionError) else f"{type(e).__name__}: {e}"
                self.sink(K8sEvent(self.cluster, "ADDED", _now(), api_version=self.resource.api_version,
                                   kind=self.resource.kind, rejected=f"{self.resource.kind} {self.path}: undecodable "
                                   f"watch line of {len(line)} bytes ({why[:200]}): {line[:200]!r}"))
                continue
            got = True
            telemetry.heartbeat(f"watch-{self.resource.id}", WATCH_STALL_S)  # events and bookmarks alike
            meta = obj.get("metadata") or {}
            rv = meta.get("resourceVersion")
            if etype == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                continue
            if etype == "ERROR":  # a Status; code 410 (our resourceVersion is too old) makes run() relist
                raise ApiError(int(obj.get("code") or 0), f"watch {self.path}: {obj.get('message', obj)}")
            if etype not in WATCH_TYPES:
                log.warning("%s: ignoring watch event of type %r", self, etype)
                continue
            uid = meta.get("uid", "")
            if etype == "DELETED":
                self.known.pop(uid, None)
            else:
                prev = self.known.get(uid)
                if prev is not None and prev[0] == rv:
                    self.resource_version = rv
                    continue  # a version we already sent (a resumed stream replaying its tail)
                self.known[uid] = (rv or "", meta.get("namespace"), meta.get("name", ""))
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
            self._emit(K8sEvent(self.cluster, etype, _now(), obj))
            if rv:
                self.resource_version = rv
        return got

    def _emit(self, ev: K8sEvent) -> bool:
        """Hand ``ev`` to the sink; False when time sanity refused it (it lands as a dead letter)."""
        self.events += 1
        if ev.object is not None:
            try:
                reason = check_object(ev.object, ev.observed_at, self.skew_s)
            except RecursionError:
                reason = "object nested too deep to read"
            if reason:  # time sanity: the event lands as a dead letter with its reason, nothing shifted
                ev = dataclasses.replace(ev, rejected=f"{self.resource.kind} {self.path}: {reason}")
        self.sink(ev)
        return ev.rejected is None


def _now() -> datetime:
    return clock.now()
