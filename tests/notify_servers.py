"""Local servers for the notification tests: an HTTP server on 127.0.0.1 that takes apprise's
`json://` posts (and heartbeat GETs) and keeps them, and an SMTP server (aiosmtpd) on loopback."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Hit:
    method: str
    path: str
    body: dict[str, Any] | None
    at: float  # time.time() when it arrived


@dataclass
class Receiver:
    """What the server got, and how it answers (status code, a delay before answering)."""

    hits: list[Hit] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def posts(self) -> list[Hit]:
        with self.lock:
            return [h for h in self.hits if h.method == "POST"]

    @property
    def gets(self) -> list[Hit]:
        with self.lock:
            return [h for h in self.hits if h.method == "GET"]

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/"

    def wait_for_posts(self, count: int, timeout: float) -> list[Hit]:
        deadline = time.time() + timeout
        while time.time() < deadline and len(self.posts) < count:
            time.sleep(0.05)
        return self.posts


def start_http(receiver: Receiver) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = {"raw": raw.decode("utf-8", "replace")}
            with receiver.lock:
                receiver.hits.append(Hit(method, self.path, body, time.time()))
            if receiver.delay:
                time.sleep(receiver.delay)
            self.send_response(receiver.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def do_GET(self) -> None:  # noqa: N802
            self._answer("GET")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
