"""A local HTTP server for tests: serves fixed bodies per path, optionally slowly or with a status."""

from __future__ import annotations

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
    content_type: str = "text/plain; version=0.0.4; charset=utf-8"


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
            try:
                self.send_response(route.status)
                self.send_header("Content-Type", route.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
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
