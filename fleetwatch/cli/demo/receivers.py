"""The demo's alert receivers: local stand-ins for the services its channels talk to, on
127.0.0.1, keeping what they receive where a new user can read it (``DIR``):

- ``pager``: an HTTP server answering every POST as PagerDuty's Events API v2 does (202,
  ``{"status": "success", "message": "Event processed", "dedup_key": ...}``); each POST is a
  line of ``DIR/pager.jsonl`` (when, the path, the JSON body);
- ``mail``: an SMTP server (aiosmtpd, where installed: the ``test`` extra), each message a
  file ``DIR/mail/NNNNNN.eml``, answered ``250 2.0.0 Ok: queued as NNNNNN``;
- ``slack``: Slack's Web API and incoming webhooks (:class:`Slack`, which the tests drive
  slack-sdk's client against too), each message and update a line of ``DIR/slack.jsonl``;
- ``ntfy``: an ntfy server's JSON publishing (:class:`Ntfy`), each message a line of
  ``DIR/ntfy.jsonl``.

``python -m fleetwatch.cli.demo.receivers DIR --pager PORT [--smtp PORT] [--slack PORT]
[--ntfy PORT]`` runs them until SIGTERM or SIGINT. The demo starts it when no ``--alert-*``
flag says where alerts go, and ``fleetwatch alerts --deliveries`` shows what each answered.
It trusts what it is sent (a demo on loopback); it is not a mail, pager or chat service.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: the largest POST body kept (a PagerDuty event is at most 512 KiB)
BODY_MAX = 512 * 1024


def has_smtp() -> bool:
    """Whether the mail receiver can run here (aiosmtpd installed)."""
    return importlib.util.find_spec("aiosmtpd") is not None


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


def has_slack() -> bool:
    """Whether the slack channel can run here (slack-sdk installed)."""
    return importlib.util.find_spec("slack_sdk") is not None


class Service:
    """A stand-in on 127.0.0.1 (``port``; 0: any): each POST's body (None past
    :data:`BODY_MAX`) is answered by :meth:`answer`, ``(status, JSON or text, headers)``;
    started and stopped with its thread."""

    name = "service"

    def __init__(self, port: int):
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if 0 <= length <= BODY_MAX else None
                reply(self, *service.answer(self.path, self.headers, raw))

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        raise NotImplementedError

    def start(self):
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True,
                         name=self.name).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Pager(Service):
    """The webhook receiver: PagerDuty's Events API v2 answers, each POST kept."""

    name = "pager"

    def __init__(self, directory: Path, port: int):
        self.path, self.lock = directory / "pager.jsonl", threading.Lock()
        super().__init__(port)

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        if raw is None:
            return 413, {"status": "invalid event", "message": "too large"}
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, {"status": "invalid event", "message": "Event object is invalid",
                         "errors": ["not JSON"]}
        self.keep(path, body)
        key = body.get("dedup_key") if isinstance(body, dict) else None
        return 202, {"status": "success", "message": "Event processed",
                     **({"dedup_key": key} if isinstance(key, str) else {})}

    def keep(self, path: str, body) -> None:
        line = json.dumps({"received": time.time(), "path": path, "body": body},
                          ensure_ascii=False)
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

