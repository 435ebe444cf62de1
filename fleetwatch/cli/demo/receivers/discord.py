"""A Discord webhook (execute and edit), for the ``discord`` channel."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fleetwatch import private
from fleetwatch.cli.demo.receivers.base import Service
from fleetwatch.display import iso

#: Discord's limits on a message and its embeds
CONTENT_MAX, EMBEDS_MAX, TITLE_MAX, DESCRIPTION_MAX = 2000, 10, 256, 4096
FIELDS_MAX, NAME_MAX, VALUE_MAX, FOOTER_MAX, AUTHOR_MAX, EMBED_MAX = 25, 256, 1024, 2048, \
    256, 6000
PATH = re.compile(r"/api(?:/v\d+)?/webhooks/(\d+)/([^/]+)(?:/messages/(\d+))?")
#: what would notify in a message's content (never in an embed), by allowed_mentions' type
MENTIONS = (("everyone", re.compile(r"(?<!\\)@(everyone|here)\b")),
            ("users", re.compile(r"(?<!\\)<@!?(\d+)>")),
            ("roles", re.compile(r"(?<!\\)<@&(\d+)>")))


def form_error(path: tuple, code: str, message: str) -> dict:
    """Discord's 400 Invalid Form Body, the error nested at ``path``."""
    errors: dict = {"_errors": [{"code": code, "message": message}]}
    for key in reversed(path):
        errors = {str(key): errors}
    return {"code": 50035, "errors": errors, "message": "Invalid Form Body"}


def _length(value, limit: int, path: tuple, required: bool = False) -> dict | None:
    if value is None:
        return form_error(path, "BASE_TYPE_REQUIRED", "This field is required") \
            if required else None
    if not isinstance(value, str):
        return form_error(path, "BASE_TYPE_STRING", "Must be a string.")
    if required and not value:
        return form_error(path, "BASE_TYPE_REQUIRED", "This field is required")
    if len(value) > limit:
        return form_error(path, "BASE_TYPE_MAX_LENGTH", f"Must be {limit} or fewer in "
                                                        f"length.")
    return None


def _embed(e, n: int) -> dict | None:
    at = ("embeds", n)
    if not isinstance(e, dict):
        return form_error(at, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a "
                                                    "ModelType")
    for key, limit in (("title", TITLE_MAX), ("description", DESCRIPTION_MAX)):
        problem = _length(e.get(key), limit, (*at, key))
        if problem:
            return problem
    if "color" in e and (not isinstance(e["color"], int) or not 0 <= e["color"] <= 0xFFFFFF):
        return form_error((*at, "color"), "NUMBER_TYPE_MAX", "int value should be less "
                                                             "than or equal to 16777215.")
    if "url" in e and urlsplit(str(e["url"])).scheme not in ("http", "https"):
        return form_error((*at, "url"), "URL_TYPE_INVALID_URL", "Not a well formed URL.")
    fields = e.get("fields", [])
    if not isinstance(fields, list) or len(fields) > FIELDS_MAX:
        return form_error((*at, "fields"), "BASE_TYPE_MAX_LENGTH", f"Must be {FIELDS_MAX} "
                                                                   f"or fewer in length.")
    for i, f in enumerate(fields):
        for key, limit in (("name", NAME_MAX), ("value", VALUE_MAX)):
            problem = _length(f.get(key) if isinstance(f, dict) else None, limit,
                              (*at, "fields", i, key), required=True)
            if problem:
                return problem
    return None


def embed_size(e: dict) -> int:
    return sum(len(e.get(k) or "") for k in ("title", "description")) + \
        sum(len(f.get("name") or "") + len(f.get("value") or "") for f in e.get("fields", ())) + \
        len((e.get("footer") or {}).get("text") or "") + \
        len((e.get("author") or {}).get("name") or "")


