"""The HTTP endpoint: ``GET /metrics`` (Prometheus's text format, or OpenMetrics when asked, from a
collector) and ``GET /healthz`` (200 or 503 with a one-line JSON body ``{"state": "..."}``).

One daemon thread accepts connections and each request is answered on a thread of its own
(prometheus_client's WSGI app inside the standard library's WSGI server), so a slow scraper never
blocks another, nor the event loop: a scrape holds the GIL only while it reads the registry.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.registry import Collector

__all__ = ["Health", "MetricsServer"]

# What /healthz reports: the state's name, and whether it is ready (200) or not (503).
Health = Callable[[], tuple[str, bool]]

_NOT_FOUND = b"not found: this endpoint serves GET /metrics and GET /healthz\n"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a request still answered at stop does not hold the process


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (a scrape every few seconds would fill the log)."""


def _family(host: str, port: int) -> socket.AddressFamily:
    """IPv4 or IPv6, as ``host`` resolves (an IPv6 address or name needs an IPv6 socket)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return socket.AF_INET  # the bind names the problem
    return infos[0][0] if infos else socket.AF_INET


class MetricsServer:
    """Serves ``collector`` at /metrics and ``health`` at /healthz on ``host``:``port`` (0: any
    free port; ``port`` says which once started). ``start`` and ``stop`` from one thread; the
    callables are called on the server's threads, one call per request, possibly at once."""

    def __init__(self, host: str, port: int, collector: Collector, health: Health) -> None:
        self.host = host
        self.port = port
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        self._metrics_app = make_wsgi_app(registry)
        self._health = health
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where the metrics are: ``http://HOST:PORT/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> None:
        """Listen and serve. Raises OSError when the address cannot be bound (a port in use, an
        address this machine does not have)."""
        family = _family(self.host, self.port)

        class _BoundServer(_Server):
            address_family = family

        server: _Server = make_server(
            self.host, self.port, self._app, server_class=_BoundServer, handler_class=_QuietHandler
        )
        self._server = server
        self.port = server.server_port
        self._thread = threading.Thread(target=server.serve_forever, name="prometheus-endpoint", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (blocks up to half a second: the server's poll)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            body: Iterable[bytes] = self._metrics_app(environ, start_response)
            return body
        if path == "/healthz" and environ.get("REQUEST_METHOD") in ("GET", "HEAD"):
            try:
                state, ready = self._health()
            except Exception as e:  # a bug here must not take the endpoint down: report it as not ready
                state, ready = f"unknown ({type(e).__name__}: {e})", False
            payload = (json.dumps({"state": state}) + "\n").encode()
            status = "200 OK" if ready else "503 Service Unavailable"
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
            return [payload]
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(_NOT_FOUND)))])
        return [_NOT_FOUND]
