"""A Kubernetes API server in memory: the real HTTP protocol for the sandbox and the tests.

It serves what a collector and ``kubectl`` read: ``/version``, discovery (``/api``, ``/api/v1``,
``/apis``, ``/apis/<group>/<version>``), paginated lists (``limit``/``continue``), single-object
GETs, ``labelSelector`` (``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!key``) and
``fieldSelector`` (``=``, ``==``, ``!=`` on any dotted path, e.g. ``spec.nodeName``,
``metadata.namespace``, ``status.phase``), and watches: chunked JSON lines from a
``resourceVersion``, BOOKMARK events, ``410 Gone`` for a compacted resourceVersion (as an HTTP 410
or as an ``ERROR`` event, see ``gone_as``), and streams dropped mid-line on demand
(``drop_watch_after``), and hostile lines sent verbatim (``inject``). ``mount(prefix, handler)``
serves other GET paths from the same port (the sandbox's exporters), ``pod_proxy`` the pods' proxy
subresource (``/api/v1/namespaces/NS/pods/[https:]NAME:PORT/proxy/PATH``, how Prometheus and gangscope reach
an exporter from outside the cluster).

``kubectl`` gets what a real server sends it: server-side tables (``Accept: ...;as=Table;g=meta.k8s.io;v=v1``,
:mod:`collectors.simulate.tables`) with ages on the server's clock (``now``, also the ``Date`` header), and
``SelfSubjectReview`` / ``SelfSubjectAccessReview`` (``kubectl auth whoami`` / ``auth can-i``). With ``tokens``
set, requests need one of the bearer tokens and are authorized against its RBAC rules (401 / 403 with the
real messages); without, everyone may do anything.

Usage::

    api = ApiServer().start()
    api.serve("", "v1", "pods", "Pod")
    api.put("", "v1", "pods", {"metadata": {"name": "p", "namespace": "ns"}, ...})
    api.url  # http://127.0.0.1:PORT
    api.stop()

resourceVersions are one global counter, like etcd's. ``compact()`` forgets history so older
resourceVersions get 410.
"""

from __future__ import annotations

import bisect
import copy
import email.utils
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from collectors.simulate import tables

GVR = tuple[str, str, str]  # group ("" for core), version, plural
# A mounted GET handler: path and query -> (HTTP code, content type, body), or None for 404.
Mount = Callable[[str, dict[str, list[str]]], "tuple[int, str, bytes] | None"]
RAW = "RAW"  # a history entry that is a line sent verbatim ({"line": bytes}), not an event
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# A pod proxy request: (namespace, pod, scheme, port, path, query) -> (HTTP code, content type, body), None: 404.
PodProxy = Callable[[str, str, str, int, str, dict[str, list[str]]], "tuple[int, str, bytes] | None"]
_PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/(?:(https?):)?([^/:]+):(\d+)/proxy(/.*)?$")
# Review APIs every server serves (discovery lists them; POST only).
REVIEWS = {("authorization.k8s.io", "v1"): ("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
           ("authentication.k8s.io", "v1"): ("selfsubjectreviews", "SelfSubjectReview")}


@dataclass(frozen=True)
class Identity:
    """Who a bearer token is, and its RBAC rules (PolicyRule shape: apiGroups, resources, verbs; ``*`` matches
    all; a resource may name a subresource as ``pods/proxy``)."""

    username: str
    groups: tuple[str, ...] = ("system:authenticated",)
    rules: tuple[dict[str, Any], ...] = ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},)
    uid: str = ""

    def allows(self, verb: str, group: str, resource: str) -> bool:
        for r in self.rules:
            groups, resources, verbs = r.get("apiGroups") or [], r.get("resources") or [], r.get("verbs") or []
            if ("*" in groups or group in groups) and ("*" in resources or resource in resources) \
                    and ("*" in verbs or verb in verbs):
                return True
        return False


ANONYMOUS = Identity("system:anonymous", ("system:unauthenticated",))


