"""Slack's Web API and incoming webhooks, for the ``slack`` channel (slack-sdk's own client
talks to it in the tests)."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
import zlib
from pathlib import Path

from fleetwatch import private
from fleetwatch.cli.demo.receivers.base import Service


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
    about = "Slack's Web API: the bot posts to #ops, follow-ups in threads"

    def __init__(self, directory: Path | None, port: int, tokens=("xoxb-demo",)):
        self.tokens, self.revoked = set(tokens), set()
        self.messages: list[dict] = []
        self.requests: list[tuple[str, str]] = []      # (method or path, error or "ok")
        self.limited, self.retry_after = 0, 1
        self.lock, self.clock = threading.Lock(), time.time
        self._ts = 0
        super().__init__(port, directory)

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
                    self.keep({"update": m["ts"], **body})
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
        self.keep({"ts": ts, **body})
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
        self.keep({"webhook": path, **body})
        self.requests.append((path, "ok"))
        return 200, "ok", {}

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("slack_sdk") is not None

    @classmethod
    def for_demo(cls, directory: Path, port: int) -> "Slack":
        return cls(directory, port, tokens=((directory / "slack-token").read_text().strip(),))

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        """A bot posting to #ops, its token in a file."""
        token = directory / "slack-token"
        private.write(token, "xoxb-fleetwatch-demo\n")
        return {"type": "slack", "token_file": str(token), "channel": "#ops",
                "api_url": f"http://127.0.0.1:{port}/api/", "timeout": 5.0}
