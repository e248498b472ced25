"""The Kubernetes collector: discovery, and one reflector thread per served kind.

Discovery is repeated every ``k8s.discovery_interval_s`` so a CRD installed later (or
a Kueue upgrade that moves to a newer API version) is picked up without a restart.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from collectors.k8s.client import ApiError, Client
from collectors.k8s.discovery import Resource, resolve, selected_slots, served_resources
from collectors.k8s.reflector import Reflector, Sink
from gangscope.config import Settings
from gangscope.errors import UserError

log = logging.getLogger(__name__)


class K8sCollector:
    """Runs reflectors for every kind of CONTRACT section 2 the server serves, into ``sink``."""

    def __init__(self, settings: Settings, client: Client, sink: Sink, *, watch_timeout_s: float = 300.0,
                 backoff_base_s: float = 0.5, announce: bool = True) -> None:
        self.settings = settings
        self.client = client
        self.sink = sink
        self.slots = selected_slots(settings.k8s.kinds)
        self.watch_timeout_s = watch_timeout_s
        self.backoff_base_s = backoff_base_s
        self.active: dict[str, tuple[Resource, list[Reflector], threading.Event]] = {}
        self.threads: list[threading.Thread] = []
        self._skipped: set[str] = set()
        # False: the first round's "watching" / "skipping" lines are debug (``run``'s startup summary said them).
        self._say = log.info if announce else log.debug

    def discover(self) -> None:
        """One discovery round: start reflectors for newly served kinds, stop those gone or superseded."""
        chosen = resolve(self.slots, served_resources(self.client))
        for name, res in chosen.items():
            current = self.active.get(name)
            if current and current[0] == res:
                continue
            if current:
                log.info("%s: now served as %s (was %s)", name, res.api_version if res else "nothing",
                         current[0].api_version)
                current[2].set()
                del self.active[name]
            if res is None:
                if name not in self._skipped:
                    self._say("skipping %s: not served by the API server (will look again)", name)
                    self._skipped.add(name)
                continue
            self._skipped.discard(name)
            self._start(name, res)

    def _start(self, name: str, res: Resource) -> None:
        stop = threading.Event()
        namespaces: list[str | None] = list(self.settings.k8s.namespaces) if res.namespaced else []
        reflectors = [
            Reflector(self.client, res, self.sink, self.settings.cluster, namespace=ns,
                      page_limit=self.settings.k8s.page_limit, watch_timeout_s=self.watch_timeout_s,
                      backoff_base_s=self.backoff_base_s, stop=stop, skew_s=self.settings.clock_skew_s)
            for ns in (namespaces or [None])
        ]
        for r in reflectors:
            t = threading.Thread(target=r.run, name=f"watch-{res.id}-{r.namespace or 'all'}", daemon=True)
            t.start()
            self.threads.append(t)
        self._say("watching %s %s%s", res.api_version, res.kind,
                  f" in {', '.join(n for n in namespaces if n)}" if namespaces else "")
        self.active[name] = (res, reflectors, stop)

    def run(self, stop: threading.Event, patient: bool = False) -> None:
        """Discover, then re-discover until ``stop``. The API server unreachable at the start fails at once, or,
        ``patient`` (``run``'s default collectors), is said once and tried again until it answers."""
        retry_s = min(30.0, self.settings.k8s.discovery_interval_s)
        waited = False
        while True:
            try:
                self.discover()
                break
            except ApiError as e:
                if not patient:
                    raise UserError(f"cannot reach the Kubernetes API server at {self.client.host}: {e}") from None
                waited = True
                if stop.wait(retry_s):
                    self.close()
                    return
        if waited:
            log.info("the Kubernetes API server at %s answers now: watching %s", self.client.host,
                     ", ".join(f"{r.kind} {r.api_version}" for r, _, _ in self.active.values()) or "nothing")
        self._say = log.info
        while not stop.wait(self.settings.k8s.discovery_interval_s):
            try:
                self.discover()
            except ApiError as e:
                log.warning("discovery failed (%s); keeping the current watches", e)
        self.close()

    def close(self, join_s: float = 5.0) -> None:
        for _, _, s in self.active.values():
            s.set()
        self.client.close()
        for t in self.threads:
            t.join(join_s)

    def stats(self) -> dict[str, Any]:
        """Per kind: events, lists, relists, reconnects (for gangscope's own metrics and tests)."""
        out: dict[str, Any] = {}
        for name, (res, refls, _) in self.active.items():
            out[name] = {"api_version": res.api_version, **{k: sum(getattr(r, k) for r in refls)
                                                              for k in ("events", "lists", "relists", "reconnects")}}
        return out


def locked(sink: Sink) -> Sink:
    """Serialize calls from the reflector threads into one sink."""
    lock = threading.Lock()

    def call(ev: Any) -> None:
        with lock:
            sink(ev)

    return call


def run(settings: Settings, publisher: Any, stop: threading.Event, client: Client | None = None,
        patient: bool = False) -> None:
    """Entry point for ``gangscope run``: watch until ``stop`` is set, publishing every event. ``patient``: the
    startup summary named the kinds and any unreachable server, so this collector waits for it quietly."""
    client = client or Client.from_config(settings.k8s.kubeconfig, settings.k8s.context)
    K8sCollector(settings, client, locked(publisher.publish), announce=not patient).run(stop, patient=patient)