@dataclass
class _Resource:
    kind: str
    namespaced: bool
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (ns, name) -> obj
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # (rv, type, obj), rv rising


def _api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _terms(selector: str) -> list[str]:
    """Split on commas outside parentheses (``env in (a,b),tier!=x``)."""
    out, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [t.strip() for t in [*out, cur] if t.strip()]


def label_matches(obj: dict[str, Any], selector: str | None) -> bool:
    """Whether ``obj``'s labels satisfy a Kubernetes label selector string."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in _terms(selector):
        m = _SET_TERM.match(term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if (op == "in") != (labels.get(key) in values):
                return False
        elif "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _path_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def field_matches(obj: dict[str, Any], selector: str | None) -> bool:
    """Whether ``obj`` satisfies a field selector (``a.b=c``, ``a.b==c``, ``a.b!=c``; a missing field is "")."""
    if not selector:
        return True
    for term in _terms(selector):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if _path_value(obj, k.strip()) == v.strip():
                return False
        else:
            k, _, v = term.replace("==", "=").partition("=")
            if _path_value(obj, k.strip()) != v.strip():
                return False
    return True


class ApiServer:
    """Thread-safe in-memory API server on a loopback port."""

    def __init__(self, bookmark_interval_s: float = 0.2) -> None:
        self.resources: dict[GVR, _Resource] = {}
        self.rv = 100
        self.min_rv = 0  # watches/continues from below this get 410
        self.cond = threading.Condition()
        self.bookmark_interval_s = bookmark_interval_s
        self.gone_as = "http"  # or "event": 200 then an ERROR event with a Status code 410
        self.drop_watch_after: int | None = None  # cut the next watch stream after this many events
        self.break_gen = 0
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.served_lists = 0
        self.authorizations: list[str | None] = []  # the Authorization header of each request
        self.mounts: dict[str, Mount] = {}
        self.pod_proxy: PodProxy | None = None
        self.tokens: dict[str, Identity] | None = None  # None: no authentication, everything allowed
        self.now: Callable[[], float] = time.time  # the server's clock (ages in tables, the Date header)
        self._server: ThreadingHTTPServer | None = None
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> ApiServer:
        api = self

        class Handler(_Handler):
            server_api = api

        self._server = _Server((host, port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="k8s-api", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._closing = True
        with self.cond:
            self.cond.notify_all()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def mount(self, prefix: str, handler: Mount) -> None:
        """Serve GETs under ``prefix`` (e.g. ``/exporters/``) with ``handler``."""
        self.mounts[prefix] = handler

    # -- state -------------------------------------------------------------------------
    def serve(self, group: str, version: str, plural: str, kind: str, namespaced: bool = True) -> None:
        """Start serving a resource (a CRD being installed)."""
        with self.cond:
            self.resources.setdefault((group, version, plural), _Resource(kind, namespaced))

    def unserve(self, group: str, version: str, plural: str) -> None:
        with self.cond:
            self.resources.pop((group, version, plural), None)

    def put(self, group: str, version: str, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or update; returns the stored copy (with uid and resourceVersion set)."""
        with self.cond:
            res = self.resources[(group, version, plural)]
            obj = copy.deepcopy(obj)
            obj["apiVersion"], obj["kind"] = _api_version(group, version), res.kind
            meta = obj.setdefault("metadata", {})
            if not res.namespaced:
                meta.pop("namespace", None)
            key = (meta.get("namespace", ""), meta["name"])
            old = res.objects.get(key)
            meta["uid"] = old["metadata"]["uid"] if old else meta.get("uid") or str(uuid.uuid4())
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            res.objects[key] = obj
            res.history.append((self.rv, "MODIFIED" if old else "ADDED", obj))
            self.cond.notify_all()
            return copy.deepcopy(obj)

    def delete(self, group: str, version: str, plural: str, name: str, namespace: str = "") -> None:
        with self.cond:
            res = self.resources[(group, version, plural)]
            obj = copy.deepcopy(res.objects.pop((namespace if res.namespaced else "", name)))
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            res.history.append((self.rv, "DELETED", obj))
            self.cond.notify_all()

    def inject(self, group: str, version: str, plural: str, line: bytes) -> None:
        """Send ``line`` verbatim (plus a newline) as the next line of this resource's watch streams: garbage,
        deep or broken JSON a collector must survive (bench/hostile.py)."""
        with self.cond:
            self.rv += 1
            self.resources[(group, version, plural)].history.append((self.rv, RAW, {"line": line}))
            self.cond.notify_all()

    def compact(self) -> None:
        """Forget all history: every resourceVersion held by a client is now too old (410)."""
        with self.cond:
            self.rv += 1
            self.min_rv = self.rv
            for res in self.resources.values():
                res.history.clear()

    def break_watches(self) -> None:
        """Close every open watch stream at once, abruptly."""
        with self.cond:
            self.break_gen += 1
            self.cond.notify_all()

    def identity(self, authorization: str | None) -> Identity | None:
        """The caller of a request (None: unauthenticated where tokens are required)."""
        if self.tokens is None:
            return Identity("system:admin", ("system:masters", "system:authenticated"))
        scheme, _, token = (authorization or "").partition(" ")
        return self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None

    def count_requests(self, watch: bool | None = None, path: str | None = None) -> int:
        return sum(1 for p, q in list(self.requests)
                   if (path is None or p == path) and (watch is None or ("watch" in q) == watch))

    def groups(self) -> dict[str, list[str]]:
        with self.cond:
            out: dict[str, list[str]] = {}
            for g, v, _ in self.resources:
                out.setdefault(g, [])
                if v not in out[g]:
                    out[g].append(v)
        return out


