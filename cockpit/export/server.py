"""The exporter's HTTP server: `/metrics` (Prometheus text format) and `/snapshot.json` (exactly
`cockpit status --json`) from the latest snapshot, on a thread of its own. It binds to loopback
unless the user names another address; from elsewhere it is reached through `ssh -L`.

A scrape reads the snapshot the engine last produced and never runs a tick; what a snapshot
renders to is kept until the next one, so scrapes between ticks cost a lookup."""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from cockpit.common.text import json_safe
from cockpit.errors import Finding, UsageError
from cockpit.export.metrics import LabelSets, exposition
from cockpit.live.snapshot import Snapshot, to_json

DEFAULT_HOST = "127.0.0.1"


def status_json(snapshot: Snapshot, extra: dict[str, Any] | None = None) -> str:
    """`status --json`'s text for one snapshot (`extra` adds fields, e.g. the other lots)."""
    body = to_json(snapshot)
    if extra:
        body.update(extra)
    return json_safe(json.dumps(body, ensure_ascii=False, allow_nan=False))


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
    """The snapshot the engine last produced, with its renderings made once (on first ask)."""

    def __init__(self, labels: LabelSets, extra: Callable[[Snapshot], tuple[Snapshot, dict[str, Any]]] | None = None):
        """`extra`: what `status` adds to a snapshot (the notifications' notices and `notify`
        object), so that /snapshot.json is exactly `status --json`; made once a snapshot, on ask."""
        self.labels = labels
        self._extra = extra
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._rendered: dict[str, bytes] = {}

    def publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshot = snapshot
            self._rendered = {}

    def get(self) -> Snapshot | None:
        return self._snapshot

    def _render(self, kind: str, make: Callable[[Snapshot], bytes]) -> bytes | None:
        with self._lock:
            snapshot, rendered = self._snapshot, self._rendered
            if snapshot is None:
                return None
            if kind not in rendered:
                rendered[kind] = make(snapshot)
            return rendered[kind]

    def metrics(self) -> bytes | None:
        return self._render("metrics", lambda s: exposition(s, self.labels))

    def json(self) -> bytes | None:
        return self._render("json", lambda s: (status_json(*self._extra(s)) if self._extra else status_json(s)).encode() + b"\n")


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


def wsgi_app(latest: LatestSnapshot) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain; charset=utf-8"), ("Allow", "GET, HEAD")])
            return [b"read-only: GET /metrics or /snapshot.json\n"]
        if path == "/metrics":
            body, kind = latest.metrics(), CONTENT_TYPE_LATEST
        elif path == "/snapshot.json":
            body, kind = latest.json(), "application/json"
        elif path == "/":
            body, kind = b"cockpit exporter: /metrics (Prometheus) and /snapshot.json (cockpit status --json)\n", "text/plain; charset=utf-8"
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: try /metrics or /snapshot.json\n"]
        if body is None:  # before the first tick
            start_response("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")])
            return [b"no snapshot yet: the first tick is under way\n"]
        start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(body)))])
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

    return app


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a scrape every 15 s is not news
        pass


class _Server(ThreadingMixIn, WSGIServer):
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
            self._server = make_server(address.host, address.port, wsgi_app(latest), server_class=server_class, handler_class=_Quiet)
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
