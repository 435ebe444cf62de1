"""What the alerting sink's channels deliver to, as real servers on 127.0.0.1: a mail server
(aiosmtpd) and an HTTP receiver like PagerDuty's events API."""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def hold_port(port: int) -> socket.socket:
    """``port`` on 127.0.0.1 bound and never listened on: a connection to it is refused, as
    to a server that is down, and no other process of the suite gets it (a port closed
    instead is free for anyone's next ephemeral port, and once a router took one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # past its TIME_WAITs
    sock.bind(("127.0.0.1", port))
    return sock


class _Restartable:
    """A server that :meth:`stop` may leave holding its port (``held``, :func:`hold_port`)
    for its next start to listen on."""
    port = 0
    held: socket.socket | None = None

    def _stopped(self, hold: bool) -> None:
        """Once stopped: let go of a port held before; ``hold``: hold the port now."""
        if self.held is not None:
            self.held.close()
            self.held = None
        if hold:
            self.held = hold_port(self.port)


class SmtpServer(_Restartable):
    """aiosmtpd on 127.0.0.1 in its own thread and event loop; ``messages`` are envelopes.

    ``refuse`` answers RCPT with that reply ("550 ..."); ``tls`` (an SSLContext) offers
    STARTTLS and requires it; ``users`` {name: password} enables AUTH. :meth:`stop` then
    :meth:`start` again reopens the same port (a server that was down and is back), held
    meanwhile with ``stop(hold=True)``.
    """

    def __init__(self, tls: ssl.SSLContext | None = None, users: dict | None = None,
                 refuse: str | None = None):
        self.tls, self.users, self.refuse = tls, users, refuse
        self.messages: list = []
        self.logins: list[str] = []
        self.port = 0
        self.loop = self.server = self.thread = None

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.refuse:
            return self.refuse
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(envelope)
        return "250 OK queued"

    def _auth(self, server, session, envelope, mechanism, auth_data):
        from aiosmtpd.smtp import AuthResult
        user, password = auth_data.login.decode(), auth_data.password.decode()
        ok = self.users.get(user) == password
        if ok:
            self.logins.append(user)
        return AuthResult(success=ok, handled=False)

    def _factory(self):
        from aiosmtpd.smtp import SMTP
        return SMTP(self, hostname="smtp.test", loop=self.loop, tls_context=self.tls,
                    require_starttls=self.tls is not None,
                    authenticator=self._auth if self.users else None,
                    auth_required=bool(self.users), auth_require_tls=self.tls is not None)

    def start(self) -> "SmtpServer":
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            where = {"sock": self.held} if self.held is not None \
                else {"host": "127.0.0.1", "port": self.port}
            self.held = None
            self.server = self.loop.run_until_complete(
                self.loop.create_server(self._factory, **where))
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()
            self.loop.run_forever()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10), "SMTP server did not start"
        return self

    def stop(self, hold: bool = False) -> None:
        """Stop serving; ``hold``: keep the port (:func:`hold_port`) for :meth:`start`."""
        async def close():
            self.server.close()
            await self.server.wait_closed()
        if self.loop is not None and self.loop.is_running():
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()
        self._stopped(hold)

    def parsed(self) -> list:
        return [email.message_from_bytes(m.original_content, policy=email.policy.default)
                for m in self.messages]


def _answer(code: int, data: bytes) -> dict:
    """What PagerDuty's Events API v2 answers (its documented 202 and 400 bodies): the
    event's ``dedup_key`` once taken."""
    if not 200 <= code < 300:
        return {"status": "invalid event" if code == 400 else "error",
                "message": "Event object is invalid" if code == 400 else "try again"}
    try:
        key = json.loads(data).get("dedup_key")
    except (ValueError, AttributeError):
        key = None
    return {"status": "success", "message": "Event processed",
            **({"dedup_key": key} if isinstance(key, str) else {})}


class HttpReceiver(_Restartable):
    """A real HTTP server recording each POST's JSON body; answers ``codes`` in turn, then
    ``default``. Restartable on the same port like :class:`SmtpServer`."""

    def __init__(self, default: int = 202, codes: list[int] | None = None,
                 headers: dict | None = None):
        self.default, self.codes, self.headers = default, list(codes or []), headers or {}
        self.posts: list[dict] = []
        self.requests: list[dict] = []
        self.port = 0
        self.httpd = None
        self.lock = threading.Lock()

    def start(self) -> "HttpReceiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    code = receiver.codes.pop(0) if receiver.codes else receiver.default
                    receiver.requests.append({"path": self.path, "code": code,
                                              "headers": dict(self.headers)})
                    if 200 <= code < 300:
                        receiver.posts.append(json.loads(data))
                self.send_response(code)
                for k, v in receiver.headers.items():
                    self.send_header(k, v)
                reply = json.dumps(_answer(code, data)).encode()
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler,
                                         bind_and_activate=self.held is None)
        if self.held is not None:               # listened on where it was held
            self.httpd.socket.close()
            self.httpd.socket, self.held = self.held, None
            self.httpd.server_address = self.httpd.socket.getsockname()
            self.httpd.server_activate()
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v2/enqueue"

    def stop(self, hold: bool = False) -> None:
        """Stop serving; ``hold``: keep the port (:func:`hold_port`) for :meth:`start`."""
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        self._stopped(hold)