def _proto_fields(buf: bytes) -> dict[int, list[Any]]:
    """The fields of one protobuf message: number -> values (varints as int, length-delimited as bytes)."""
    out: dict[int, list[Any]] = {}
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while pos < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.setdefault(number, []).append(varint())
        elif wire == 2:
            n = varint()
            out.setdefault(number, []).append(buf[pos:pos + n])
            pos += n
        else:
            raise ValueError(f"protobuf wire type {wire} not expected in a review")
    return out


def _review_from_protobuf(raw: bytes) -> dict[str, Any]:
    """The spec of a SelfSubject(Access)Review as kubectl sends it: the ``k8s\\0`` envelope (runtime.Unknown, raw
    object in field 2), the review's spec in field 2, its resourceAttributes in field 1 (namespace, verb, group,
    version, resource, subresource, name: fields 1-7 of authorization/v1 generated.proto)."""
    if not raw.startswith(b"k8s\x00"):
        raise ValueError("no k8s protobuf envelope")
    obj = (_proto_fields(raw[4:]).get(2) or [b""])[0]
    spec = (_proto_fields(obj).get(2) or [b""])[0]
    attrs = (_proto_fields(spec).get(1) or [None])[0]
    if attrs is None:
        return {"spec": {}}
    names = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
    fields = _proto_fields(attrs)
    return {"spec": {"resourceAttributes": {n: fields[i + 1][0].decode() for i, n in enumerate(names)
                                            if fields.get(i + 1)}}}


class _Server(ThreadingHTTPServer):
    # A scrape round opens one connection per exporter at once (~50 for 20 nodes): with socketserver's backlog of
    # 5 the kernel drops the rest's SYNs, retried after 1 s and 3 s, so the last scrapes ran past a 3 s timeout.
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hang up on watches all the time


