"""Pushover's messages API (``POST /1/messages.json``), for the ``pushover`` channel."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from fleetwatch import private
from fleetwatch.cli.demo.receivers.base import Service

#: Pushover's keys: 30 letters and digits
KEY = re.compile(r"[A-Za-z0-9]{30}")
#: the fields Pushover takes (others are ignored, as Pushover does)
FIELDS = ("token", "user", "message", "title", "url", "url_title", "priority", "html",
          "monospace", "timestamp", "sound", "device", "retry", "expire", "ttl", "callback")
MONTHLY = 10000


class Pushover(Service):
    """Pushover's messages API as documented, for the ``pushover`` channel: ``POST
    /1/messages.json``, form-encoded or JSON, with ``token`` (an application's), ``user`` (a
    user's or group's key), ``message`` (at most 1,024 characters), ``title`` (250),
    ``url`` (512), ``url_title`` (100), ``priority`` (-2 to 2; 2 needs ``retry`` of at
    least 30 s and ``expire`` of at most 10,800), ``html`` or ``monospace`` (0 or 1, not
    both), ``timestamp``, ``ttl``. It answers as Pushover does: 200 ``{"status": 1,
    "request": UUID}`` (and a ``receipt`` for priority 2) with the ``X-Limit-App-*``
    headers; 400 ``{"status": 0, "errors": [...], "request": UUID}`` naming what is wrong
    (``"token": "invalid"`` for an unknown or revoked token, :meth:`revoke`; ``"user":
    "invalid"``); 429 past the monthly limit for the next ``limited`` requests (with a
    ``Retry-After`` only if ``retry_after`` is set: Pushover sends none); 500 for the next
    ``failing`` ones; 404 elsewhere than ``/1/messages.json``. What it took is kept
    (``messages``, without the token; lines of ``DIR/pushover.jsonl``)."""

    MESSAGE_MAX, TITLE_MAX, URL_MAX, URL_TITLE_MAX = 1024, 250, 512, 100
    name = "pushover"
    about = "Pushover's messages API: notifications to the demo's user key"

    def __init__(self, directory: Path | None, port: int, tokens=(), users=()):
        self.tokens, self.users = set(tokens), set(users)
        self.messages: list[dict] = []
        self.requests: list[tuple[int, list[str]]] = []     # (status, errors)
        self.limited, self.retry_after, self.failing = 0, None, 0
        self.lock, self.clock = threading.Lock(), time.time
        super().__init__(port, directory)

    def revoke(self, token: str) -> None:
        """The application's token disabled: Pushover calls it invalid from now on."""
        with self.lock:
            self.tokens.discard(token)

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        with self.lock:
            code, answer, more = self._answer(path, headers, raw)
            self.requests.append((code, answer.get("errors") or []))
            return code, answer, more

    def _answer(self, path: str, headers, raw: bytes | None) -> tuple[int, dict, dict]:
        request = str(uuid.uuid4())
        if urlsplit(path).path != "/1/messages.json":
            return 404, {"status": 0, "errors": ["not found"], "request": request}, {}
        sent = len(self.messages)
        limits = {"X-Limit-App-Limit": str(MONTHLY),
                  "X-Limit-App-Remaining": str(max(0, MONTHLY - sent)),
                  "X-Limit-App-Reset": str(int(self.clock()) + 86400)}
        if self.limited > 0:
            self.limited -= 1
            wait = {"Retry-After": str(self.retry_after)} if self.retry_after else {}
            return 429, {"status": 0, "errors": ["application has exceeded its monthly "
                                                 "message limit"], "request": request}, \
                {**limits, "X-Limit-App-Remaining": "0", **wait}
        if self.failing > 0:
            self.failing -= 1
            return 500, {"status": 0, "errors": ["internal error"], "request": request}, {}
        body = _body(headers, raw)
        if body is None:
            return 400, {"status": 0, "errors": ["request could not be parsed"],
                         "request": request}, {}
        error, field = self._check(body)
        if error:
            return 400, {**({field: "invalid"} if field else {}), "errors": [error],
                         "status": 0, "request": request}, {}
        message = {"request": request, **{k: body[k] for k in FIELDS if k in body and
                                          k != "token"}}
        answer = {"status": 1, "request": request}
        if int(body.get("priority", 0)) == 2:
            answer["receipt"] = uuid.uuid4().hex[:30]
            message["receipt"] = answer["receipt"]
        self.messages.append(message)
        self.keep(message)
        return 200, answer, limits

    def _check(self, body: dict) -> tuple[str | None, str | None]:
        """(what Pushover would say is wrong, the field it names), or (None, None)."""
        token, user = str(body.get("token") or ""), str(body.get("user") or "")
        if not KEY.fullmatch(token) or token not in self.tokens:
            return "application token is invalid, see https://pushover.net/api", "token"
        if not KEY.fullmatch(user) or user not in self.users:
            return "user identifier is not a valid user, group, or subscribed user key, " \
                   "see https://pushover.net/api#identifiers", "user"
        message = body.get("message")
        if not isinstance(message, str) or not message.strip():
            return "message cannot be blank", "message"
        for field, limit in (("message", self.MESSAGE_MAX), ("title", self.TITLE_MAX),
                             ("url", self.URL_MAX), ("url_title", self.URL_TITLE_MAX)):
            if field in body and (not isinstance(body[field], str) or
                                  len(body[field]) > limit):
                return f"{field} is too long, must be at most {limit} characters", field
        numbers = {}
        for field in ("priority", "html", "monospace", "timestamp", "retry", "expire", "ttl"):
            if field in body:
                value = body[field]
                if isinstance(value, bool) or not re.fullmatch(r"-?\d{1,12}", str(value)):
                    return f"{field} is invalid", field
                numbers[field] = int(value)
        level = numbers.get("priority", 0)
        if not -2 <= level <= 2:
            return "priority is invalid", "priority"
        if level == 2:
            if numbers.get("retry", 0) < 30:
                return "retry is invalid, must be at least 30 seconds", "retry"
            if not 0 < numbers.get("expire", 0) <= 10800:
                return "expire is invalid, must be at most 10800 seconds", "expire"
        for field in ("html", "monospace"):
            if numbers.get(field, 0) not in (0, 1):
                return f"{field} is invalid", field
        if numbers.get("html") == 1 and numbers.get("monospace") == 1:
            return "html and monospace cannot both be set", "monospace"
        return None, None

    @classmethod
    def for_demo(cls, directory: Path, port: int) -> "Pushover":
        return cls(directory, port, tokens=((directory / "pushover-token").read_text().strip(),),
                   users=((directory / "pushover-user").read_text().strip(),))

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        """An application's token and a user key, each in its file."""
        token, user = directory / "pushover-token", directory / "pushover-user"
        private.write(token, "afleetwatchdemoapplicationtkn1\n")
        private.write(user, "ufleetwatchdemouserkey00000001\n")
        return {"type": "pushover", "api_url": f"http://127.0.0.1:{port}/1/messages.json",
                "token_file": str(token), "user_key_file": str(user), "timeout": 5.0}


def _body(headers, raw: bytes | None) -> dict | None:
    """A request's fields: JSON, or a form."""
    if raw is None:
        return None
    kind = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    try:
        body = json.loads(raw or b"{}") if kind == "application/json" else \
            dict(parse_qsl(raw.decode(), keep_blank_values=True))
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None