class Slack(Service):
    """Slack's Web API and incoming webhooks as documented, for the ``slack`` channel
    (slack-sdk's own client talks to it): ``chat.postMessage`` (threads too),
    ``chat.update`` and ``auth.test`` with a bot token, and ``/services/...`` webhooks.
    It answers as Slack does: HTTP 200 with ``{"ok": false, "error": ...}`` for
    ``not_authed``, ``invalid_auth``, ``token_revoked`` (:meth:`revoke`),
    ``channel_not_found``, ``no_text``, ``msg_too_long`` (text over 40,000 characters),
    ``invalid_blocks`` (over 50 blocks, a section's text over 3,000), ``message_not_found``;
    HTTP 429 with ``Retry-After`` for the next ``limited`` requests; a revoked webhook 404
    ``no_service``. What it took is kept (``messages``, and lines of ``DIR/slack.jsonl``)."""

    TEXT_MAX, BLOCKS_MAX, SECTION_MAX = 40000, 50, 3000
    name = "slack"

    def __init__(self, directory: Path | None, port: int, tokens=("xoxb-demo",)):
        self.path = directory / "slack.jsonl" if directory is not None else None
        self.tokens, self.revoked = set(tokens), set()
        self.messages: list[dict] = []
        self.requests: list[tuple[str, str]] = []      # (method or path, error or "ok")
        self.limited, self.retry_after = 0, 1
        self.lock, self.clock = threading.Lock(), time.time
        self._ts = 0
        super().__init__(port)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def webhook_url(self, name: str = "T0001/B0001/demo") -> str:
        return f"http://127.0.0.1:{self.port}/services/{name}"

    def revoke(self, token: str) -> None:
        with self.lock:
            self.revoked.add(token)

    def answer(self, path: str, headers, raw: bytes | None) -> tuple[int, dict | str, dict]:
        raw = raw or b""
        with self.lock:
            if self.limited > 0:
                self.limited -= 1
                self.requests.append((path, "429"))
                return 429, {"ok": False, "error": "ratelimited"}, \
                    {"Retry-After": str(self.retry_after)}
            if path.startswith("/services/"):
                return self._webhook(path, raw)
            method = path.rpartition("/")[2]
            error, answer = self._api(method, headers, raw)
            self.requests.append((method, error or "ok"))
            return 200, answer if error is None else {"ok": False, "error": error}, {}

    def _api(self, method: str, headers, raw: bytes) -> tuple[str | None, dict]:
        token = (headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if not token:
            return "not_authed", {}
        if token in self.revoked:
            return "token_revoked", {}
        if token not in self.tokens:
            return "invalid_auth", {}
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return "invalid_json", {}
        if method == "auth.test":
            return None, {"ok": True, "team": "demo", "user": "fleetwatch"}
        if method not in ("chat.postMessage", "chat.update"):
            return "unknown_method", {}
        channel = str(body.get("channel") or "")
        if not (channel.startswith("#") or channel.startswith("C")) or len(channel) < 2:
            return "channel_not_found", {}
        channel = channel if channel.startswith("C") else \
            f"C{zlib.crc32(channel.encode()):010d}"
        problem = self._content(body)
        if problem:
            return problem, {}
        if method == "chat.update":
            for m in self.messages:
                if m["channel"] == channel and m["ts"] == body.get("ts"):
                    m["updates"].append({"text": body.get("text"), "blocks": body.get("blocks")})
                    self._keep({"update": m["ts"], **body})
                    return None, {"ok": True, "channel": channel, "ts": m["ts"]}
            return "message_not_found", {}
        thread = body.get("thread_ts")
        if thread is not None and not any(m["ts"] == thread for m in self.messages):
            return "thread_not_found", {}
        self._ts += 1
        ts = f"{int(self.clock())}.{self._ts:06d}"
        self.messages.append({"channel": channel, "ts": ts, "thread_ts": thread,
                              "text": body.get("text"), "blocks": body.get("blocks"),
                              "unfurl_links": body.get("unfurl_links"), "updates": []})
        self._keep({"ts": ts, **body})
        return None, {"ok": True, "channel": channel, "ts": ts,
                      "message": {"text": body.get("text"), "ts": ts}}

    def _content(self, body: dict) -> str | None:
        text, blocks = body.get("text"), body.get("blocks")
        if not text and not blocks:
            return "no_text"
        if text is not None and len(str(text)) > self.TEXT_MAX:
            return "msg_too_long"
        if blocks is not None:
            if not isinstance(blocks, list) or len(blocks) > self.BLOCKS_MAX:
                return "invalid_blocks"
            for b in blocks:
                section = (b.get("text") or {}).get("text") if isinstance(b, dict) else None
                if not isinstance(b, dict) or (b.get("type") == "section" and
                                               len(str(section or "")) > self.SECTION_MAX):
                    return "invalid_blocks"
        return None

    def _webhook(self, path: str, raw: bytes) -> tuple[int, str, dict]:
        if path in self.revoked:
            self.requests.append((path, "no_service"))
            return 404, "no_service", {}
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        problem = "invalid_payload" if not isinstance(body, dict) else self._content(body)
        if problem:
            self.requests.append((path, problem))
            return 400, problem, {}
        self.messages.append({"channel": path, "ts": None, "thread_ts": None,
                              "text": body.get("text"), "blocks": body.get("blocks"),
                              "unfurl_links": body.get("unfurl_links"), "updates": []})
        self._keep({"webhook": path, **body})
        self.requests.append((path, "ok"))
        return 200, "ok", {}

    def _keep(self, entry: dict) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"received": time.time(), **entry}, ensure_ascii=False)
                        + "\n")

