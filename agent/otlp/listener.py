"""The OTLP/HTTP listener (SPEC.md 4.4.1): HTTP/1.1 on a TCP socket, ``POST /v1/metrics``,
one request per connection (``Connection: close``), on threads of its own; the answers are
:class:`agent.otlp.intake.OtlpIntake`'s.

A thin adapter written on :mod:`socketserver` rather than :mod:`http.server`, which would
bring ``email``, ``http.client`` and OpenSSL into the agent (about 6 MiB of RSS: the agent
serves one route). What it checks itself, before the intake sees a body: the request line
and headers (at most :data:`MAX_HEADERS` lines of :data:`MAX_LINE` octets: 400), the path
(404), the method (405), a ``Content-Length`` (411 without one: a chunked body is not
taken) and that it is within ``otlp.max_body`` (413, the body read and thrown away so that
the client reads the answer). ``Expect: 100-continue`` is answered. At most
:data:`MAX_CONNECTIONS` requests are served at once, by as many worker threads; one more is
answered 503 at once (``Retry-After: 1``); a client silent for :data:`TIMEOUT` seconds is
dropped. Nothing a
client sends stops the listener: every answer and refusal is counted by the intake.
"""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import socketserver
import threading

from agent.otlp.intake import CONTENT_TYPES, JSON, OtlpIntake

log = logging.getLogger(__name__)

PATH = "/v1/metrics"
MAX_CONNECTIONS = 4
TIMEOUT = 10.0
MAX_LINE = 8192
MAX_HEADERS = 64
#: an oversized body is read and thrown away up to this, then the connection is closed
DISCARD = 64 * 1024 * 1024
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           411: "Length Required", 413: "Content Too Large", 415: "Unsupported Media Type",
           503: "Service Unavailable"}


def head(status: int, content_type: str, length: int, headers=()) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}",
             f"Content-Type: {content_type}", f"Content-Length: {length}",
             "Connection: close", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


class Handler(socketserver.StreamRequestHandler):
    """One connection: one request read, answered, closed."""

    timeout = TIMEOUT

    def handle(self) -> None:
        try:
            answer = self.answer(self.server.intake)
            if answer is not None:
                self.wfile.write(head(answer.status, answer.content_type, len(answer.body),
                                      answer.headers) + answer.body)
        except OSError:     # the client left, or was silent past TIMEOUT: nobody to answer
            pass

    def answer(self, intake: OtlpIntake):
        request = self.rfile.readline(MAX_LINE + 1)
        if not request:
            return None
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self.rfile.readline(MAX_LINE + 1)
            if line in (b"\r\n", b"\n", b""):
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or len(line) > MAX_LINE:
                return intake.refuse(400, JSON, "a header line that is not NAME: VALUE, or "
                                                f"longer than {MAX_LINE} octets")
            headers[name.strip().lower()] = value.strip()
        else:
            return intake.refuse(400, JSON, f"more than {MAX_HEADERS} header lines")
        kind = CONTENT_TYPES.get(headers.get("content-type", "").split(";")[0].strip()
                                 .lower(), JSON)
        parts = request.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or len(request) > MAX_LINE:
            return intake.refuse(400, kind, "not an HTTP/1.x request line")
        method, target = parts[0], parts[1].split("?")[0]
        if target != PATH:
            return intake.refuse(404, kind, f"no such path {target[:60]!r}: OTLP/HTTP "
                                            f"metrics are POSTed to {PATH}")
        if method != "POST":
            return intake.refuse(405, kind, f"{method[:10]} {PATH}: only POST",
                                 headers=[("Allow", "POST")])
        length = headers.get("content-length", "")
        if "transfer-encoding" in headers or not length:
            return intake.refuse(411, kind, "a body with a Content-Length is needed (no "
                                            "chunked transfer encoding)")
        if not (length.isascii() and length.isdigit()):
            return intake.refuse(400, kind, f"Content-Length {length[:20]!r} is no number")
        length = int(length[:19])       # (a longer one is past any max_body all the same)
        expect = headers.get("expect", "").lower() == "100-continue"
        limit = intake.cfg.max_body
        if length > limit:
            if not expect:
                self.discard(length)
            return intake.refuse(413, kind, f"a body of {length} bytes, past otlp.max_body "
                                            f"({limit} bytes)")
        if expect:
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self.rfile.read(length)
        if len(body) < length:
            return None                 # the client left before its body was whole
        return intake.export(headers.get("content-type", ""),
                             headers.get("content-encoding", ""), body)

    def discard(self, length: int) -> None:
        """Read (and forget) an oversized body, so that the client, still sending it, reads
        the 413 rather than a reset connection."""
        left = min(length, DISCARD)
        while left > 0:
            chunk = self.rfile.read1(min(left, 65536))
            if not chunk:
                return
            left -= len(chunk)


class Listener(socketserver.TCPServer):
    """The listening socket, its accepting thread and :data:`MAX_CONNECTIONS` workers: bound
    at construction (OSError if it cannot be), serving from :meth:`start` until
    :meth:`close`. The workers wait for connections on a queue (no thread started per
    request: that cost a sixth of a request's CPU)."""

    allow_reuse_address = True
    request_queue_size = 16

    def __init__(self, host: str, port: int, intake: OtlpIntake):
        self.intake = intake
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        #: connections handed to the workers and not yet closed
        self.active = 0
        self._active_lock = threading.Lock()
        self._connections: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        super().__init__((host, port), Handler)
        self._wake_r, self._wake_w = socket.socketpair()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._serve, name="otlp-listener",
                                          daemon=True)]
        self._threads += [threading.Thread(target=self._work, name=f"otlp-worker-{i}",
                                           daemon=True) for i in range(MAX_CONNECTIONS)]
        for t in self._threads:
            t.start()
        log.info("OTLP intake listening on %s%s", self.url, PATH)

    def _serve(self) -> None:
        """Accept until :meth:`close`, asleep in select() meanwhile (socketserver's
        ``serve_forever`` would wake up to look for a stop every poll interval)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping:
                for key, _ in selector.select():
                    if key.fileobj is self.socket and not self._stopping:
                        self._handle_request_noblock()

    def _work(self) -> None:
        while (item := self._connections.get()) is not None:
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:   # a bug: logged (handle_error), the worker goes on
                self.handle_error(request, client_address)
            finally:
                # the place is given back before the client sees the connection close: a
                # client that read its answer to the end and connects again finds it free
                with self._active_lock:
                    self.active -= 1
                self.shutdown_request(request)

    def close(self) -> None:
        if self._threads:
            self._stopping = True
            self._wake_w.send(b"x")
            for _ in range(MAX_CONNECTIONS):
                self._connections.put(None)
            for t in self._threads:
                t.join(5.0)
            self._threads = []
        self._wake_r.close()
        self._wake_w.close()
        self.server_close()

    def process_request(self, request, client_address) -> None:
        """A new connection: to a worker, or answered 503 at once when all are busy."""
        with self._active_lock:
            full = self.active >= MAX_CONNECTIONS
            if not full:
                self.active += 1
        if not full:
            self._connections.put((request, client_address))
            return
        answer = self.intake.refuse(503, JSON, f"{MAX_CONNECTIONS} requests under way",
                                    headers=[("Retry-After", "1")])
        try:
            request.settimeout(1.0)
            request.sendall(head(503, JSON, len(answer.body), answer.headers) + answer.body)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        """A bug met on a request (the client's input is answered, never raised): logged,
        the listener goes on."""
        log.exception("OTLP: failed on a request from %s", client_address)
