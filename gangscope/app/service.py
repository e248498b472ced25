"""``gangscope run``: the long-running service (collectors, pipeline, scheduled jobs, telemetry).

Shutdown order on SIGTERM/SIGINT is what makes "nothing lost" true: stop the collectors,
flush the publisher until Kafka acknowledged everything, let the pipeline land up to those
offsets, then stop the scheduler (waiting for a running job) and the telemetry server.
Parts whose modules have not landed are skipped with one log line.
"""

from __future__ import annotations

import importlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gangscope.config import COLLECTORS, ConfigError, Settings
from gangscope.errors import UserError

log = logging.getLogger(__name__)


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:  # only the module itself missing; a broken import inside it still raises
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            return None
        raise


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM/SIGINT set ``stop`` (main thread only); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def handler(signum: int, frame: Any) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


def _thread(name: str, target: Callable[[], Any], failed: threading.Event) -> threading.Thread:
    def run() -> None:
        try:
            target()
        except Exception as e:
            log.error("%s stopped with an error: %s: %s", name, type(e).__name__, e)
            log.debug("%s traceback", name, exc_info=True)
            failed.set()

    t = threading.Thread(target=run, name=f"gangscope-{name}", daemon=True)
    t.start()
    return t


def _collector_target(name: str, settings: Settings, publisher: Any, stop: threading.Event,
                      patient: bool = False, known_failing: set[str] | None = None) -> Callable[[], Any]:
    if name == "k8s":
        mod = _optional("collectors.k8s.collector")
        if mod is None:
            raise UserError("collector k8s is not available in this build")
        return lambda: mod.run(settings, publisher, stop, patient=patient)
    if name == "remote_write":  # served by the HTTP server's POST route; nothing to run
        return lambda: None
    mod = _optional("collectors.metrics.scrape")
    if mod is None:
        raise UserError("collector metrics is not available in this build")
    return lambda: mod.serve(settings, publisher.publish, stop, failing=known_failing)


SCHEDULER_GRACE_S = 30.0
LAND_GRACE_S = 120.0


def _landed(settings: Settings, offsets: dict[tuple[str, int], int]) -> bool:
    """Whether the lake stores every (topic, partition) at or past ``offsets``."""
    from pipeline import lake
    from pipeline.land import stored_offsets

    con = lake.connect(settings, read_only=True, create=False)
    try:
        stored = lake.retry(lambda: stored_offsets(con))
    finally:
        con.close()
    return all(stored.get(tp, 0) >= off for tp, off in offsets.items())


def _wait_landed(settings: Settings, offsets: dict[tuple[str, int], int], pipeline: threading.Thread,
                 grace_s: float) -> None:
    """Keep the running pipeline going until it landed what the collectors published (one consumer, no rebalance)."""
    import time

    deadline = time.monotonic() + grace_s
    while pipeline.is_alive() and time.monotonic() < deadline:
        if _landed(settings, offsets):
            return
        time.sleep(0.5)
    if pipeline.is_alive():
        log.error("the pipeline did not land the last collected records within %.0f s", grace_s)


def _shutdown_scheduler(scheduler: Any, grace_s: float) -> bool:
    """Wait up to ``grace_s`` for a running job (False if one still runs); a model build cut short rolls back
    its lake transaction."""
    done = threading.Thread(target=lambda: scheduler.shutdown(wait=True), name="gangscope-scheduler-stop",
                            daemon=True)
    done.start()
    done.join(grace_s)
    if done.is_alive():
        log.warning("a scheduled job is still running after %.0f s; exiting without it", grace_s)
        return False
    return True


