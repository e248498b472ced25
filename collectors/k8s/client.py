"""A raw-JSON Kubernetes API client: GET a document, or stream a watch as JSON lines.

Authentication comes from the ``kubernetes`` package's config loaders (kubeconfig with a
context, or the in-cluster service account); requests go through plain ``urllib3`` and
responses are decoded as raw JSON, never through the generated model classes (slow, and
they drop fields of CRDs they do not know).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3

from gangscope.errors import UserError

log = logging.getLogger(__name__)


SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@dataclass(frozen=True)
class Source:
    """Where the credentials come from, as the startup summary and ``gangscope check`` name them."""

    kind: str  # "kubeconfig" or "in-cluster"
    path: str | None = None  # the kubeconfig file(s)
    context: str | None = None
    cluster: str | None = None
    user: str | None = None
    server: str | None = None

    def describe(self) -> str:
        if self.kind == "in-cluster":
            return f"in-cluster service account ({self.server or 'KUBERNETES_SERVICE_HOST'})"
        return f'kubeconfig {self.path} context "{self.context}" (cluster {self.cluster}, user {self.user})'


def _in_cluster(kubeconfig: str | None, context: str | None) -> bool:
    return not kubeconfig and not context and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def find_credentials(kubeconfig: str | None = None, context: str | None = None) -> Source | None:
    """The credentials ``Client.from_config`` would use, or None when there are none: an explicit or default
    kubeconfig (``$KUBECONFIG``, ~/.kube/config) with a current (or the named) context, or the in-cluster service
    account. Reads files only; nothing is asked of a server."""
    if _in_cluster(kubeconfig, context) and os.path.exists(SA_TOKEN):
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return Source("in-cluster", server=f"https://{host}:{port}")
    from kubernetes import config as kconfig

    paths = [os.path.expanduser(p) for p in (kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config")
             .split(os.pathsep) if p]
    if not any(os.path.isfile(p) for p in paths):
        return None
    try:
        contexts, active = kconfig.list_kube_config_contexts(config_file=kubeconfig)
    except (kconfig.ConfigException, OSError, ValueError):
        return None
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    if not chosen:
        return None
    ctx = chosen.get("context") or {}
    server = None
    for p in (p for p in paths if os.path.isfile(p)):
        with contextlib.suppress(Exception):  # the loader read it already; this only looks up the server's URL
            import yaml

            doc = yaml.safe_load(Path(p).read_text(encoding="utf-8")) or {}
            server = server or next((c.get("cluster", {}).get("server") for c in doc.get("clusters") or []
                                     if c.get("name") == ctx.get("cluster")), None)
    return Source("kubeconfig", os.pathsep.join(p for p in paths if os.path.isfile(p)), chosen.get("name"),
                  ctx.get("cluster"), ctx.get("user"), server)


class ApiError(Exception):
    """An HTTP error from the API server (``status`` is the HTTP code, 0 for a transport error)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class Client:
    """GET and watch against one API server. Thread-safe (urllib3 pools are)."""

    def __init__(
        self,
        host: str,
        *,
        auth: Callable[[], str | None] = lambda: None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        verify: bool = True,
        server_hostname: str | None = None,
        maxsize: int = 32,
    ) -> None:
        self.host = host.rstrip("/")
        self._auth = auth
        # The TLS settings, for whoever reaches the same server otherwise (the scraper through the pod proxy).
        self.ca_file, self.cert_file, self.key_file, self.verify = ca_file, cert_file, key_file, verify
        kw: dict[str, Any] = {"maxsize": maxsize, "block": False, "retries": False}
        if self.host.startswith("https"):
            kw["cert_reqs"] = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
            if ca_file:
                kw["ca_certs"] = ca_file
            if cert_file:
                kw["cert_file"], kw["key_file"] = cert_file, key_file
            if server_hostname:
                kw["server_hostname"] = server_hostname
            if not verify:
                kw["assert_hostname"] = False
        self._pool = urllib3.PoolManager(**kw)
        self._open: set[urllib3.BaseHTTPResponse] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, kubeconfig: str | None = None, context: str | None = None) -> Client:
        """From a kubeconfig (``--kubeconfig``/``$KUBECONFIG``/~/.kube/config, ``--context``), or in-cluster."""
        from kubernetes import config as kconfig
        from kubernetes.client import Configuration

        cfg = Configuration()
        if kubeconfig and not os.path.exists(os.path.expanduser(kubeconfig)):
            raise UserError(f"kubeconfig {kubeconfig} does not exist")
        try:
            if _in_cluster(kubeconfig, context):
                kconfig.load_incluster_config(client_configuration=cfg)
            else:
                kconfig.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        except kconfig.ConfigException as e:
            raise UserError(f"cannot load Kubernetes credentials: {e}") from None
        except FileNotFoundError as e:
            raise UserError(f"kubeconfig not found: {e.filename}") from None

        def auth() -> str | None:
            # Asked on every request: the loaders' refresh hook renews expired exec-plugin,
            # OIDC and in-cluster tokens. The loaders store "Bearer <token>" under BearerToken.
            return cfg.get_api_key_with_prefix("BearerToken", alias="authorization") or (
                cfg.get_basic_auth_token() if cfg.username else None)

        return cls(cfg.host, auth=auth, ca_file=cfg.ssl_ca_cert, cert_file=cfg.cert_file, key_file=cfg.key_file,
                   verify=cfg.verify_ssl, server_hostname=cfg.tls_server_name)

    def authorization(self) -> str | None:
        """The ``Authorization`` header value of the next request (renewed tokens included); never logged."""
        return self._auth()

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": "gangscope"}
        token = self._auth()
        if token:
            h["Authorization"] = token
        return h

    def post_json(self, path: str, body: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        """POST a JSON object (the review APIs: SelfSubjectReview, SelfSubjectAccessReview); its JSON answer."""
        try:
            resp = self._pool.request("POST", self.host + path, body=json.dumps(body).encode(),
                                      headers={**self._headers(), "Content-Type": "application/json"},
                                      timeout=urllib3.Timeout(connect=10, read=timeout_s), redirect=False)
        except urllib3.exceptions.HTTPError as e:
            raise ApiError(0, f"POST {path}: {e}") from None
        if resp.status >= 400:
            raise ApiError(resp.status, f"POST {path}: {_status_message(resp.data)}")
        try:
            return json.loads(resp.data)
        except ValueError as e:
            raise ApiError(0, f"POST {path}: response is not JSON: {e}") from None

    def get_with_date(self, path: str, timeout_s: float = 10.0) -> tuple[dict[str, Any], str | None]:
        """GET a JSON document and the server's ``Date`` header (its clock, to the second)."""
        resp = self._request(path, None, urllib3.Timeout(connect=min(10.0, timeout_s), read=timeout_s), stream=False)
        try:
            return json.loads(resp.data), resp.headers.get("Date")
        except ValueError as e:
            raise ApiError(0, f"GET {path}: response is not JSON: {e}") from None

    def _url(self, path: str, params: dict[str, Any] | None) -> str:
        return self.host + path + ("?" + urlencode(params) if params else "")

    def _request(self, path: str, params: dict[str, Any] | None, timeout: urllib3.Timeout,
                 stream: bool) -> urllib3.BaseHTTPResponse:
        try:
            resp = self._pool.request("GET", self._url(path, params), headers=self._headers(),
                                      preload_content=not stream, timeout=timeout, redirect=False)
        except urllib3.exceptions.HTTPError as e:
            raise ApiError(0, f"GET {path}: {e}") from None
        if resp.status >= 400:
            body = resp.data if not stream else resp.read(4096)
            resp.release_conn()
            raise ApiError(resp.status, f"GET {path}: {_status_message(body)}")
        return resp

    def get_json(self, path: str, params: dict[str, Any] | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        resp = self._request(path, params, urllib3.Timeout(connect=10, read=timeout_s), stream=False)
        try:
            return json.loads(resp.data)
        except ValueError as e:
            raise ApiError(0, f"GET {path}: response is not JSON: {e}") from None

    def stream_lines(self, path: str, params: dict[str, Any] | None, read_timeout_s: float) -> Iterator[bytes]:
        """Lines of a chunked watch response as they arrive; ApiError when the connection breaks."""
        resp = self._request(path, params, urllib3.Timeout(connect=10, read=read_timeout_s), stream=True)
        with self._lock:
            self._open.add(resp)
        buf = b""
        try:
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                if b"\n" not in buf:
                    continue
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield line
            if buf.strip():  # a final line without newline is complete only if it parses
                try:
                    json.loads(buf)
                except (ValueError, RecursionError):
                    raise ApiError(0, f"watch {path}: stream ended mid-line") from None
                yield buf
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise ApiError(0, f"watch {path}: connection lost: {e}") from None
        finally:
            with self._lock:
                self._open.discard(resp)
            # Never pool a watch connection: it may hold unread stream data.
            with contextlib.suppress(Exception):
                resp.close()
            resp.release_conn()

    def close(self) -> None:
        """Break every open watch stream (used on stop) and drop pooled connections."""
        with self._lock:
            open_ = list(self._open)
        for resp in open_:
            with contextlib.suppress(Exception):  # already closed is fine
                resp.shutdown()  # type: ignore[attr-defined]
        self._pool.clear()


def _status_message(body: bytes) -> str:
    try:
        status = json.loads(body)
        return str(status.get("message") or status.get("reason") or body[:200])
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace")