def _since(history: list[tuple[int, str, dict[str, Any]]], rv: int) -> list[tuple[int, str, dict[str, Any]]]:
    return history[bisect.bisect_right(history, rv, key=lambda h: h[0]):]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_api: ApiServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The ``Date`` header on the server's clock (a sandbox faster than real time has its own)."""
        return email.utils.formatdate(self.server_api.now() if timestamp is None else timestamp, usegmt=True)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.server_api.now(), UTC)

    def _caller(self) -> Identity | None:
        """The authenticated caller; answers 401 and returns None when a token is required and missing or unknown."""
        who = self.server_api.identity(self.headers.get("Authorization"))
        if who is None:
            self._status(401, "Unauthorized", "Unauthorized")
        return who

    def _forbid(self, who: Identity, verb: str, group: str, resource: str, namespace: str, name: str = "") -> bool:
        """Answer 403 as kube-apiserver's RBAC does and return True when ``who`` may not."""
        if who.allows(verb, group, resource):
            return False
        plural, _, sub = resource.partition("/")
        what = f"{plural}.{group}" if group else plural
        if name:
            what += f' "{name}"'
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        sub_text = f'resource "{plural}/{sub}"' if sub else f'resource "{plural}"'
        self._status(403, "Forbidden", f'{what} is forbidden: User "{who.username}" cannot {verb} {sub_text} in '
                     f'API group "{group}" {scope}')
        return True

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        """SelfSubjectAccessReview and SelfSubjectReview: what ``gangscope check`` and ``kubectl auth`` ask."""
        api = self.server_api
        u = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        try:
            body = _review_from_protobuf(raw) if ctype == "application/vnd.kubernetes.protobuf" else \
                json.loads(raw or b"{}")
        except (ValueError, IndexError):
            return self._status(400, "BadRequest", f"the request body is not a valid {ctype} review")
        api.requests.append((u.path, {"method": ["POST"]}))
        who = self._caller()
        if who is None:
            return None
        parts = [p for p in u.path.split("/") if p]
        if len(parts) == 4 and parts[0] == "apis" and (parts[1], parts[2]) in REVIEWS \
                and parts[3] == REVIEWS[(parts[1], parts[2])][0]:
            kind = REVIEWS[(parts[1], parts[2])][1]
            out = {"kind": kind, "apiVersion": f"{parts[1]}/{parts[2]}", "metadata": {"creationTimestamp": None},
                   "spec": body.get("spec") or {}}
            if kind == "SelfSubjectReview":
                out.pop("spec")
                out["status"] = {"userInfo": {"username": who.username, "uid": who.uid, "groups": list(who.groups)}}
            else:
                attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
                res = attrs.get("resource", "") + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
                allowed = who.allows(attrs.get("verb", ""), attrs.get("group", ""), res)
                out["status"] = {"allowed": allowed}
                if allowed and api.tokens is not None:
                    out["status"]["reason"] = f'RBAC: allowed by the rules of user "{who.username}"'
            return self._json(201, out)
        return self._status(405, "MethodNotAllowed", f"the server does not allow this method on {u.path}")

    def _send(self, code: int, ctype: str, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, code: int, body: Any) -> None:
        self._send(code, "application/json", json.dumps(body).encode())

    def _status(self, code: int, reason: str, message: str) -> None:
        self._json(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": message, "reason": reason, "code": code})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        api = self.server_api
        u = urlparse(self.path)
        q = parse_qs(u.query)
        for prefix, handler in api.mounts.items():
            if u.path.startswith(prefix):
                answer = handler(u.path, q)
                return self._send(*answer) if answer else self._send(404, "text/plain", b"not found\n")
        api.requests.append((u.path, q))
        api.authorizations.append(self.headers.get("Authorization"))
        who = self._caller()
        if who is None:
            return None
        proxy = _PROXY.match(u.path)
        if proxy:
            ns, scheme, pod, port, rest = proxy.group(1), proxy.group(2) or "http", proxy.group(3), \
                int(proxy.group(4)), proxy.group(5) or "/"
            if self._forbid(who, "get", "", "pods/proxy", ns, f"{pod}:{port}"):
                return None
            answer = api.pod_proxy(ns, pod, scheme, port, rest, q) if api.pod_proxy else None
            if answer is None:
                return self._status(404, "NotFound", f'pods "{pod}" not found')
            return self._send(*answer)
        parts = [p for p in u.path.split("/") if p]
        if parts == ["version"]:
            return self._json(200, {"major": "1", "minor": "35", "gitVersion": "v1.35.0-gangscope-sandbox",
                                    "platform": "linux/amd64"})
        if parts and parts[0] in ("healthz", "livez", "readyz"):
            return self._send(200, "text/plain", b"ok")
        groups = api.groups()
        if parts == ["api"]:
            return self._json(200, {"kind": "APIVersions", "versions": groups.get("", []),
                                    "serverAddressByClientCIDRs": []})
        for g, v in REVIEWS:
            groups.setdefault(g, [v])
        if parts == ["apis"]:
            return self._json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                 "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
                for g, vs in groups.items() if g]})
        if len(parts) >= 2 and parts[0] == "api":
            group, rest = "", parts[1:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, rest = parts[1], parts[2:]
        else:
            return self._status(404, "NotFound", f"the server could not find the requested resource {u.path}")
        version, rest = rest[0], rest[1:]
        if not rest:
            return self._discovery(group, version)
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) not in (1, 2):
            return self._status(404, "NotFound", f"unsupported path {u.path}")
        with api.cond:
            res = api.resources.get((group, version, rest[0]))
        if res is None:
            return self._status(404, "NotFound", f"the server could not find the requested resource {u.path}")
        one = lambda name: q.get(name, [None])[0]  # noqa: E731
        watch = one("watch") in ("1", "true")
        verb = "get" if len(rest) == 2 else "watch" if watch else "list"
        if self._forbid(who, verb, group, rest[0], namespace, rest[1] if len(rest) == 2 else ""):
            return None
        if len(rest) == 2:
            return self._get(res, group, version, rest[0], namespace, rest[1])
        selectors = (one("labelSelector"), one("fieldSelector"))
        if watch:
            as_table = (group, version, rest[0]) if tables.wants_table(self.headers.get("Accept")) else None
            return self._watch(res, namespace, one("resourceVersion"), one("allowWatchBookmarks") == "true",
                               float(one("timeoutSeconds") or 60), selectors, as_table)
        return self._list(res, group, version, rest[0], namespace, int(one("limit") or 0), one("continue"), selectors)

    def _get(self, res: _Resource, group: str, version: str, plural: str, namespace: str, name: str) -> None:
        with self.server_api.cond:
            obj = res.objects.get((namespace if res.namespaced else "", name))
            if obj is not None and tables.wants_table(self.headers.get("Accept")):
                obj = tables.table(group, version, plural, [obj], self._now(), str(self.server_api.rv))
            body = json.dumps(obj).encode() if obj is not None else None
        if body is None:
            return self._status(404, "NotFound", f'{plural}{"." + group if group else ""} "{name}" not found')
        self._send(200, "application/json", body)

    def _discovery(self, group: str, version: str) -> None:
        api = self.server_api
        with api.cond:
            found = {p: r for (g, v, p), r in api.resources.items() if g == group and v == version}
        if (group, version) in REVIEWS:
            plural, kind = REVIEWS[(group, version)]
            return self._json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
                                    "resources": [{"name": plural, "singularName": kind.lower(), "namespaced": False,
                                                   "kind": kind, "verbs": ["create"]}]})
        if not found:
            return self._status(404, "NotFound", f"group version {group}/{version} not served")
        resources = []
        for plural, r in found.items():
            resources.append({"name": plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                              "kind": r.kind, "verbs": VERBS})
            resources.append({"name": f"{plural}/status", "singularName": "", "namespaced": r.namespaced,
                              "kind": r.kind, "verbs": ["get", "patch", "update"]})
        self._json(200, {"kind": "APIResourceList", "apiVersion": "v1",
                         "groupVersion": _api_version(group, version), "resources": resources})

    def _list(self, res: _Resource, group: str, version: str, plural: str, namespace: str, limit: int,
              cont: str | None, selectors: tuple[str | None, str | None]) -> None:
        api = self.server_api
        with api.cond:
            if cont:
                rv_s, _, offset_s = cont.partition(":")
                if int(rv_s) < api.min_rv:
                    return self._status(410, "Expired", "The provided continue parameter is too old")
                list_rv, offset = int(rv_s), int(offset_s)
            else:
                list_rv, offset = api.rv, 0
            items = [o for (ns, _), o in res.objects.items() if (not namespace or ns == namespace)
                     and label_matches(o, selectors[0]) and field_matches(o, selectors[1])]
            page = items[offset:offset + limit] if limit else items[offset:]
            more = bool(limit) and offset + limit < len(items)
            api.served_lists += 1
            if tables.wants_table(self.headers.get("Accept")):
                body = json.dumps(tables.table(group, version, plural, page, self._now(), str(list_rv),
                                               f"{list_rv}:{offset + limit}" if more else None)).encode()
            else:
                body = json.dumps({
                    "kind": f"{res.kind}List", "apiVersion": _api_version(group, version),
                    "metadata": {"resourceVersion": str(list_rv), **({"continue": f"{list_rv}:{offset + limit}"}
                                                                       if more else {})},
                    # Real lists leave apiVersion/kind off the items.
                    "items": [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in page],
                }).encode()
        self._send(200, "application/json", body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, res: _Resource, namespace: str, rv_s: str | None, bookmarks: bool, timeout_s: float,
               selectors: tuple[str | None, str | None],
               as_table: tuple[str, str, str] | None = None) -> None:
        """``as_table`` (group, version, plural): each event's object as a one-row Table, its column definitions
        in the first event only, as kube-apiserver sends ``kubectl get -w`` (rows under one header, ages on the
        sandbox's clock)."""
        api = self.server_api
        headers = True
        with api.cond:
            since = int(rv_s) if rv_s not in (None, "", "0") else api.rv
            gone = since < api.min_rv
            if gone and api.gone_as == "http":
                return self._status(410, "Expired", f"too old resource version: {since} ({api.min_rv})")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if gone:
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": f"too old resource version: {since} ({api.min_rv})", "reason": "Expired",
                      "code": 410}
            self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            self._chunk(b"")
            return
        deadline = time.monotonic() + timeout_s
        gen = api.break_gen
        last_bookmark = time.monotonic()
        sent = 0
        while True:
            with api.cond:
                pending = _since(res.history, since)
                if not pending and not api._closing:
                    api.cond.wait(min(api.bookmark_interval_s, max(0.0, deadline - time.monotonic())) or 0.01)
                    pending = _since(res.history, since)
                drop_after = api.drop_watch_after
                current_rv = api.rv
            if api._closing or api.break_gen != gen:
                return self._abort()
            for rv, etype, obj in pending:
                since = rv
                if etype == RAW:
                    self._chunk(obj["line"] + b"\n")
                    continue
                if namespace and obj["metadata"].get("namespace") != namespace \
                        or not label_matches(obj, selectors[0]) or not field_matches(obj, selectors[1]):
                    continue
                if drop_after is not None and sent >= drop_after:
                    with api.cond:
                        api.drop_watch_after = None
                    # Half a line, then the socket closes without the terminating chunk.
                    self._chunk(json.dumps({"type": etype, "object": obj}).encode()[:25])
                    return self._abort()
                if as_table is not None:
                    row = tables.table(*as_table, [obj], self._now(), str(rv))
                    if not headers:
                        row["columnDefinitions"] = []
                    headers = False
                    self._chunk(json.dumps({"type": etype, "object": row}).encode() + b"\n")
                else:
                    self._chunk(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
                sent += 1
            if not pending:
                since = max(since, current_rv)
            now = time.monotonic()
            if bookmarks and now - last_bookmark >= api.bookmark_interval_s:
                bm = {"kind": res.kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(since)}}
                self._chunk(json.dumps({"type": "BOOKMARK", "object": bm}).encode() + b"\n")
                last_bookmark = now
            if now >= deadline:
                self._chunk(b"")
                return

    def _abort(self) -> None:
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(2)
        except OSError:
            pass
