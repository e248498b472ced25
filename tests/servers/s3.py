"""SeaweedFS (`weed server`: master, volume, filer and S3 gateway in one process) on free loopback ports.

The binary is built from its Go module by ``.ci/build-kubernetes`` into ``~/.cache/gangscope-seaweedfs/<version>/``
(``GANGSCOPE_WEED`` names another one). Each start makes a bucket and two identities for the run: ``admin``
(read, list, write) and ``reader`` (read and list only: a bucket without write permission). The S3 API is spoken
here with a small SigV4 client (list, put, create bucket), so a test can see the bucket as any S3 client would,
not through DuckDB.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import gobuild
from tests.servers.process import free_port, halt

VERSION = "v0.0.0-20261109003541-7506e5f91cd6"  # .ci/build-kubernetes SEAWEEDFS_VERSION
CACHE = Path(os.environ.get("GANGSCOPE_SEAWEEDFS_CACHE") or Path.home() / ".cache" / "gangscope-seaweedfs")
REGION = "us-east-1"


def binary() -> Path:
    """The weed binary; waits for the background build when it is not there yet."""
    override = os.environ.get("GANGSCOPE_WEED")
    if override:
        return Path(override)
    path = CACHE / VERSION / "bin" / "weed"
    complete = CACHE / VERSION / ".complete"
    gobuild.wait(done=complete.exists)
    if not complete.exists():
        raise RuntimeError(f"SeaweedFS not built in {path.parent.parent} (run .ci/build-kubernetes); "
                           f"build log: {gobuild.log_tail()}")
    return path


class _Exited(RuntimeError):
    """``weed`` exited while starting."""


@dataclass
class Credentials:
    access_key: str
    secret_key: str


def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def request(endpoint: str, creds: Credentials, method: str, path: str, query: dict[str, str] | None = None,
            body: bytes = b"", timeout_s: float = 10.0) -> tuple[int, bytes]:
    """One S3 request signed with AWS Signature V4 (path-style URL); (status, body)."""
    now = dt.datetime.now(dt.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    quoted = urllib.parse.quote(path, safe="/-_.~")
    qs = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                  for k, v in sorted((query or {}).items()))
    headers = {"host": endpoint, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join([method, quoted, qs, *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, payload])
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _sign(_sign(_sign(_sign(f"AWS4{creds.secret_key}".encode(), day), REGION), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, SignedHeaders={signed}, "
                                f"Signature={signature}")
    req = urllib.request.Request(f"http://{endpoint}{quoted}" + (f"?{qs}" if qs else ""), data=body or None,
                                 method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - loopback
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@dataclass
class S3Server:
    endpoint: str  # host:port of the S3 gateway
    bucket: str
    admin: Credentials
    reader: Credentials  # read and list only
    directory: Path
    ports: dict[str, int]
    process: subprocess.Popen[bytes] | None = None
    started_s: list[float] = field(default_factory=list)  # seconds from launch to the bucket answering, per start

    @property
    def log(self) -> str:
        path = self.directory / "weed.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def objects(self, prefix: str = "", creds: Credentials | None = None) -> dict[str, int]:
        """Every object under ``prefix`` in the bucket (key -> size), by ListObjectsV2 pages."""
        out: dict[str, int] = {}
        token = None
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            if token:
                query["continuation-token"] = token
            status, body = request(self.endpoint, creds or self.admin, "GET", f"/{self.bucket}", query)
            if status != 200:
                raise RuntimeError(f"ListObjectsV2 answered {status}: {body[:300]!r}")
            root = ET.fromstring(body)
            ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            for c in root.findall(f"{ns}Contents"):
                out[c.findtext(f"{ns}Key") or ""] = int(c.findtext(f"{ns}Size") or 0)
            if root.findtext(f"{ns}IsTruncated") != "true":
                return out
            token = root.findtext(f"{ns}NextContinuationToken")

    def put(self, key: str, body: bytes, creds: Credentials | None = None) -> int:
        return request(self.endpoint, creds or self.admin, "PUT", f"/{self.bucket}/{key}", body=body)[0]

    def duckdb_secret(self, name: str = "gangscope_s3", creds: Credentials | None = None,
                      persistent: bool = False, or_replace: bool = False, scope: str | None = None) -> str:
        """The CREATE SECRET statement a user runs once for this server (docs/scaling.md); ``scope``: a prefix
        narrower than the bucket; ``or_replace``: over a secret of that name left by an earlier server."""
        c = creds or self.admin
        return (f"CREATE {'OR REPLACE ' if or_replace else ''}{'PERSISTENT ' if persistent else ''}SECRET {name} "
                f"(TYPE s3, KEY_ID '{c.access_key}', SECRET '{c.secret_key}', REGION '{REGION}', "
                f"ENDPOINT '{self.endpoint}', URL_STYLE 'path', USE_SSL false, "
                f"SCOPE '{scope or f's3://{self.bucket}'}')")

    def start(self, timeout_s: float = 120.0) -> S3Server:
        """Launch on this server's ports and data directory (again after ``stop``: the objects are kept)."""
        weed = binary()
        p = self.ports
        # -logdir: glog's files beside weed.log, not in /tmp
        args = [str(weed), f"-logdir={self.directory}", "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-dir={self.directory / 'data'}",
                "-master.telemetry=false", f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
                "-master.volumeSizeLimitMB=64", "-master.electionTimeout=2s", "-volume.max=0",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
                "-volume.preStopSeconds=0", "-filer", f"-filer.port={p['filer']}",
                f"-filer.port.grpc={p['filer_grpc']}", f"-filer.localSocket={self.directory / 'filer.sock'}",
                "-s3", f"-s3.port={p['s3']}",
                f"-s3.port.grpc={p['s3_grpc']}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-s3.localSocket={self.directory / 's3.sock'}", f"-s3.config={self.directory / 's3.json'}"]
        log = open(self.directory / "weed.log", "ab")  # noqa: SIM115 - lives as long as the server
        t0 = time.monotonic()
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        cwd=self.directory)
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                # glog's fatal line ("F1207 ...") first: the goroutine dump after it fills the log's tail.
                fatal = "\n".join(ln for ln in self.log.splitlines() if re.match(r"F\d{4} ", ln))
                raise _Exited(f"weed exited with code {self.process.returncode}: {fatal}\n{self.log[-1500:]}")
            if self._answers():
                self.started_s.append(time.monotonic() - t0)
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"SeaweedFS did not make bucket {self.bucket} within {timeout_s:.0f} s: {self.log[-1500:]}")

    def _answers(self) -> bool:
        """The bucket exists (made now if not) and takes a write: the volume server has registered."""
        try:
            with socket.create_connection(("127.0.0.1", self.ports["s3"]), timeout=0.5):
                pass
            status, _ = request(self.endpoint, self.admin, "HEAD", f"/{self.bucket}", timeout_s=5)
            if status == 404:
                status, _ = request(self.endpoint, self.admin, "PUT", f"/{self.bucket}", timeout_s=5)
            return status == 200 and self.put(".gangscope-ready", b"ok") == 200
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (its objects stay in the directory)."""
        if self.process is not None:
            halt(self.process, timeout_s=20)
            self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def start(timeout_s: float = 120.0, attempts: int = 3) -> S3Server:
    """A new SeaweedFS with a bucket and credentials made for this run; RuntimeError with the reason if it cannot.

    A ``weed`` that exits at once is started again on other ports: its eight ports are picked free but bound only
    when it starts, and another worker's server may take one in between (CI, 7 Dec: four workers starting their
    servers together, the S3 gateway's listen failed, "weed exited with code 255")."""
    for attempt in range(1, attempts + 1):
        try:
            return _start(timeout_s)
        except _Exited:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _start(timeout_s: float) -> S3Server:
    root = Path(tempfile.mkdtemp(prefix="gangscope-s3-"))
    (root / "data").mkdir()
    ports: dict[str, int] = {}
    for name in ("master", "volume", "filer", "s3"):
        ports[name] = free_port()
        ports[f"{name}_grpc"] = free_port()
    admin = Credentials("GS" + secrets.token_hex(9).upper(), secrets.token_urlsafe(30))
    reader = Credentials("GR" + secrets.token_hex(9).upper(), secrets.token_urlsafe(30))
    (root / "s3.json").write_text(json.dumps({"identities": [
        {"name": "admin", "credentials": [{"accessKey": admin.access_key, "secretKey": admin.secret_key}],
         "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
        {"name": "reader", "credentials": [{"accessKey": reader.access_key, "secretKey": reader.secret_key}],
         "actions": ["Read", "List"]},
    ]}))
    server = S3Server(f"127.0.0.1:{ports['s3']}", f"gangscope-{secrets.token_hex(4)}", admin, reader, root, ports)
    try:
        return server.start(timeout_s)
    except BaseException:
        server.remove()
        raise
