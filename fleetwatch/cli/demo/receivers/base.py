"""What the receivers share: an HTTP stand-in on 127.0.0.1 (:class:`Service`) and its
answers."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: the largest POST body kept (a PagerDuty event is at most 512 KiB)
BODY_MAX = 512 * 1024


def reply(handler: BaseHTTPRequestHandler, code: int, answer: dict | str,
          headers: dict | None = None) -> None:
    """Answer ``code`` with ``answer``: JSON, or text (a string, as Slack's webhooks
    answer), and ``headers``."""
    text = isinstance(answer, str)
    data = answer.encode() if text else json.dumps(answer).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "text/plain" if text
                        else "application/json; charset=utf-8")
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class Service:
    """A stand-in on 127.0.0.1 (``port``; 0: any): each POST's body (None past
    :data:`BODY_MAX`) is answered by :meth:`answer`, ``(status, JSON or text, headers)``;
    started and stopped with its thread. What it took is kept by :meth:`keep`, a JSON line
    of ``DIR/NAME.jsonl`` (``directory`` None: in memory only, as the tests use it).

    For the demo (:mod:`fleetwatch.cli.demo.receivers`): ``name`` is its flag (``--NAME
    PORT``) and its file's name, :meth:`for_demo` makes it from the demo's directory,
    :meth:`demo_channel` is the alerting channel the demo writes for it, ``about`` what it
    stands for in the demo's printout."""

    name = "service"
    about = ""
    methods = ("POST",)

    def __init__(self, port: int, directory: Path | None = None):
        service = self
        self.path = directory / f"{self.name}.jsonl" if directory is not None else None
        self._file_lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if 0 <= length <= BODY_MAX else None
                answer = service.answer(self.path, self.headers, raw) \
                    if self.command == "POST" else \
                    service.answer_method(self.command, self.path, self.headers, raw)
                service.took(self.command, self.path, answer[0], raw)
                reply(self, *answer)

            do_POST = _serve

            def do_PUT(self):
                self._serve() if "PUT" in service.methods else self.send_error(405)

            def do_PATCH(self):
                self._serve() if "PATCH" in service.methods else self.send_error(405)

            def do_GET(self):
                self._serve() if "GET" in service.methods else self.send_error(405)

            def log_message(self, *args):
                pass

        #: every request answered 2xx: (method, path, its JSON body or None), in order
        self.taken: list[tuple[str, str, object]] = []
        self._holding, self._released = 0, threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        raise NotImplementedError

    def answer_method(self, method: str, path: str, headers, raw: bytes | None) -> tuple:
        """A request other than POST (for a service in whose ``methods`` it is)."""
        return 405, {"error": f"{method} not allowed"}

    def took(self, method: str, path: str, code: int, raw: bytes | None) -> None:
        """Note a request answered ``code``; hold its answer while :meth:`hold` says so."""
        if 200 <= code < 300:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            with self._file_lock:
                self.taken.append((method, path, body))
        with self._file_lock:
            holding = self._holding > 0
            self._holding -= holding
        if holding:             # the sender waits for its answer: killed meanwhile, say
            self._released.wait(60)

    def hold(self, n: int = 1) -> None:
        """Take the next ``n`` requests but answer them only after :meth:`release` (as a
        service that is slow to answer: a test kills the sender meanwhile)."""
        with self._file_lock:
            self._released.clear()
            self._holding = n

    def release(self) -> None:
        with self._file_lock:
            self._holding = 0
        self._released.set()

    def keep(self, entry: dict) -> None:
        """``entry`` (with the time it came) as a line of ``DIR/NAME.jsonl``."""
        if self.path is None:
            return
        line = json.dumps({"received": time.time(), **entry}, ensure_ascii=False)
        with self._file_lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    @classmethod
    def available(cls) -> bool:
        """Whether it can run here (a library it needs is installed)."""
        return True

    @classmethod
    def for_demo(cls, directory: Path, port: int) -> "Service":
        return cls(directory, port)

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict | None:
        """The demo's channel to it (None: the demo's flags make it: the webhook, email)."""
        return None

    def start(self):
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True,
                         name=self.name).start()
        return self

    def stop(self) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()
