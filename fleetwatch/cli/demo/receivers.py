"""The demo's alert receivers: local stand-ins for the services its channels talk to, on
127.0.0.1, keeping what they receive where a new user can read it (``DIR``):

- ``pager``: an HTTP server answering every POST as PagerDuty's Events API v2 does (202,
  ``{"status": "success", "message": "Event processed", "dedup_key": ...}``); each POST is a
  line of ``DIR/pager.jsonl`` (when, the path, the JSON body);
- ``mail``: an SMTP server (aiosmtpd, where installed: the ``test`` extra), each message a
  file ``DIR/mail/NNNNNN.eml``, answered ``250 2.0.0 Ok: queued as NNNNNN``.

``python -m fleetwatch.cli.demo.receivers DIR --pager PORT [--smtp PORT]`` runs them until
SIGTERM or SIGINT. The demo starts it when no ``--alert-*`` flag says where alerts go, and
``fleetwatch alerts --deliveries`` shows what each answered. It trusts what it is sent (a
demo on loopback); it is not a mail or pager service.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: the largest POST body kept (a PagerDuty event is at most 512 KiB)
BODY_MAX = 512 * 1024


def has_smtp() -> bool:
    """Whether the mail receiver can run here (aiosmtpd installed)."""
    return importlib.util.find_spec("aiosmtpd") is not None


class Pager:
    """The webhook receiver: PagerDuty's Events API v2 answers, each POST kept."""

    def __init__(self, directory: Path, port: int):
        self.path, self.lock = directory / "pager.jsonl", threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 <= length <= BODY_MAX:
                    self._answer(413, {"status": "invalid event", "message": "too large"})
                    return
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    self._answer(400, {"status": "invalid event",
                                       "message": "Event object is invalid",
                                       "errors": ["not JSON"]})
                    return
                receiver.keep(self.path, body)
                key = body.get("dedup_key") if isinstance(body, dict) else None
                self._answer(202, {"status": "success", "message": "Event processed",
                                   **({"dedup_key": key} if isinstance(key, str) else {})})

            def _answer(self, code: int, answer: dict) -> None:
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)

    def keep(self, path: str, body) -> None:
        line = json.dumps({"received": time.time(), "path": path, "body": body},
                          ensure_ascii=False)
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, args=(0.2,), daemon=True,
                         name="pager").start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Mail:
    """The SMTP receiver: each message a file of ``DIR/mail/``."""

    def __init__(self, directory: Path, port: int):
        from aiosmtpd.controller import Controller
        self.directory = directory / "mail"
        self.directory.mkdir(exist_ok=True)
        self.count = len(list(self.directory.glob("*.eml")))
        receiver = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                return receiver.keep(envelope.content)

        self.controller = Controller(Handler(), hostname="127.0.0.1", port=port)

    def keep(self, content: bytes) -> str:
        self.count += 1
        queued = f"{self.count:06d}"
        (self.directory / f"{queued}.eml").write_bytes(content)
        return f"250 2.0.0 Ok: queued as {queued}"

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fleetwatch.cli.demo.receivers",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="where what is received is kept")
    ap.add_argument("--pager", type=int, required=True, metavar="PORT")
    ap.add_argument("--smtp", type=int, metavar="PORT")
    args = ap.parse_args(argv)
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    running = [Pager(directory, args.pager)]
    if args.smtp:
        running.append(Mail(directory, args.smtp))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for r in running:
        r.start()
    print(f"receivers: pager http://127.0.0.1:{args.pager}/ -> {directory / 'pager.jsonl'}"
          + (f"; mail 127.0.0.1:{args.smtp} -> {directory / 'mail'}/" if args.smtp else ""),
          flush=True)
    while not stop.wait(1.0):
        pass
    for r in running:
        r.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
