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
from typing import Any
from urllib.parse import urlencode

import urllib3

from gangscope.errors import UserError

log = logging.getLogger(__name__)


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
            if not kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
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

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": "gangscope"}
        token = self._auth()
        if token:
            h["Authorization"] = token
        return h

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
