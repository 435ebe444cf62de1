"""A Mattermost incoming webhook, for the ``mattermost`` channel."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from urllib.parse import urlsplit

from fleetwatch import private
from fleetwatch.cli.demo.receivers.base import Service

#: Mattermost's limit on a post's text (runes): a longer one is split into several posts
TEXT_MAX = 16383
#: ServiceSettings.MaximumPayloadSizeBytes' default: a larger body is refused
BODY_MAX = 300000
PATH = re.compile(r"/hooks/([a-z0-9]+)")
#: what a mention notifies: Mattermost's channel-wide ones
CHANNEL_WIDE = ("@here", "@channel", "@all")
_CODE = re.compile(r"```.*?(?:```|$)|(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def _error(id_: str, message: str, status: int) -> dict:
    """An error as Mattermost answers one (a model.AppError)."""
    return {"id": id_, "message": message, "detailed_error": "", "request_id":
            "fleetwatchdemo0000000000000", "status_code": status}


def mentions(texts: list[str], users=()) -> list[str]:
    """What Mattermost would notify for ``texts`` (a post's message, its attachments' text,
    pretext and field values), as its mention parser finds them: in the text left once
    Markdown is read (code removed, ``\\@`` read as ``@``), words split at anything but
    letters, digits and ``: . - _ @``, then ``@here``, ``@channel``, ``@all`` or
    ``@USER`` (of ``users``), trailing punctuation aside."""
    known = {*CHANNEL_WIDE, *(f"@{u.lower()}" for u in users)}
    found = []
    for value in texts:
        plain = _ESCAPE.sub(r"\1", _CODE.sub(" ", value))
        word, words = "", []
        for c in plain + " ":
            if c.isalpha() or c.isnumeric() or c in ":.-_@":
                word += c
            elif word:
                words.append(word)
                word = ""
        for w in words:
            w = w.lstrip(":.-_").lower()
            while w:
                if w in known:
                    found.append(w)
                    break
                if w[-1] not in ".-:_":
                    break
                w = w[:-1]
    return found


def _payload_problem(body) -> str | None:
    """Why Mattermost could not read ``body`` as an incoming webhook's request (a type
    its JSON decoding refuses), None when it can."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    for key in ("text", "channel", "username", "icon_url", "icon_emoji", "type"):
        if key in body and not isinstance(body[key], str):
            return f"{key}: expected a string"
    attachments = body.get("attachments")
    if attachments is None:
        return None
    if not isinstance(attachments, list):
        return "attachments: expected an array"
    for a in attachments:
        if not isinstance(a, dict):
            return "attachments: expected objects"
        for key in ("fallback", "color", "pretext", "text", "title", "title_link"):
            if key in a and not isinstance(a[key], str):
                return f"attachments.{key}: expected a string"
        fields = a.get("fields", [])
        if not isinstance(fields, list) or not all(
                isinstance(f, dict) and isinstance(f.get("title", ""), str) and
                isinstance(f.get("short", False), bool) for f in fields):
            return "attachments.fields: expected objects with title, value and short"
    return None