class Ntfy(Service):
    """An ntfy server's JSON publishing (``POST /`` with ``topic``, ``title``, ``message``,
    ``priority``, ``tags``, ``actions``), for the ``ntfy`` channel: answered as ntfy does,
    200 with the message (``id``, ``time``, ``event``, ``topic``...), 401 ``{"code": 40101,
    "error": "unauthorized"}`` for a missing or revoked token when ``tokens`` are set, 400
    for a bad topic, priority or action, 413 for a message over 4,096 bytes. What it took is
    kept (``messages``, and lines of ``DIR/ntfy.jsonl``)."""

    name = "ntfy"

    def __init__(self, directory: Path | None, port: int, tokens=()):
        self.path = directory / "ntfy.jsonl" if directory is not None else None
        self.tokens, self.messages, self.lock = set(tokens), [], threading.Lock()
        super().__init__(port)

    def revoke(self, token: str) -> None:
        with self.lock:
            self.tokens.discard(token)

    def answer(self, path: str, headers, raw: bytes | None) -> tuple[int, dict]:
        raw = raw or b""
        with self.lock:
            if self.tokens or headers.get("Authorization"):
                token = (headers.get("Authorization") or "").removeprefix("Bearer ").strip()
                if token not in self.tokens:
                    return 401, {"code": 40101, "http": 401, "error": "unauthorized"}
            try:
                body = json.loads(raw)
            except ValueError:
                return 400, {"code": 40001, "http": 400, "error": "invalid request"}
            topic = body.get("topic") if isinstance(body, dict) else None
            if not isinstance(topic, str) or not topic or len(topic) > 64 or \
                    not all(c.isalnum() or c in "-_" for c in topic):
                return 400, {"code": 40009, "http": 400, "error": "invalid topic"}
            if body.get("priority", 3) not in (1, 2, 3, 4, 5):
                return 400, {"code": 40007, "http": 400, "error": "invalid priority"}
            for action in body.get("actions") or []:
                if not isinstance(action, dict) or action.get("action") not in \
                        ("view", "http", "broadcast") or not action.get("label"):
                    return 400, {"code": 40018, "http": 400, "error": "invalid action"}
            if len(str(body.get("message") or "").encode()) > 4096:
                return 413, {"code": 41301, "http": 413, "error": "message too large"}
            message = {"id": f"m{len(self.messages) + 1:011d}", "time": int(time.time()),
                       "event": "message", **{k: body[k] for k in (
                           "topic", "title", "message", "priority", "tags", "actions")
                           if k in body}}
            self.messages.append(message)
            if self.path is not None:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(message, ensure_ascii=False) + "\n")
            return 200, message

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
    ap.add_argument("--slack", type=int, metavar="PORT",
                    help="Slack's Web API (the bot token: DIR/slack-token)")
    ap.add_argument("--ntfy", type=int, metavar="PORT", help="an ntfy server's publishing")
    args = ap.parse_args(argv)
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    running = [Pager(directory, args.pager)]
    if args.smtp:
        running.append(Mail(directory, args.smtp))
    if args.slack:
        token = (directory / "slack-token").read_text().strip()
        running.append(Slack(directory, args.slack, tokens=(token,)))
    if args.ntfy:
        running.append(Ntfy(directory, args.ntfy))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for r in running:
        r.start()
    print(f"receivers: pager http://127.0.0.1:{args.pager}/ -> {directory / 'pager.jsonl'}"
          + (f"; mail 127.0.0.1:{args.smtp} -> {directory / 'mail'}/" if args.smtp else "")
          + (f"; slack http://127.0.0.1:{args.slack}/api/ -> {directory / 'slack.jsonl'}"
             if args.slack else "")
          + (f"; ntfy http://127.0.0.1:{args.ntfy}/ -> {directory / 'ntfy.jsonl'}"
             if args.ntfy else ""), flush=True)
    while not stop.wait(1.0):
        pass
    for r in running:
        r.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
