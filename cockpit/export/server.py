"""The exporter's HTTP server: `/metrics` (Prometheus text format) and `/snapshot.json` (exactly
`cockpit status --json`) from the latest snapshot, on a thread of its own. It binds to loopback
unless the user names another address; from elsewhere it is reached through `ssh -L`.

A scrape reads the snapshot the engine last produced and never runs a tick; what a snapshot
renders to is kept until the next one, and once something scrapes it is made as each snapshot is
published, so a scrape costs a lookup and a write."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cockpit.errors import Finding, UsageError
from cockpit.export.metrics import LabelSets, exposition
from cockpit.live.snapshot import Snapshot, status_json

DEFAULT_HOST = "127.0.0.1"
# What `exposition` writes: the text format 0.0.4 (prometheus_client's CONTENT_TYPE_LATEST names
# 1.0.0 in its recent versions, a format with escaping rules this text does not follow).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """`--metrics ADDR:PORT`, `[::1]:PORT`, `:PORT` or `PORT` (the last two bind to loopback)."""
    raw = text.strip()
    host, _, port_text = raw.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise UsageError(f"--metrics wants ADDR:PORT, e.g. 127.0.0.1:9464 (got {text!r}: the port must be 1 to 65535)")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise UsageError(
                f"--metrics wants an IP address and a port, e.g. 127.0.0.1:9464 (got {text!r}: {host!r} is not an IP address)"
            ) from None
    return Address(host, port)


class LatestSnapshot:
    """The snapshot the engine last produced, with its renderings made once: on the first ask,
    then, for a kind asked for before, as each snapshot is published."""

    def __init__(self, labels: LabelSets, extra: Callable[[Snapshot], tuple[Snapshot, dict[str, Any]]] | None = None):
        """`extra`: what `status` adds to a snapshot (the notifications' notices and `notify`
        object), so that /snapshot.json is exactly `status --json`; made once a snapshot, on ask."""
        self.labels = labels
        self._extra = extra
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._rendered: dict[str, bytes] = {}
        self._makers: dict[str, Callable[[Snapshot], bytes]] = {"metrics": self._metrics_text, "json": self._json_text}
        self._wanted: set[str] = set()  # the renderings asked for so far: made at each publish from then on

    def publish(self, snapshot: Snapshot) -> None:
        """Keep `snapshot`; once a rendering has been asked for (something scrapes), it is made
        here, on the tick, so that a scrape is a lookup (under a millisecond a tick for 8 GPUs and
        50 runs; nothing before the first scrape)."""
        rendered: dict[str, bytes] = {}
        for kind in tuple(self._wanted):
            try:
                rendered[kind] = self._makers[kind](snapshot)
            except Exception:  # noqa: BLE001 - never in the tick's way: the scrape renders it again and fails there, loudly
                pass
        with self._lock:
            self._snapshot = snapshot
            self._rendered = rendered

    def get(self) -> Snapshot | None:
        return self._snapshot

    def _render(self, kind: str) -> bytes | None:
        with self._lock:
            snapshot, rendered = self._snapshot, self._rendered
            if snapshot is None:
                return None
            if kind not in rendered:
                self._wanted.add(kind)
                rendered[kind] = self._makers[kind](snapshot)
            return rendered[kind]

    def _metrics_text(self, snapshot: Snapshot) -> bytes:
        return exposition(snapshot, self.labels)

    def _json_text(self, snapshot: Snapshot) -> bytes:
        return (status_json(*self._extra(snapshot)) if self._extra else status_json(snapshot)).encode() + b"\n"

    def metrics(self) -> bytes | None:
        return self._render("metrics")

    def json(self) -> bytes | None:
        return self._render("json")


class PublishingSource:
    """The engine, publishing each snapshot it produces for the server (the TUI ticks through it)."""

    def __init__(self, engine: Any, latest: LatestSnapshot):
        self._engine = engine
        self._latest = latest

    def tick(self) -> Snapshot:
        snapshot = self._engine.tick()
        self._latest.publish(snapshot)
        return snapshot

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


_TEXT = "text/plain; charset=utf-8"
Response = tuple[int, list[tuple[str, str]], bytes]


def respond(latest: LatestSnapshot, method: str, path: str) -> Response:
    """The status, headers and body of one request (HEAD: the same headers, no body)."""
    if method not in ("GET", "HEAD"):
        return 405, [("Content-Type", _TEXT), ("Allow", "GET, HEAD")], b"read-only: GET /metrics or /snapshot.json\n"
    path = path.split("?", 1)[0] or "/"
    if path == "/metrics":
        body, kind = latest.metrics(), CONTENT_TYPE
    elif path == "/snapshot.json":
        body, kind = latest.json(), "application/json"
    elif path == "/":
        body, kind = b"cockpit exporter: /metrics (Prometheus) and /snapshot.json (cockpit status --json)\n", _TEXT
    else:
        return 404, [("Content-Type", _TEXT)], b"not found: try /metrics or /snapshot.json\n"
    if body is None:  # before the first tick
        return 503, [("Content-Type", _TEXT), ("Retry-After", "1")], b"no snapshot yet: the first tick is under way\n"
    return 200, [("Content-Type", kind)], body


class _Handler(BaseHTTPRequestHandler):
    """Serves the kept bytes straight from the socket: HTTP/1.1 with keep-alive (Prometheus keeps
    its connection between scrapes), no WSGI layer. An idle connection is closed after `timeout`."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else the body waits on the headers' delayed ACK: 40 ms a kept connection
    server_version = "cockpit"
    sys_version = ""
    timeout = 75.0  # seconds a kept connection may sit idle (scrapes come every 15 to 60 s)
    latest: LatestSnapshot  # set on the server's own subclass

    def _answer(self) -> None:
        status, headers, body = respond(self.latest, self.command, self.path)
        if status == 405:
            self.close_connection = True  # its body, if any, is not read: do not parse it as the next request
        self.send_response_only(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _answer

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):  # the client went away or sat idle too long
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # a scrape every 15 s is not news
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """The exporter, serving on its own thread until `close()`."""

    def __init__(self, address: Address, latest: LatestSnapshot):
        self.latest = latest
        server_class = _Server6 if ":" in address.host else _Server
        try:
            handler = type("Handler", (_Handler,), {"latest": latest})
            self._server = server_class((address.host, address.port), handler)
        except OSError as error:
            raise Finding(
                f"cannot serve metrics on {address}: {error.strerror or error}"
                + ("; another program holds the port: choose another with --metrics ADDR:PORT" if error.errno == 98 else "")
            ) from None
        host, port = self._server.server_address[:2]
        self.address = Address(str(host), int(port))
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="cockpit-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(
    text: str | None, campaign: Any, extra: Callable[[Snapshot], tuple[Snapshot, dict[str, Any]]] | None = None,
) -> tuple[MetricsServer | None, LatestSnapshot | None]:
    """The server `--metrics` asks for (none without the flag), and the holder to publish to."""
    if text is None:
        return None, None
    address = parse_address(text)
    latest = LatestSnapshot(LabelSets.of(campaign), extra)
    return MetricsServer(address, latest), latest
