"""Telegram's Bot API (``sendMessage``, ``editMessageText``, ``getMe``), for the ``telegram``
channel."""

from __future__ import annotations

import json
import re
import threading
import time
import zlib
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from fleetwatch import private
from fleetwatch.cli.demo.receivers.base import Service

#: Telegram's HTML tags (Bot API, "HTML style") and the entity each makes
TAGS = {"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
        "ins": "underline", "s": "strikethrough", "strike": "strikethrough",
        "del": "strikethrough", "span": "spoiler", "tg-spoiler": "spoiler",
        "a": "text_link", "code": "code", "pre": "pre", "blockquote": "blockquote",
        "tg-emoji": "custom_emoji"}
NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_ENTITY = re.compile(r"&(?:(lt|gt|amp|quot)|#(\d{1,7})|#x([0-9a-fA-F]{1,6}));")
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+(?:\s*=\s*(?:\"[^\"]*\"|"
                  r"'[^']*'|[^\s\"'>]+))?)*)\s*>")
_ATTR = re.compile(r"([a-zA-Z-]+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'>]+)))?")
#: what Telegram finds by itself in a text outside code, pre and links
FOUND = (("mention", re.compile(r"(?<![\w@])@[A-Za-z0-9_]{1,32}")),
         ("url", re.compile(r"\b(?:https?|ftp)://[^\s<>\"]+|\bwww\.[^\s<>\"]+")),
         ("bot_command", re.compile(r"(?<![\w/])/[A-Za-z][A-Za-z0-9_]{0,31}")),
         ("hashtag", re.compile(r"(?<![\w#])#[^\W\d][\w]{0,63}")))
TOKEN = re.compile(r"\d{1,20}:[A-Za-z0-9_-]{1,100}")


class _Offset:
    """The byte offset of ``html[i]``, as Telegram's errors name it (counted when shown)."""

    def __init__(self, html: str, i: int):
        self.html, self.i = html, i

    def __str__(self) -> str:
        return str(len(self.html[:self.i].encode()))


def _u16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class ParseError(ValueError):
    """What Telegram answers for HTML it cannot parse (after "can't parse entities: ")."""


def parse(html: str) -> tuple[str, list[dict]]:
    """``html`` as Telegram parses it (``parse_mode: HTML``): (the text shown, its entities
    with ``offset`` and ``length`` in UTF-16 units), then the mentions, links, commands and
    hashtags Telegram finds in the text outside code, pre and links. :class:`ParseError`
    for an unsupported tag or entity, a tag not closed or closed out of order, an ``<a>``
    without ``href``, or an entity inside code or pre."""
    out: list[str] = []
    shown = 0
    stack: list[tuple[str, int, dict]] = []
    entities: list[dict] = []
    i = 0
    while i < len(html):
        c = html[i]
        at = _Offset(html, i)
        if c == "<":
            m = _TAG.match(html, i)
            if not m:
                raise ParseError(f"Unclosed start tag at byte offset {at}")
            end, name, attrs = m.group(1), m.group(2).lower(), m.group(3)
            if end:
                if not stack or stack[-1][0] != name:
                    expected = f'"</{stack[-1][0]}>"' if stack else "no end tag"
                    raise ParseError(f'Unmatched end tag at byte offset {at}, expected '
                                     f'{expected}, found "</{name}>"')
                tag, start, found = stack.pop()
                if shown > start:
                    entities.append({"type": TAGS[tag], "offset": start,
                                     "length": shown - start, **found})
            else:
                if name not in TAGS:
                    raise ParseError(f'Unsupported start tag "{name}" at byte offset {at}')
                inside = {t for t, _, _ in stack}
                if inside & {"code", "pre"} and not (name == "code" and
                                                     stack[-1][0] == "pre"):
                    raise ParseError(f'Entity "{name}" can\'t be nested in code or pre at '
                                     f'byte offset {at}')
                found = {}
                for a in _ATTR.finditer(attrs):
                    value = a.group(2) if a.group(2) is not None else \
                        a.group(3) if a.group(3) is not None else a.group(4) or ""
                    found[a.group(1).lower()] = _unescape(value)
                if name == "a":
                    if not found.get("href"):
                        raise ParseError(f"Can't find href of the link at byte offset {at}")
                    found = {"url": found["href"]}
                elif name == "span" and found.get("class") != "tg-spoiler":
                    raise ParseError(f'Tag "span" must have class "tg-spoiler" at byte '
                                     f'offset {at}')
                else:
                    found = {}
                stack.append((name, shown, found))
            i = m.end()
        elif c == "&":
            m = _ENTITY.match(html, i)
            if not m:
                raise ParseError(f"Unsupported HTML entity at byte offset {at}")
            ch = _unescape(m.group(0))
            out.append(ch)
            shown += _u16(ch)
            i = m.end()
        else:
            out.append(c)
            shown += _u16(c)
            i += 1
    if stack:
        raise ParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    text = "".join(out)
    return text, sorted(entities + _found(text, entities), key=lambda e: e["offset"])


def _unescape(text: str) -> str:
    def one(m):
        if m.group(1):
            return NAMED[m.group(1)]
        return chr(int(m.group(2)) if m.group(2) else int(m.group(3), 16))
    return _ENTITY.sub(one, text)


def _found(text: str, entities: list[dict]) -> list[dict]:
    """The mentions, URLs, commands and hashtags in ``text`` outside code, pre and links."""
    quiet = [(e["offset"], e["offset"] + e["length"]) for e in entities
             if e["type"] in ("code", "pre", "text_link")]
    out = []
    for kind, pattern in FOUND:
        for m in pattern.finditer(text):
            start = _u16(text[:m.start()])
            end = start + _u16(m.group(0))
            if not any(a < end and start < b for a, b in quiet):
                out.append({"type": kind, "offset": start, "length": end - start})
    return out


def entity_text(message: dict, entity: dict) -> str:
    """The text an ``entity`` of a kept ``message`` covers."""
    data = message["text"].encode("utf-16-le")
    return data[2 * entity["offset"]:2 * (entity["offset"] + entity["length"])] \
        .decode("utf-16-le")


class Telegram(Service):
    """Telegram's Bot API as documented, for the ``telegram`` channel: ``POST
    /bot<TOKEN>/sendMessage`` (``chat_id``, ``text`` in Telegram's HTML, parsed as Telegram
    does: at most 4,096 characters shown, ``link_preview_options``, ``reply_parameters``,
    ``reply_markup``'s inline keyboard), ``editMessageText`` and ``getMe``. It answers as
    Telegram does: ``{"ok": true, "result": MESSAGE}``; ``{"ok": false, "error_code": N,
    "description": ...}`` with 401 ``Unauthorized`` (an unknown or revoked token,
    :meth:`revoke`), 404 ``Not Found`` (no such method, a malformed token), 400 ``Bad
    Request: chat not found``, ``message text is empty``, ``message is too long``,
    ``can't parse entities: ...``, ``message to edit not found``, ``message is not
    modified``, 403 ``Forbidden: bot was blocked by the user`` / ``bot was kicked from the
    supergroup chat`` (a chat in ``blocked``), 429 ``Too Many Requests: retry after N`` with
    ``parameters.retry_after`` for the next ``limited`` requests, 502 ``Bad Gateway`` for
    the next ``failing`` ones. What it took is kept (``messages``, each with its text, its
    entities, the message it replies to and its edits; lines of ``DIR/telegram.jsonl``)."""

    TEXT_MAX = 4096
    BOT = {"id": 7000000001, "is_bot": True, "first_name": "fleetwatch",
           "username": "fleetwatch_demo_bot"}
    name = "telegram"
    about = "Telegram's Bot API: the bot posts to a group, follow-ups as replies"

    def __init__(self, directory: Path | None, port: int, tokens=(), chats=(-1001234567890,)):
        self.tokens, self.revoked, self.blocked = set(tokens), set(), set()
        self.chats: dict[int, dict] = {}
        self.usernames: dict[str, int] = {}
        for c in chats:
            if isinstance(c, str) and c.startswith("@"):
                number = -1000000000000 - zlib.crc32(c.lower().encode())
                self.usernames[c.lower()] = number
                self.chats[number] = {"id": number, "type": "channel", "title": c[1:],
                                      "username": c[1:]}
            else:
                number = int(c)
                self.chats[number] = {"id": number, "type": "supergroup", "title": "ops"} \
                    if number < 0 else {"id": number, "type": "private", "first_name": "ops"}
        self.messages: list[dict] = []
        self.requests: list[tuple[str, str]] = []     # (method, description or "ok")
        self.limited, self.retry_after, self.failing = 0, 1, 0
        self.lock, self.clock = threading.Lock(), time.time
        super().__init__(port, directory)

    def revoke(self, token: str) -> None:
        with self.lock:
            self.revoked.add(token)

    def answer(self, path: str, headers, raw: bytes | None) -> tuple[int, dict]:
        with self.lock:
            code, answer = self._answer(path, headers, raw)
            self.requests.append((urlsplit(path).path.rpartition("/")[2],
                                  "ok" if code == 200 else answer["description"]))
            return code, answer

    def _answer(self, path: str, headers, raw: bytes | None) -> tuple[int, dict]:
        if self.limited > 0:
            self.limited -= 1
            return 429, {"ok": False, "error_code": 429,
                         "description": f"Too Many Requests: retry after {self.retry_after}",
                         "parameters": {"retry_after": self.retry_after}}
        if self.failing > 0:
            self.failing -= 1
            return _error(502, "Bad Gateway")
        m = re.fullmatch(r"/bot([^/]*)/([A-Za-z]+)", urlsplit(path).path)
        if not m or not TOKEN.fullmatch(m.group(1)):
            return _error(404, "Not Found")
        token, method = m.groups()
        if token in self.revoked or token not in self.tokens:
            return _error(401, "Unauthorized")
        if method == "getMe":
            return 200, {"ok": True, "result": self.BOT}
        if method not in ("sendMessage", "editMessageText"):
            return _error(404, "Not Found")
        if raw is None:
            return _error(413, "Request Entity Too Large")
        body = _body(headers, raw)
        if body is None:
            return _error(400, "Bad Request: can't parse JSON object")
        where = self._chat(body.get("chat_id"))
        if isinstance(where, tuple):
            return where
        content = self._content(body)
        if isinstance(content, tuple) and isinstance(content[0], int):
            return content
        text, entities = content
        if method == "editMessageText":
            return self._edit(where, body, text, entities)
        return self._send(where, body, text, entities)

    def _chat(self, value):
        """The chat ``value`` names, or the error answer."""
        if value is None or value == "":
            return _error(400, "Bad Request: chat_id is empty")
        if isinstance(value, str) and value.startswith("@"):
            value = self.usernames.get(value.lower())
        elif isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value not in self.chats:
            return _error(400, "Bad Request: chat not found")
        if value in self.blocked:
            return _error(403, "Forbidden: bot was blocked by the user"
                          if self.chats[value]["type"] == "private"
                          else "Forbidden: bot was kicked from the supergroup chat")
        return self.chats[value]

    def _content(self, body: dict):
        """(the text shown, its entities) of a request's ``text`` and ``parse_mode``, or the
        error answer."""
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            return _error(400, "Bad Request: message text is empty")
        mode = body.get("parse_mode")
        if mode in (None, ""):
            shown, entities = text, _found(text, [])
        elif mode == "HTML":
            try:
                shown, entities = parse(text)
            except ParseError as e:
                return _error(400, f"Bad Request: can't parse entities: {e}")
        else:
            return _error(400, f"Bad Request: unsupported parse_mode {str(mode)[:20]}")
        if not shown.strip():
            return _error(400, "Bad Request: message text is empty")
        if _u16(shown) > self.TEXT_MAX:
            return _error(400, "Bad Request: message is too long")
        previews = body.get("link_preview_options", {})
        if not isinstance(previews, dict) or not isinstance(previews.get("is_disabled", False),
                                                             bool):
            return _error(400, "Bad Request: can't parse link preview options")
        if not isinstance(body.get("disable_web_page_preview", False), bool):
            return _error(400, "Bad Request: can't parse disable_web_page_preview")
        problem = _keyboard(body.get("reply_markup"))
        return _error(400, f"Bad Request: {problem}") if problem else (shown, entities)

    def _send(self, where: dict, body: dict, text: str, entities: list[dict]):
        reply = body.get("reply_parameters")
        allow = bool(body.get("allow_sending_without_reply"))
        if reply is None and body.get("reply_to_message_id") is not None:
            reply = {"message_id": body.get("reply_to_message_id")}
        replied = None
        if reply is not None:
            number = reply.get("message_id") if isinstance(reply, dict) else None
            if not isinstance(number, int) or isinstance(number, bool):
                return _error(400, "Bad Request: can't parse reply parameters")
            allow = allow or reply.get("allow_sending_without_reply") is True
            replied = self._message(where["id"], number)
            if replied is None and not allow:
                return _error(400, "Bad Request: message to be replied not found")
        message = {"message_id": 1 + max((m["message_id"] for m in self.messages
                                          if m["chat"]["id"] == where["id"]), default=0),
                   "from": self.BOT, "chat": where, "date": int(self.clock()),
                   "text": text, **({"entities": entities} if entities else {})}
        if replied is not None:
            message["reply_to_message"] = {k: v for k, v in replied.items() if k in (
                "message_id", "chat", "date", "text")}
        self.messages.append({**message, "html": body.get("text"), "edits": [],
                              "reply_markup": body.get("reply_markup"),
                              "previews": not _no_previews(body)})
        self.keep({"sendMessage": message})
        return 200, {"ok": True, "result": message}

    def _edit(self, where: dict, body: dict, text: str, entities: list[dict]):
        number = body.get("message_id")
        message = self._message(where["id"], number) if isinstance(number, int) else None
        if message is None:
            return _error(400, "Bad Request: message to edit not found")
        if message["text"] == text and message.get("entities", []) == entities:
            return _error(400, "Bad Request: message is not modified: specified new message "
                               "content and reply markup are exactly the same as a current "
                               "content and reply markup of the message")
        message["edits"].append({"text": message["text"], "html": message["html"],
                                 "entities": message.get("entities", [])})
        message.update(text=text, html=body.get("text"), entities=entities,
                       edit_date=int(self.clock()))
        shown = {k: v for k, v in message.items() if k not in ("html", "edits",
                                                                 "reply_markup", "previews")}
        self.keep({"editMessageText": shown})
        return 200, {"ok": True, "result": shown}

    def _message(self, chat: int, number) -> dict | None:
        for m in self.messages:
            if m["chat"]["id"] == chat and m["message_id"] == number:
                return m
        return None

    @classmethod
    def for_demo(cls, directory: Path, port: int) -> "Telegram":
        return cls(directory, port,
                   tokens=((directory / "telegram-token").read_text().strip(),))

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        """A bot posting to the group -1001234567890, its token in a file."""
        token = directory / "telegram-token"
        private.write(token, "7000000001:fleetwatch-demo-token_not-a-real-one\n")
        return {"type": "telegram", "api_url": f"http://127.0.0.1:{port}",
                "token_file": str(token), "chat_id": "-1001234567890", "timeout": 5.0}


def _error(code: int, description: str) -> tuple[int, dict]:
    return code, {"ok": False, "error_code": code, "description": description}


def _body(headers, raw: bytes) -> dict | None:
    """A request's parameters: JSON, or a form (whose object fields are JSON strings)."""
    kind = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    try:
        if kind == "application/x-www-form-urlencoded":
            body = dict(parse_qsl(raw.decode(), keep_blank_values=True))
            for k in ("reply_parameters", "link_preview_options", "reply_markup"):
                if k in body:
                    body[k] = json.loads(body[k])
            for k in ("message_id", "reply_to_message_id"):
                if str(body.get(k, "")).lstrip("-").isdigit():
                    body[k] = int(body[k])
            for k in ("disable_web_page_preview", "allow_sending_without_reply"):
                if k in body:
                    body[k] = body[k] == "true"
        else:
            body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def _no_previews(body: dict) -> bool:
    return (body.get("link_preview_options") or {}).get("is_disabled") is True or \
        body.get("disable_web_page_preview") is True


def _keyboard(markup) -> str | None:
    """What is wrong with an inline keyboard, None if nothing."""
    if markup is None:
        return None
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        return "can't parse inline keyboard button: InlineKeyboardMarkup must be an Array"
    for row in rows:
        for button in row:
            if not isinstance(button, dict) or not isinstance(button.get("text"), str) or \
                    not button["text"]:
                return "can't parse inline keyboard button: Text buttons are unallowed in " \
                       "the inline keyboard"
            if "url" in button and not re.match(r"(https?|tg)://\S+$", str(button["url"])):
                return "BUTTON_URL_INVALID"
            if "callback_data" in button and not 1 <= len(
                    str(button["callback_data"]).encode()) <= 64:
                return "BUTTON_DATA_INVALID"
    return None
