"""An ntfy server's JSON publishing, for the ``ntfy`` channel."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from fleetwatch.cli.demo.receivers.base import Service


class Ntfy(Service):
    """An ntfy server's JSON publishing (``POST /`` with ``topic``, ``title``, ``message``,
    ``priority``, ``tags``, ``actions``), for the ``ntfy`` channel: answered as ntfy does,
    200 with the message (``id``, ``time``, ``event``, ``topic``...), 401 ``{"code": 40101,
    "error": "unauthorized"}`` for a missing or revoked token when ``tokens`` are set, 400
    for a bad topic, priority or action, 413 for a message over 4,096 bytes. What it took is
    kept (``messages``, and lines of ``DIR/ntfy.jsonl``)."""

    name = "ntfy"
    about = "an ntfy server, topic fleetwatch-demo"

    def __init__(self, directory: Path | None, port: int, tokens=()):
        self.tokens, self.messages, self.lock = set(tokens), [], threading.Lock()
        super().__init__(port, directory)

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
            self.keep(message)
            return 200, message

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        return {"type": "ntfy", "url": f"http://127.0.0.1:{port}", "topic": "fleetwatch-demo",
                "timeout": 5.0}