class Mattermost(Service):
    """A Mattermost incoming webhook as documented, for the ``mattermost`` channel:
    ``POST /hooks/ID`` with ``text`` (Markdown), ``channel``, ``username``,
    ``attachments`` (Slack's), answered 200 with the text ``ok``. A text over 16,383
    characters is split into several posts, as Mattermost does. Its errors, a model
    AppError ``{"id", "message", "status_code", ...}``: 400
    ``web.incoming_webhook.parse.app_error`` (a body it cannot read) or
    ``web.incoming_webhook.text.app_error`` (no text and no attachment), 400
    ``web.incoming_webhook.invalid.app_error`` for a deleted webhook (:meth:`remove`: what
    Mattermost answers), 403 ``channel_locked`` for a ``channel`` a webhook locked to its
    own may not post to, 404 ``web.incoming_webhook.channel.app_error`` for a channel that
    does not exist, 413 for a body over 300,000 bytes; 429 with Retry-After for the next
    ``limited`` requests, 503 for the next ``failing``. Each post records whom it would
    notify (:func:`mentions`). What it took is kept (``posts``, and lines of
    ``DIR/mattermost.jsonl``); ``requests`` lists the status of each."""

    name = "mattermost"
    about = "a Mattermost incoming webhook, posting to ~ops"

    def __init__(self, directory: Path | None, port: int,
                 hook: str = "fleetwatchdemohook000000000", channel: str = "ops",
                 locked: bool = False, channels=("ops", "town-square", "alerts"),
                 users=("ops-lead",)):
        self.hooks = {hook: channel}
        self.locked, self.channels, self.users = locked, set(channels), tuple(users)
        self.removed: set[str] = set()
        self.posts: list[dict] = []
        self.requests: list[int] = []
        self.limited, self.failing, self.retry_after = 0, 0, 1
        self.lock = threading.Lock()
        super().__init__(port, directory)

    def webhook_url(self, hook: str | None = None) -> str:
        return f"{self.url}/hooks/{hook or next(iter(self.hooks))}"

    def remove(self, hook: str | None = None) -> None:
        """The webhook deleted in Mattermost: its URL is refused."""
        with self.lock:
            self.removed.add(hook or next(iter(self.hooks)))

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        with self.lock:
            code, answer, extra = self._answer(path, raw)
            self.requests.append(code)
            return code, answer, extra

    def _answer(self, path: str, raw: bytes | None) -> tuple:
        if self.limited > 0:
            self.limited -= 1
            return 429, "limit exceeded\n", {"Retry-After": str(self.retry_after),
                                             "X-Ratelimit-Limit": "10",
                                             "X-Ratelimit-Remaining": "0"}
        if self.failing > 0:
            self.failing -= 1
            return 503, _error("app.post.save.app_error", "Unable to save the post.",
                               503), {}
        if raw is None or len(raw) > BODY_MAX:
            return 413, _error("api.context.request_body_too_large.app_error",
                               "The request body is too large.", 413), {}
        try:
            body = json.loads(raw or b"")
        except ValueError:
            body = None
        if _payload_problem(body):
            return 400, _error("web.incoming_webhook.parse.app_error",
                               "Unable to parse incoming data.", 400), {}
        if not body.get("text") and body.get("attachments") is None:
            return 400, _error("web.incoming_webhook.text.app_error", "No text specified.",
                               400), {}
        m = PATH.fullmatch(urlsplit(path).path)
        if not m or m[1] not in self.hooks or m[1] in self.removed:
            return 400, _error("web.incoming_webhook.invalid.app_error", "Invalid webhook.",
                               400), {}
        own = self.hooks[m[1]]
        channel = str(body.get("channel") or own).removeprefix("#")
        if channel not in self.channels:
            return 404, _error("web.incoming_webhook.channel.app_error",
                               "Couldn't find the channel.", 404), {}
        if self.locked and channel != own:
            return 403, _error("web.incoming_webhook.channel_locked.app_error",
                               "This webhook is not permitted to post to the requested "
                               "channel.", 403), {}
        attachments = body.get("attachments") or []
        said = [body.get("text") or ""] + [
            str(x) for a in attachments for x in (
                a.get("pretext"), a.get("text"),
                *(f.get("value") for f in a.get("fields", []))) if x]
        text = body.get("text") or ""
        pieces = [text[i:i + TEXT_MAX] for i in range(0, len(text), TEXT_MAX)] or [""]
        for n, piece in enumerate(pieces):
            post = {"channel": channel, "message": piece,
                    "attachments": attachments if n == len(pieces) - 1 else [],
                    "username": body.get("username"),
                    "mentioned": mentions(said, self.users) if n == 0 else []}
            self.posts.append(post)
            self.keep(post)
        return 200, "ok", {}

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        """The demo webhook's URL (its id is its secret) in a file."""
        url = directory / "mattermost-webhook.url"
        private.write(url, f"http://127.0.0.1:{port}/hooks/fleetwatchdemohook000000000\n")
        return {"type": "mattermost", "webhook_url_file": str(url), "timeout": 5.0}
