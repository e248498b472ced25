"""A local HTTP server for tests: serves fixed bodies per path, optionally slowly, with a status, or gzipped and
chunked in small pieces (as exporters behind promhttp send large bodies)."""

from __future__ import annotations

import gzip as gzip_codec
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Route:
    body: str | bytes
    status: int = 200
    delay_s: float = 0.0
    content_type: str | None = "text/plain; version=0.0.4; charset=utf-8"  # None: no Content-Type header
    chunk: int = 0  # > 0: Transfer-Encoding chunked, pieces of this many bytes, each flushed on its own
    chunk_delay_s: float = 0.0
    gzip: bool = False  # Content-Encoding: gzip
    cut_at: int = 0  # > 0: announce the whole body, send only this many bytes, then close the connection
    gzip_cut_at: int = 0  # > 0 (with gzip): the gzip stream cut to this many bytes, announced and sent as a whole


@contextmanager
def serve(routes: dict[str, Route]) -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """Yields (base URL, request log of (path, headers)); ``routes`` may be changed while serving."""
    seen: list[tuple[str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            seen.append((self.path, dict(self.headers)))
            route = routes.get(self.path.split("?")[0])
            if route is None:
                self.send_error(404)
                return
            if route.delay_s:
                time.sleep(route.delay_s)
            body = route.body.encode() if isinstance(route.body, str) else route.body
            if route.gzip:
                body = gzip_codec.compress(body)[:route.gzip_cut_at or None]
            try:
                self.send_response(route.status)
                if route.content_type is not None:
                    self.send_header("Content-Type", route.content_type)
                if route.gzip:
                    self.send_header("Content-Encoding", "gzip")
                if not route.chunk:
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[:route.cut_at] if route.cut_at else body)
                    self.close_connection = bool(route.cut_at)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, route.cut_at or len(body), route.chunk):
                    piece = body[i:i + route.chunk]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                    if route.chunk_delay_s:
                        time.sleep(route.chunk_delay_s)
                if route.cut_at:
                    self.close_connection = True  # no last chunk: the stream just ends
                    return
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