def run_service(settings: Settings, stop: threading.Event | None = None) -> int:
    """Run until ``stop`` is set (or a signal arrives); returns the exit code."""
    from gangscope import clock
    from gangscope.app import schedule, startup
    from gangscope.transport.broker import bootstrap_servers

    clock.configure(settings.clock.sim_origin, settings.clock.wall_origin, settings.clock.speed)
    start = startup.resolve(settings)  # collectors unset: k8s and metrics when a cluster's credentials are there
    settings = start.settings
    assert settings.collectors is not None

    unknown = [c for c in settings.collectors if c not in COLLECTORS]
    if unknown:
        raise ConfigError(f"collectors: unknown collector {unknown[0]!r} (known: {', '.join(COLLECTORS)})")
    schedule.make_scheduler(schedule.default_jobs(settings))  # validates the specs before anything starts
    from pipeline import lake

    lake.connect(settings).close()  # schemas and raw tables exist before any component reads them
    stop = stop or threading.Event()
    failed = threading.Event()
    telemetry = _optional("gangscope.telemetry")
    consume = _optional("pipeline.consume")
    if "remote_write" in settings.collectors and not (telemetry and settings.server.listen):
        raise ConfigError("collectors: remote_write is served on server.listen, which is not set")
    with stop_on_signals(stop), bootstrap_servers(settings) as bootstrap:
        startup.probe(start)
        log.info("%s", startup.summary(start, bootstrap, embedded=not settings.kafka.bootstrap_servers))
        for problem in start.problems:  # each said once, with its fix
            log.warning("%s", problem)
        stop_server = None
        from gangscope.app.findings_topic import FindingsTopic
        from reports.lifecycle import FindingsOutlet

        findings_topic = FindingsTopic(settings, bootstrap)
        outlet = FindingsOutlet(settings, findings_topic if settings.findings.topic else None)
        page = None
        if telemetry is not None and settings.server.listen and settings.server.page:
            from gangscope.app.page import LivePage, build_interval

            page = LivePage(settings, build_interval(settings))
        builds = schedule.ModelBuilds(settings, outlet, after=page.built if page is not None else None)
        scheduler = schedule.make_scheduler(schedule.default_jobs(settings, outlet, builds))
        publisher = receiver = None
        collectors_stop, pipeline_stop = threading.Event(), threading.Event()
        collector_threads: list[threading.Thread] = []
        pipeline_thread = None
        try:
            if settings.collectors:
                from gangscope.transport.publish import Publisher

                publisher = Publisher(settings, bootstrap)
            routes = {}  # path -> (handler, largest body it takes)
            if "remote_write" in settings.collectors:
                from collectors.prom.remote_write import Receiver, default_workers, route

                rw = settings.remote_write
                receiver = Receiver(publisher, settings.cluster, ack_timeout_s=rw.ack_timeout_s,
                                    max_buffered=rw.max_buffered_records, skew_s=settings.clock_skew_s,
                                    workers=default_workers() if rw.workers is None else rw.workers)
                path, handler = route(receiver)
                routes[path] = (handler, rw.max_body_bytes)
            if telemetry is not None and settings.server.listen:
                try:
                    server = telemetry.start_http_server(settings.server.listen)
                except (OSError, ValueError) as e:
                    raise UserError(f"cannot serve telemetry on {settings.server.listen}: {e}") from None
                stop_server = server
                for path, (handler, max_body) in routes.items():
                    server.add_route("POST", path, handler, max_body_bytes=max_body)
                # Port 0 (any free port): the summary could not name it, so this line does.
                log.log(logging.INFO if settings.server.listen.endswith(":0") else logging.DEBUG,
                        "telemetry on %s (/metrics, /healthz%s)", server.url, "".join(f", POST {p}" for p in routes))
                if page is not None:
                    page.start().mount(server)
                    auth = " (asks for server.token / server.basic_auth)" if (
                        settings.server.token or settings.server.basic_auth) else ""
                    log.info("live page: %s/%s", server.url, auth)
            if publisher is not None:
                for name in settings.collectors:
                    # The summary said an unreachable server once: the discovery's first failure is not said again.
                    failing = set() if start.reachable or not start.source else {
                        str(d.get("job")) for d in settings.metrics.discovery}
                    target = _collector_target(name, settings, publisher, collectors_stop, patient=start.defaulted,
                                               known_failing=failing)
                    collector_threads.append(_thread(f"collector-{name}", target, failed))
                    log.debug("collector %s started", name)
            if consume is not None:
                pipeline_thread = _thread("pipeline", lambda: consume.run(settings, bootstrap, stop=pipeline_stop),
                                          failed)
                log.debug("pipeline started (Kafka %s)", bootstrap)
            else:
                log.warning("pipeline not available in this build: records are not landed")
            scheduler.start()
            log.info("scheduler started: %s", ", ".join(j.id for j in scheduler.get_jobs()) or "no jobs")
            while not stop.wait(0.5):
                if failed.is_set():
                    log.error("a component failed; shutting down")
                    break
        finally:
            if scheduler.running:
                scheduler.pause()  # no new job starts while the last records land
            collectors_stop.set()
            if receiver is not None:
                receiver.close()  # new remote writes get 503 (Prometheus retries them after the restart)
            for t in collector_threads:
                t.join(timeout=30)
            offsets: dict[tuple[str, int], int] = {}
            if publisher is not None:
                if not publisher.flush(timeout_s=60.0):
                    log.error("Kafka did not acknowledge every collected record within 60 s")
                offsets = publisher.acked_offsets()
                publisher.close(timeout_s=10.0)
            if pipeline_thread is not None and offsets:
                _wait_landed(settings, offsets, pipeline_thread, LAND_GRACE_S)
            pipeline_stop.set()
            if pipeline_thread is not None:
                pipeline_thread.join(timeout=120)
                if offsets and not _landed(settings, offsets):
                    # The running pipeline could not finish the job (it failed): one more consumer drains.
                    consume.run(settings, bootstrap, until=offsets)
            if not scheduler.running or _shutdown_scheduler(scheduler, SCHEDULER_GRACE_S):
                builds.close()
            elif builds.con is not None:
                # Not closed under a build still running past the grace, and set aside: a thread in DuckDB when the
                # interpreter exits aborts the process, so gangscope then exits without destructors.
                from pipeline import lake

                lake.abandon(builds.con)
            findings_topic.close()
            if page is not None:
                page.close()
            if stop_server is not None:
                stop_server()
            log.info("stopped")
    return 1 if failed.is_set() else 0


def _handler(settings: Settings, args: Any) -> int:
    return run_service(settings)


def register(groups: dict[str, Any], common: Any) -> None:
    p = groups["root"].add_parser(
        "run", parents=[common], help="long-running service: collectors, pipeline, scheduled jobs",
        description="Run the collectors named in `collectors` (k8s, metrics, remote_write; unset: k8s and metrics when "
        "a kubeconfig context or the in-cluster service account is there, scraping the exporters discovered in the "
        "cluster), the pipeline (Kafka -> lake), the "
        "scheduled jobs of `schedule` (model builds, hourly/daily reports into <data>/reports with retention and an "
        "optional webhook, compaction, retention) and the telemetry endpoint (`server.listen`: /metrics, /healthz). "
        "Stops cleanly on SIGTERM/SIGINT: collectors first, then the pipeline lands what was published, then the "
        "scheduler. Starts with one summary: the cluster and context, the kinds watched, the exporters found, the lake "
        "and Kafka. Schedule specs: interval:SECONDS, cron:MIN HOUR DOM MON DOW (UTC), or off. The live page is served "
        "on server.listen too: / (open findings with their next step, resolved ones, the fleet) and "
        "/jobs/NAMESPACE/JOB (the job's layered check), read-only, behind server.token / server.basic_auth when set "
        "(docs/page.md).")
    p.set_defaults(handler=_handler)
