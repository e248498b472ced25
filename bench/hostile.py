"""Benchmark: the bad-input corpus through replay and the live collectors, beside a normal scenario.

A simulated scenario (``gpu_fault``, 8 nodes, one hour) is replayed and its models built once; that lake is
the baseline. Each case then starts from a copy of it, sends one hostile input (a watch file, a metrics file,
an exporter body scraped live over HTTP, or a hostile watch stream served by the fake API server of
collectors/simulate/apiserver.py to the real Kubernetes collector) through the real path (replay, Scraper or
K8sCollector -> embedded Kafka -> pipeline -> lake), rebuilds the models and checks:

* clear error: the command failed with a one-line ``UserError`` (naming file and line where there is one), or
  the bad records landed in ``raw.dead_letters`` with a reason, or a scrape recorded its error;
* crashed: any other exception, a model build failure, or (live watch) a traceback or ERROR logged by the
  collector;
* lost good records: rows of the baseline gone, or the good line placed beside the bad one missing (live watch:
  a good pod listed before the hostile line and one sent after it on the same stream);
* findings unchanged: the baseline jobs' (job, root cause) exactly as before.

    .venv/bin/python bench/hostile.py [--only SUBSTRING]

Ends with ``hostile: cases=<n> clear_error=<n> crashed=0 lost_good_records=0 findings_unchanged=<n>/<n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import logging
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangscope import config  # noqa: E402
from gangscope.errors import UserError  # noqa: E402
from tests.collectors_metrics.lakeread import lake_query as query  # noqa: E402

NOW = datetime.now(UTC)
T0 = "2026-11-01T00:30:00Z"  # inside the scenario's hour
T0_MS = int(datetime(2026, 11, 1, 0, 30, tzinfo=UTC).timestamp() * 1000)
GOOD_POD = "hostile-good-pod"


def pod(name: str = GOOD_POD, **meta: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "hostile", "uid": f"uid-{name}", "resourceVersion": "1",
                         "creationTimestamp": T0, **meta},
            "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


def line(obj: object) -> str:
    return json.dumps(obj) + "\n"


GOOD = line({"type": "ADDED", "object": pod(), "observedAt": T0})
ev = lambda **o: line({"type": "ADDED", "object": pod("bad"), "observedAt": T0, **o})  # noqa: E731
SAMPLE = 'hostile_metric{{job="h",instance="h:1"{labels}}} {value} {ts}\n'
GOOD_SAMPLE = SAMPLE.format(labels="", value=1, ts=T0_MS)


def sample(value: object = 1, ts: object = T0_MS, labels: str = "") -> str:
    return SAMPLE.format(labels=labels, value=value, ts=ts)


def big_labels(n: int = 10_000) -> str:
    return "".join(f',l{i}="v{i}"' for i in range(n))


# (name, kind, content): kind "k8s"/"metrics" are replay files (bytes or str), "scrape" an exporter body,
# "path" a special input path.
K8S: list[tuple[str, str | bytes]] = [
    ("truncated JSON line", GOOD + '{"type": "ADDED", "object": {"kind": "Pod"\n'),
    ("invalid UTF-8", GOOD.encode() + b'{"type": "ADDED", "object": "\xff\xfe"}\n'),
    ("raw NUL byte", GOOD + '{"type": "ADDED",\x00 "object": {}}\n'),
    ("escaped NUL in strings", GOOD + line({"type": "ADDED", "object": pod("nul\u0000name"), "observedAt": T0})),
    ("duplicate keys", GOOD + '{"type": "ADDED", "type": "DELETED", "object": ' + json.dumps(pod("dup")) +
     f', "observedAt": "{T0}"}}\n'),
    ("empty kind", GOOD + line({"type": "ADDED", "object": {**pod("k"), "kind": ""}, "observedAt": T0})),
    ("missing apiVersion", GOOD + line({"type": "ADDED", "object": {k: v for k, v in pod("a").items()
                                                                     if k != "apiVersion"}, "observedAt": T0})),
    ("unknown kind and apiVersion", GOOD + line({"type": "ADDED", "object": {**pod("u"), "apiVersion": "x.io/v9",
                                                                              "kind": "Gizmo"}, "observedAt": T0})),
    ("wrong apiVersion for the kind", GOOD + line({"type": "ADDED", "object": {**pod("w"),
                                                                                "apiVersion": "kueue.x-k8s.io/v1"},
                                                  "observedAt": T0})),
    ("unknown watch type", GOOD + ev(type="UPDATED")),
    ("BOOKMARK line", GOOD + line({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})),
    ("top-level array", GOOD + "[1, 2, 3]\n"),
    ("100k-deep nesting", GOOD + "[" * 100_000 + "\n"),
    ("20 MB line", GOOD + line({"type": "ADDED", "object": pod("huge", annotations={"a": "x" * (20 << 20)}),
                                "observedAt": T0})),
    ("observedAt year 9999", GOOD + ev(observedAt="9999-12-31T23:59:59Z")),
    ("observedAt a number", GOOD + ev(observedAt=1767225600)),
    ("observedAt not a time", GOOD + ev(observedAt="yesterday")),
    ("observedAt 1970", GOOD + ev(observedAt="1970-01-01T00:00:01Z")),
    ("observedAt an hour ahead", GOOD + ev(observedAt=(NOW + timedelta(hours=1)).isoformat())),
    ("creationTimestamp 9999, no observedAt", GOOD + line({"type": "ADDED", "object": pod(
        "c", creationTimestamp="9999-12-31T23:59:59Z")})),
    ("condition time year 1", GOOD + line({"type": "ADDED", "object": {**pod("y1"), "status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                            "lastTransitionTime": "0001-01-01T00:00:00Z"}]}}, "observedAt": T0})),
    ("Event lastTimestamp 9999", GOOD + line({"type": "ADDED", "object": {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "hostile", "uid": "e"},
        "reason": "FailedScheduling", "message": "x", "lastTimestamp": "9999-01-01T00:00:00Z"}})),
    ("out-of-order watch events", line({"type": "MODIFIED", "object": {**pod(), "status": {"phase": "Succeeded"}},
                                        "observedAt": "2026-11-01T00:31:00Z"}) + GOOD),
    ("duplicate watch events", GOOD + GOOD + GOOD),
    ("DELETED of an unknown object", GOOD + line({"type": "DELETED", "object": pod("ghost"), "observedAt": T0})),
    ("object without metadata", GOOD + line({"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Pod"}})),
    ("100k-character name", GOOD + line({"type": "ADDED", "object": pod("n" * 100_000), "observedAt": T0})),
    ("10k labels on a pod", GOOD + line({"type": "ADDED", "object": pod("l", labels={f"l{i}": "v" for i in
                                                                                       range(10_000)}),
                                         "observedAt": T0})),
    ("terminal escapes in an Event", GOOD + line({"type": "ADDED", "object": {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "esc", "namespace": "hostile", "uid": "esc"},
        "involvedObject": {"kind": "Pod", "name": GOOD_POD, "namespace": "hostile"}, "reason": "Pulled",
        "message": "\x1b[2J\x1b]0;owned\x07", "lastTimestamp": T0}})),
    ("empty file", ""),
    ("blank lines only", "\n\n   \n"),
    ("CRLF line endings", GOOD.replace("\n", "\r\n")),
    ("UTF-8 BOM", "\ufeff" + GOOD),
    ("gzip file given as text", gzip.compress(GOOD.encode())),
    ("truncated gzip", gzip.compress(GOOD.encode() * 50)[:40]),
]
METRICS: list[tuple[str, str | bytes]] = [
    ("sample without timestamp", GOOD_SAMPLE + 'hostile_metric{job="h",instance="h:1",x="1"} 1\n'),
    ("timestamp in seconds", GOOD_SAMPLE + sample(ts=T0_MS // 1000, labels=',x="s"')),
    ("timestamp year 9999", GOOD_SAMPLE + sample(ts=253402300799000, labels=',x="f"')),
    ("negative timestamp", GOOD_SAMPLE + sample(ts=-5, labels=',x="n"')),
    ("timestamp in nanoseconds", GOOD_SAMPLE + sample(ts=T0_MS * 1_000_000, labels=',x="ns"')),
    ("NaN-only series", GOOD_SAMPLE + "".join(sample("NaN", T0_MS + i * 15000, ',x="nan"') for i in range(20))),
    ("+Inf and -Inf values", GOOD_SAMPLE + sample("+Inf", labels=',x="p"') + sample("-Inf", labels=',x="m"')),
    ("10k labels on one sample", GOOD_SAMPLE + sample(labels=big_labels())),
    ("bad label escape", GOOD_SAMPLE + 'hostile_metric{job="h",instance="h:1",x="\\q"} 1 ' + f"{T0_MS}\n"),
    ("invalid UTF-8", GOOD_SAMPLE.encode() + b'hostile_metric{job="h",instance="h:1",x="\xff"} 1 1\n'),
    ("NUL bytes", GOOD_SAMPLE + "hostile\x00metric 1 " + f"{T0_MS}\n"),
    ("duplicate sample", GOOD_SAMPLE * 3),
    ("invalid metric name", GOOD_SAMPLE + f'0bad-name{{job="h",instance="h:1"}} 1 {T0_MS}\n'),
    ("value 1e308", GOOD_SAMPLE + sample(1e308, labels=',x="big"')),
    ("missing job and instance", GOOD_SAMPLE + f"hostile_metric 1 {T0_MS}\n"),
    ("HELP and TYPE only", "# HELP hostile_metric x\n# TYPE hostile_metric gauge\n" + GOOD_SAMPLE),
    ("DCGM sentinel values", GOOD_SAMPLE + sample(9223372036854775794, labels=',x="dcgm"')
     + sample(140737488355328.0, labels=',x="fp"')),
    ("garbage line", GOOD_SAMPLE + "this is not exposition text\n"),
    ("empty file", ""),
    ("truncated gzip", gzip.compress(GOOD_SAMPLE.encode() * 50)[:40]),
]
NOW_MS = int(NOW.timestamp() * 1000)
SCRAPE: list[tuple[str, str | bytes, str | None, int]] = [  # (name, body, content-encoding, status)
    # Cut inside the deflate stream (b"m 1\n" * 1000 compresses to 46 bytes: cut at 50 it was whole, and accepted).
    ("truncated gzip body", (lambda z: z[:len(z) // 2])(gzip.compress(
        "".join(f'm{{i="{i}"}} {i * 7919 % 10007}\n' for i in range(1000)).encode())), "gzip", 200),
    ("invalid UTF-8 body", b"good_metric 1\nbad_metric{x=\"\xff\xfe\"} 2\n", None, 200),
    ("NUL bytes in body", b"good_metric 1\nbad\x00metric 2\n", None, 200),
    ("10k labels on one sample", f"good_metric 1\nwide{{{big_labels()[1:]}}} 2\n", None, 200),
    ("exporter timestamp in the future", f"good_metric 1\nfuture_metric 2 {NOW_MS + 3_600_000}\n", None, 200),
    ("exporter timestamp in seconds", f"good_metric 1\nsec_metric 2 {NOW_MS // 1000}\n", None, 200),
    ("HTTP 500", "oops", None, 500),
    ("1 MB garbage line", "good_metric 1\n" + "x" * (1 << 20) + "\n", None, 200),
    ("NaN-only body", "nan_metric NaN\nnan_metric{x=\"1\"} NaN\n", None, 200),
]
GOOD_AFTER = "hostile-good-after"  # sent on the watch stream after the hostile line: must land too
PODS = ("", "v1", "pods")
EVENTS = ("", "v1", "events")


def event_obj(name: str, message: str, when: str) -> dict:
    return {"metadata": {"name": name, "namespace": "hostile"}, "reason": "Pulled", "message": message,
            "involvedObject": {"kind": "Pod", "name": GOOD_POD, "namespace": "hostile"}, "lastTimestamp": when}


def deep(n: int = 100_000) -> bytes:
    return b'{"type": "ADDED", "object": {"metadata": {"name": "deep"}, "spec": ' + b'{"a": ' * n + b"1" + b"}" * n \
        + b"}}"


# (name, action on the API server): hostile watch streams for the live Kubernetes collector.
WATCH: list[tuple[str, object]] = [
    ("creationTimestamp year 9999", lambda api: api.put(*PODS, pod("bad", creationTimestamp="9999-12-31T23:59:59Z"))),
    ("condition time year 1", lambda api: api.put(*PODS, {**pod("y1"), "status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                            "lastTransitionTime": "0001-01-01T00:00:00Z"}]}})),
    ("Event lastTimestamp an hour ahead",
     lambda api: api.put(*EVENTS, event_obj("ahead", "x", "2026-11-01T01:30:00Z"))),
    ("timestamp as epoch seconds", lambda api: api.put(*PODS, pod("num", creationTimestamp=1793500000))),
    ("100k-deep JSON line", lambda api: api.inject(*PODS, b"[" * 100_000)),
    ("100k-deep object", lambda api: api.inject(*PODS, deep())),
    ("terminal escapes in an Event", lambda api: api.put(*EVENTS, event_obj("esc", "\x1b[2J\x1b]0;owned\x07", T0))),
    ("terminal escapes in a pod", lambda api: api.put(*PODS, {**pod("esc"), "status": {
        "phase": "Running", "message": "\x1b[31mred\x1b[0m\r\x1b[2K"}})),
    ("20 MB object", lambda api: api.put(*PODS, pod("huge", annotations={"a": "x" * (20 << 20)}))),
    ("10k labels on a pod", lambda api: api.put(*PODS, pod("l", labels={f"l{i}": "v" for i in range(10_000)}))),
    ("garbage chunk line", lambda api: api.inject(*PODS, b"this is not JSON at all")),
    ("truncated JSON line mid-stream", lambda api: api.inject(*PODS, b'{"type": "ADDED", "object": {"kind": "Pod"')),
    ("invalid UTF-8 line",
     lambda api: api.inject(*PODS, b'{"type": "ADDED", "object": {"metadata": {"name": "\xff"}}}')),
    ("NUL byte line", lambda api: api.inject(*PODS, b'{"type": "ADDED",\x00 "object": {}}')),
    ("object not a JSON object", lambda api: api.inject(*PODS, b'{"type": "ADDED", "object": "x"}')),
    ("top-level array line", lambda api: api.inject(*PODS, b"[1, 2, 3]")),
    ("unknown watch event type", lambda api: api.inject(*PODS, json.dumps({"type": "UPDATED",
                                                                            "object": pod("u")}).encode())),
]


@dataclass
class Outcome:
    clear: bool = False
    crashed: str | None = None
    lost: int = 0
    findings_same: bool = True
    note: str = ""
    built: bool = False


def baseline(root: Path, bootstrap: str) -> tuple[Path, dict, dict]:
    from collectors.simulate import generate
    from gangscope.app.replay import replay
    from pipeline import models

    sim = generate("gpu_fault", root / "sim", nodes=8, interval=60.0)
    s = settings_for(root / "base", bootstrap, "base.")
    replay(s, [str(sim.directory / "k8s.jsonl")], [str(sim.directory / "metrics.prom")], progress=None)
    models.build(s)
    return s.data, counts(s), findings(s)


def settings_for(data: Path, bootstrap: str, prefix: str) -> config.Settings:
    return config.load(overrides={"data": str(data), "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": prefix,
                                                                "partitions": 1},
                                  "pipeline": {"group_id": f"{prefix}g", "flush_seconds": 0.3, "idle_seconds": 1.0}},
                       environ={})


def counts(s: config.Settings) -> dict:
    return dict(query(s, "SELECT 'k8s', count(*) FROM raw.k8s_objects UNION ALL SELECT 'points', count(*) FROM "
                         "raw.metric_points UNION ALL SELECT 'dead', count(*) FROM raw.dead_letters UNION ALL "
                         "SELECT 'good_pod', count(DISTINCT name) FROM raw.k8s_objects "
                         "WHERE name IN ('hostile-good-pod', 'hostile-good-after') UNION ALL "
                         "SELECT 'good_samples', count(*) FROM raw.metric_samples WHERE metric IN ('hostile_metric', "
                         "'good_metric')"))


def findings(s: config.Settings) -> dict:
    return {(ns, job): cause for ns, job, cause in query(s, "SELECT namespace, job, root_cause FROM marts.jobs")}


def copy_lake(base: Path, dest: Path) -> None:
    """The baseline lake under another path: files copied, the catalog's DATA_PATH pointed at the copy."""
    shutil.copytree(base, dest)
    db = sqlite3.connect(dest / "catalog.sqlite")
    try:
        db.execute("UPDATE ducklake_metadata SET value = ? WHERE key = 'data_path'", [str(dest / "lake") + "/"])
        db.commit()
    finally:
        db.close()