def message_problem(body, edit: bool = False) -> dict | None:
    """Discord's 400 answer to what is wrong with an execute-webhook (or, ``edit``, an
    edit-message) ``body``; None when nothing is."""
    if not isinstance(body, dict):
        return {"code": 50109, "message": "The request body contains invalid JSON."}
    problem = _length(body.get("content"), CONTENT_MAX, ("content",))
    if problem:
        return problem
    embeds = body.get("embeds")
    if embeds is not None:
        if not isinstance(embeds, list) or len(embeds) > EMBEDS_MAX:
            return form_error(("embeds",), "BASE_TYPE_MAX_LENGTH", f"Must be {EMBEDS_MAX} "
                                                                   f"or fewer in length.")
        for n, e in enumerate(embeds):
            problem = _embed(e, n)
            if problem:
                return problem
        if sum(embed_size(e) for e in embeds) > EMBED_MAX:
            return form_error(("embeds",), "MAX_EMBED_SIZE_EXCEEDED", f"Embed size exceeds "
                                                                      f"maximum size of "
                                                                      f"{EMBED_MAX}")
    allowed = body.get("allowed_mentions")
    if allowed is not None and (not isinstance(allowed, dict) or not set(
            allowed.get("parse", [])) <= {"everyone", "users", "roles"}):
        return form_error(("allowed_mentions", "parse"), "ENUM_TYPE_COERCE",
                          "Value must be one of {'everyone', 'users', 'roles'}.")
    if not edit and not body.get("content") and not body.get("embeds"):
        return {"code": 50006, "message": "Cannot send an empty message"}
    return None


def pinged(body: dict) -> list[str]:
    """Whom ``body`` would notify: the mentions in its content that its
    ``allowed_mentions`` (absent: all of them) lets through."""
    allowed = body.get("allowed_mentions")
    parse = set(allowed.get("parse", [])) if isinstance(allowed, dict) else \
        {"everyone", "users", "roles"}
    content = str(body.get("content") or "")
    return [m.group() for kind, pattern in MENTIONS if kind in parse
            for m in pattern.finditer(content)]