def run_case(kind: str, content: object, s: config.Settings, work: Path, bootstrap: str) -> Outcome:
    from gangscope.app.replay import replay
    from pipeline import consume, models

    out = Outcome()
    before = counts(s)
    expect_good = 0
    try:
        if kind in ("k8s", "metrics"):
            f = work / ("in.jsonl" if kind == "k8s" else "in.prom")
            f.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
            expect_good = 1 if (GOOD in str(content) or GOOD_SAMPLE in str(content)) else 0
            try:
                replay(s, [str(f)] if kind == "k8s" else [], [str(f)] if kind == "metrics" else [], progress=None)
            except UserError as e:
                out.clear, out.note = True, str(e).replace(str(work) + "/", "")
                out.lost = sum(before[k] - v for k, v in counts(s).items() if k in ("k8s", "points"))
                return out  # refused before publishing anything (the user fixes the file): the lake is untouched
        elif kind == "watch":
            out.clear, out.note, out.crashed = watch_once(s, content, bootstrap)
            consume.run(s, bootstrap, once=True)
            expect_good = 2  # the pod listed before the hostile line and the one sent after it
        else:
            name, body, encoding, status = content  # type: ignore[misc]
            out.clear, out.note = scrape_once(s, body, encoding, status, bootstrap)
            consume.run(s, bootstrap, once=True)
            raw = body if isinstance(body, bytes) else body.encode()
            expect_good = 1 if b"good_metric" in raw and status == 200 and encoding is None else 0
        models.build(s)
        out.built = True
    except Exception as e:  # noqa: BLE001 - what this bench counts
        out.crashed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        traceback.print_exc()
        return out
    after = counts(s)
    if after["dead"] > before["dead"]:
        out.clear = True
        out.note = out.note or query(s, "SELECT reason FROM raw.dead_letters ORDER BY landed_at DESC LIMIT 1")[0][0] \
            .replace(str(work) + "/", "")
    out.lost = max(0, before["k8s"] - after["k8s"]) + max(0, before["points"] - after["points"])
    good_now = after["good_pod"] + after["good_samples"] - before["good_pod"] - before["good_samples"]
    if good_now < expect_good:
        out.lost += expect_good - max(0, good_now)
    return out


class _Errors(logging.Handler):
    """ERROR records and tracebacks the collector logs (a bug, for this bench), and its warnings (notes)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        (self.errors if record.levelno >= logging.ERROR or record.exc_info else self.warnings).append(
            record.getMessage()[:200])


def watch_once(s: config.Settings, action: object, bootstrap: str) -> tuple[bool, str, str | None]:
    """A good pod, the live collector watching, the hostile ``action`` on the API server, then a good pod on the
    same stream; returns (clear: a warning said why, note, crash)."""
    import threading

    from collectors.k8s.client import Client
    from collectors.k8s.collector import K8sCollector, locked
    from collectors.simulate.apiserver import ApiServer
    from gangscope import clock
    from gangscope.transport.publish import Publisher

    api = ApiServer().start()
    api.serve(*PODS, "Pod")
    api.serve(*EVENTS, "Event")
    api.put(*PODS, pod())
    seen = threading.Event()
    publisher = Publisher(s, bootstrap)

    def sink(ev) -> None:
        if ev.object is not None and (ev.object.get("metadata") or {}).get("name") == GOOD_AFTER:
            seen.set()
        publisher.publish(ev)

    errors = _Errors()
    watched = logging.getLogger("collectors.k8s")
    watched.addHandler(errors)
    watched.setLevel(logging.WARNING)  # (the bench logs at ERROR)
    watched.propagate = False
    clock.configure(T0, time.time())  # observed inside the scenario's hour, as the replay cases' observedAt
    # Watch the hostile namespace only: a list of every namespace from an API server that holds none of the
    # baseline's objects would rightly make them gone (staging.stg_k8s_gone) and change every finding.
    s.k8s.namespaces = ["hostile"]
    stop = threading.Event()
    coll = K8sCollector(s, Client(api.url), locked(sink), watch_timeout_s=30.0, backoff_base_s=0.1)
    t = threading.Thread(target=coll.run, args=(stop,), daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
                api.count_requests(watch=True, path="/api/v1/namespaces/hostile/pods")
                and api.count_requests(watch=True, path="/api/v1/namespaces/hostile/events")):
            time.sleep(0.05)
        action(api)  # type: ignore[operator]
        api.put(*PODS, pod(GOOD_AFTER))
        seen.wait(30)
    finally:
        stop.set()
        t.join(30)
        api.stop()
        clock.configure(None)
        watched.removeHandler(errors)
        watched.propagate = True
        publisher.flush(60)
        publisher.close()
    crashed = f"collector logged: {errors.errors[0]}" if errors.errors else None
    if t.is_alive():
        crashed = "collector did not stop"
    return bool(errors.warnings), (errors.warnings or [""])[0], crashed


def scrape_once(s: config.Settings, body: str | bytes, encoding: str | None, status: int,
                bootstrap: str) -> tuple[bool, str]:
    from collectors.metrics.scrape import Scraper
    from collectors.metrics.targets import Target
    from gangscope.transport.publish import Publisher
    from tests.collectors_metrics.httpserve import Route, serve

    publisher = Publisher(s, bootstrap)
    route = Route(body, status=status)
    with serve({"/metrics": route}) as (base, _):
        if encoding:  # serve() has no header option: a raw server for this one
            return _scrape_gzip(s, body, publisher)
        target = Target(url=f"{base}/metrics", job="hostile", interval_s=15.0, timeout_s=5.0)

        async def once():
            async with Scraper(s.cluster, publisher.publish) as sc:
                return await sc.scrape_round([target])

        (batch,) = asyncio.run(once())
    publisher.flush(30)
    publisher.close()
    return (not batch.up or bool(batch.error)), batch.error or ""


def _scrape_gzip(s: config.Settings, body: bytes, publisher) -> tuple[bool, str]:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from collectors.metrics.scrape import Scraper
    from collectors.metrics.targets import Target

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        target = Target(url=f"http://127.0.0.1:{httpd.server_address[1]}/metrics", job="hostile", interval_s=15.0,
                        timeout_s=5.0)

        async def once():
            async with Scraper(s.cluster, publisher.publish) as sc:
                return await sc.scrape_round([target])

        (batch,) = asyncio.run(once())
    finally:
        httpd.shutdown()
        httpd.server_close()
    publisher.flush(30)
    publisher.close()
    return (not batch.up or bool(batch.error)), batch.error or ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="run only the cases whose name contains this")
    args = p.parse_args(argv)
    from gangscope import logs
    from gangscope.transport.broker import EmbeddedBroker

    logs.setup("ERROR")
    cases: list[tuple[str, str, object]] = [(n, "k8s", c) for n, c in K8S] + [(n, "metrics", c) for n, c in METRICS]
    cases += [(n, "scrape", (n, b, e, st)) for n, b, e, st in SCRAPE]
    cases += [(f"live watch: {n}", "watch", a) for n, a in WATCH]
    cases += [("a directory as --k8s", "path", None), ("a missing file as --metrics", "path", None)]
    if args.only:
        cases = [c for c in cases if args.only in c[0]]
    broker = EmbeddedBroker().start()
    root = Path(tempfile.mkdtemp(prefix="gangscope-hostile-"))
    t0 = time.monotonic()
    try:
        base, base_counts, base_findings = baseline(root, broker.bootstrap)
        print(f"baseline: {base_counts['k8s']} watch events, {base_counts['points']} samples, "
              f"{len(base_findings)} jobs ({time.monotonic() - t0:.0f}s)", file=sys.stderr)
        results: list[tuple[str, str, Outcome]] = []
        for i, (name, kind, content) in enumerate(cases):
            work = root / f"case{i}"
            copy_lake(base, work / "data")
            s = settings_for(work / "data", broker.bootstrap, f"c{i}.")
            if kind == "path":
                from gangscope.app.replay import replay

                out = Outcome()
                try:
                    replay(s, [str(work)] if "directory" in name else [],
                           [str(work / "missing.prom")] if "missing" in name else [], progress=None)
                except UserError as e:
                    out.clear, out.note = True, str(e).replace(str(work), "<case>")
            else:
                out = run_case(kind, content, s, work, broker.bootstrap)
                if out.built:
                    out.findings_same = {k: v for k, v in findings(s).items() if k in base_findings} == base_findings
            results.append((name, kind, out))
            state = "CRASH " + out.crashed if out.crashed else ("clear" if out.clear else "accepted")
            print(f"{kind:8} {name:40} {state:9} lost={out.lost} findings_same={out.findings_same} "
                  f"{out.note[:110]!r}", file=sys.stderr)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    n = len(results)
    clear = sum(o.clear for _, _, o in results)
    crashed = sum(o.crashed is not None for _, _, o in results)
    lost = sum(o.lost for _, _, o in results)
    same = sum(o.findings_same for _, _, o in results)
    print(f"hostile: cases={n} clear_error={clear} crashed={crashed} lost_good_records={lost} "
          f"findings_unchanged={same}/{n}")
    return 0 if crashed == 0 and lost == 0 and same == n else 1


if __name__ == "__main__":
    sys.exit(main())