class Discord(Service):
    """A Discord webhook as documented, for the ``discord`` channel: execute
    (``POST /api/webhooks/ID/TOKEN?wait=true``: 200 with the message object, ``id`` a
    snowflake; without ``wait`` 204) and edit (``PATCH .../messages/MESSAGE_ID``). It
    validates what it is sent (:func:`message_problem`: content 2,000 characters, 10
    embeds, a title 256, a description 4,096, 25 fields of 256/1,024, 6,000 in all),
    answering 400 ``{"code": 50035, "message": "Invalid Form Body", "errors": ...}``; 401
    ``{"code": 50027, "message": "Invalid Webhook Token"}`` for a wrong or revoked token
    (:meth:`revoke`), 404 ``{"code": 10015, "message": "Unknown Webhook"}`` for a deleted
    one (:meth:`remove`), ``10008`` Unknown Message for an edit of a message that is gone
    (:meth:`delete`); 429 ``{"message": "You are being rate limited.", "retry_after": ...,
    "global": false}`` with Retry-After for the next ``limited`` requests, 502 for the next
    ``failing``. Each message records whom it would have pinged (:func:`pinged`). What it
    took is kept (``messages`` with their ``edits``, and lines of ``DIR/discord.jsonl``);
    ``requests`` lists (method, status)."""

    name = "discord"
    about = "a Discord webhook: messages to #alerts, edited on recovery"
    methods = ("POST", "PATCH")

    def __init__(self, directory: Path | None, port: int,
                 webhook: str = "1311000000000000001", token: str = "demo-webhook-token"):
        self.webhooks = {webhook: token}
        self.removed: set[str] = set()
        self.messages: list[dict] = []
        self.requests: list[tuple[str, int]] = []
        self.limited, self.failing, self.retry_after = 0, 0, 1
        self.lock = threading.Lock()
        self._snowflake = 1311500000000000000
        super().__init__(port, directory)

    def webhook_url(self, webhook: str | None = None) -> str:
        webhook = webhook or next(iter(self.webhooks))
        return f"{self.url}/api/webhooks/{webhook}/{self.webhooks[webhook]}"

    def revoke(self, webhook: str | None = None) -> None:
        """The webhook's token reset: its old URL is refused."""
        with self.lock:
            self.webhooks[webhook or next(iter(self.webhooks))] = "reset"

    def remove(self, webhook: str | None = None) -> None:
        with self.lock:
            self.removed.add(webhook or next(iter(self.webhooks)))

    def delete(self, message_id: str) -> None:
        """A message deleted in Discord (its edits then answer Unknown Message)."""
        with self.lock:
            self.messages = [m for m in self.messages if m["id"] != message_id]

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        return self.answer_method("POST", path, headers, raw)

    def answer_method(self, method: str, path: str, headers, raw: bytes | None) -> tuple:
        with self.lock:
            code, answer, extra = self._answer(method, path, raw)
            self.requests.append((method, code))
            return code, answer, extra

    def _answer(self, method: str, path: str, raw: bytes | None) -> tuple:
        if self.limited > 0:
            self.limited -= 1
            return 429, {"message": "You are being rate limited.",
                         "retry_after": float(self.retry_after), "global": False}, \
                {"Retry-After": str(self.retry_after), "X-RateLimit-Limit": "5",
                 "X-RateLimit-Remaining": "0", "X-RateLimit-Scope": "shared"}
        if self.failing > 0:
            self.failing -= 1
            return 502, {"message": "502: Bad Gateway", "code": 0}, {}
        parts = urlsplit(path)
        m = PATH.fullmatch(parts.path)
        if not m or m[1] not in self.webhooks or m[1] in self.removed:
            return 404, {"message": "Unknown Webhook", "code": 10015}, {}
        if m[2] != self.webhooks[m[1]]:
            return 401, {"message": "Invalid Webhook Token", "code": 50027}, {}
        if (method == "PATCH") != bool(m[3]):
            return 405, {"message": "405: Method Not Allowed", "code": 0}, {}
        if raw is None:
            return 413, {"message": "Request entity too large", "code": 40005}, {}
        try:
            body = json.loads(raw or b"")
        except ValueError:
            body = None
        problem = message_problem(body, edit=method == "PATCH")
        if problem:
            return 400, problem, {}
        if method == "PATCH":
            return self._edit(m[3], body)
        self._snowflake += 1
        message = {"id": str(self._snowflake), "type": 0, "channel_id": "1311000000000000100",
                   "webhook_id": m[1], "author": {"id": m[1], "username": "fleetwatch",
                                                  "bot": True},
                   "content": body.get("content") or "", "embeds": body.get("embeds") or [],
                   "mentions": [], "mention_roles": [], "mention_everyone": False,
                   "attachments": [], "pinned": False, "tts": False, "flags": 0,
                   "timestamp": iso(time.time())}
        self.messages.append({**message, "allowed_mentions": body.get("allowed_mentions"),
                              "pinged": pinged(body), "edits": []})
        self.keep({"message": message["id"], **body})
        if (parse_qs(parts.query).get("wait") or [""])[0].lower() != "true":
            return 204, "", {}
        return 200, message, {}

    def _edit(self, message_id: str, body: dict) -> tuple:
        for m in self.messages:
            if m["id"] == message_id:
                m["edits"].append(body)
                m.update({k: body[k] for k in ("content", "embeds") if k in body})
                m["pinged"] += pinged(body)
                self.keep({"edit": message_id, **body})
                return 200, {k: v for k, v in m.items()
                             if k not in ("allowed_mentions", "pinged", "edits")}, {}
        return 404, {"message": "Unknown Message", "code": 10008}, {}

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        """The demo webhook's URL, its token in it, in a file."""
        url = directory / "discord-webhook.url"
        private.write(url, f"http://127.0.0.1:{port}/api/webhooks/1311000000000000001/"
                           f"demo-webhook-token\n")
        return {"type": "discord", "webhook_url_file": str(url), "timeout": 5.0}
