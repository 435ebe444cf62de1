"""A Matrix homeserver's client-server API, the part the ``matrix`` channel uses, for the
demo and the tests without Synapse (the tests also run the channel against a real one)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from fleetwatch import private
from fleetwatch.cli.demo.receivers.base import Service

#: the tags and link schemes the Matrix spec lets a client show in a ``formatted_body``
#: (client-server API, m.room.message msgtypes, "HTML"); clients drop the others
TAGS = frozenset("font del h1 h2 h3 h4 h5 h6 blockquote p a ul ol sup sub li b i u strong "
                 "em s code hr br div table thead tbody tr th td caption pre span img "
                 "details summary".split())
SCHEMES = ("http", "https", "ftp", "mailto", "magnet")
_SEND = re.compile(r"/_matrix/client/(?:v3|r0)/rooms/([^/]+)/send/([^/]+)/([^/]+)")
_EVENT = re.compile(r"/_matrix/client/(?:v3|r0)/rooms/([^/]+)/event/([^/]+)")
_MESSAGES = re.compile(r"/_matrix/client/(?:v3|r0)/rooms/([^/]+)/messages")


def error(code: int, errcode: str, text: str, **extra) -> tuple[int, dict, dict]:
    return code, {"errcode": errcode, "error": text, **extra}, {}


def canonical(value, where: str = "content") -> str | None:
    """What makes ``value`` not canonical JSON, as Synapse refuses it (a float, an integer
    past 2**53), or None."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, float):
        return f"Bad JSON value: float at {where}"
    if isinstance(value, int):
        return None if abs(value) < 2 ** 53 else f"JSON integer out of range at {where}"
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        found = canonical(item, f"{where}.{key}")
        if found:
            return found
    return None


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.dropped: set[str] = set()

    def handle_starttag(self, tag, attrs):
        if tag not in TAGS:
            self.dropped.add(tag)
        href = dict(attrs).get("href") if tag == "a" else None
        if href is not None and urlsplit(href).scheme not in SCHEMES:
            self.dropped.add(f"a href={href[:40]}")


def dropped_tags(formatted: str) -> list[str]:
    """The tags (and link schemes) of ``formatted`` a client would drop, per the spec."""
    parser = _Tags()
    parser.feed(formatted)
    parser.close()
    return sorted(parser.dropped)


class Matrix(Service):
    """A homeserver's client-server API as the ``matrix`` channel uses it: ``PUT
    /_matrix/client/v3/rooms/{roomId}/send/{eventType}/{txnId}`` answered 200 ``{"event_id":
    "$..."}`` (the same event again for the same token and transaction id: a resend),
    ``GET .../rooms/{roomId}/event/{eventId}`` (what an edit reads), ``GET
    .../rooms/{roomId}/messages`` (the room, newest first) and ``GET
    /_matrix/client/versions``. It answers as Synapse does: 401 ``M_MISSING_TOKEN`` without
    a token, 401 ``M_UNKNOWN_TOKEN`` for one unknown or revoked (:meth:`revoke`), 403
    ``M_FORBIDDEN`` for a room the user is not in, 400 ``M_NOT_JSON`` / ``M_BAD_JSON`` (not
    an object, a float, an m.room.message without a string ``msgtype`` and ``body``, a
    ``format`` without ``formatted_body``, a relation to an unknown event), 413
    ``M_TOO_LARGE`` past 65,536 bytes, 429 ``M_LIMIT_EXCEEDED`` with ``retry_after_ms`` and
    Retry-After for the next ``limited`` requests, 500 for the next ``failing``. What it
    took is kept (``messages``, each with the tags a client would drop from its HTML, and
    lines of ``DIR/matrix.jsonl``)."""

    name = "matrix"
    about = "a Matrix homeserver's client API, room !demo:localhost"
    methods = ("PUT", "GET")
    EVENT_MAX = 65536
    USER = "@fleetwatch:localhost"

    def __init__(self, directory: Path | None, port: int, tokens=("syt_demo",),
                 rooms=("!demo:localhost",)):
        self.tokens, self.revoked, self.rooms = set(tokens), set(), set(rooms)
        self.messages: list[dict] = []
        self.requests: list[tuple[str, str]] = []      # (txn id or path, errcode or "ok")
        self.txns: dict[tuple, str] = {}
        self.limited, self.retry_after, self.failing = 0, 1.0, 0
        self.resent = 0         # sends answered with the event of their transaction id
        self.lock = threading.Lock()
        super().__init__(port, directory)

    def revoke(self, token: str) -> None:
        with self.lock:
            self.revoked.add(token)

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        return error(405, "M_UNRECOGNIZED", "Unrecognized request")

    def answer_method(self, method: str, path: str, headers, raw: bytes | None) -> tuple:
        parts = urlsplit(path)
        with self.lock:
            if parts.path == "/_matrix/client/versions" and method == "GET":
                return 200, {"versions": ["v1.11", "v1.12"]}, {}
            found = self._refused(headers, parts.query)
            if found is None and self.limited > 0:
                self.limited -= 1
                found = 429, {"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests",
                              "retry_after_ms": int(self.retry_after * 1000)}, \
                    {"Retry-After": str(max(1, round(self.retry_after)))}
            if found is None and self.failing > 0:
                self.failing -= 1
                found = error(500, "M_UNKNOWN", "Internal server error")
            if found is None:
                found = self._route(method, parts.path, parts.query, headers, raw)
            self.requests.append((parts.path.rpartition("/")[2],
                                  found[1].get("errcode", "ok")))
            return found

    def _token(self, headers, query: str) -> str:
        said = (headers.get("Authorization") or "")
        if said.startswith("Bearer "):
            return said[7:].strip()
        return (parse_qs(query).get("access_token") or [""])[0]

    def _refused(self, headers, query: str):
        token = self._token(headers, query)
        if not token:
            return error(401, "M_MISSING_TOKEN", "Missing access token")
        if token not in self.tokens or token in self.revoked:
            return error(401, "M_UNKNOWN_TOKEN", "Unrecognised access token",
                         soft_logout=False)
        return None

    def _route(self, method: str, path: str, query: str, headers, raw: bytes | None):
        for pattern, want, handle in ((_SEND, "PUT", self._send), (_EVENT, "GET", self._event),
                                      (_MESSAGES, "GET", self._messages)):
            found = pattern.fullmatch(path)
            if found:
                if method != want:
                    return error(405, "M_UNRECOGNIZED", "Unrecognized request")
                room = unquote(found.group(1))
                if not room.startswith("!"):
                    return error(400, "M_INVALID_PARAM", f"{room[:80]} is not a legal room ID")
                if room not in self.rooms:
                    return error(403, "M_FORBIDDEN",
                                 f"User {self.USER} not in room {room[:80]}")
                args = [unquote(g) for g in found.groups()[1:]]
                if pattern is _SEND:
                    return handle(room, *args, self._token(headers, query), raw)
                return handle(room, *args, query)
        return error(404, "M_UNRECOGNIZED", "Unrecognized request")

    def _send(self, room: str, kind: str, txn: str, token: str, raw: bytes | None):
        if raw is None or len(raw) > self.EVENT_MAX:
            return error(413, "M_TOO_LARGE", "event too large")
        known = self.txns.get((token, room, kind, txn))
        if known:
            self.resent += 1
            return 200, {"event_id": known}, {}
        try:
            content = json.loads(raw)
        except ValueError:
            return error(400, "M_NOT_JSON", "Content not JSON.")
        if not isinstance(content, dict):
            return error(400, "M_BAD_JSON", "Content must be a JSON object.")
        problem = canonical(content) or (self._message(room, content)
                                         if kind == "m.room.message" else None)
        if problem:
            return error(400, "M_BAD_JSON", problem)
        digest = hashlib.sha256(f"{room}{kind}{txn}{len(self.messages)}{raw!r}".encode())
        event_id = "$" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")
        entry = {"event_id": event_id, "room_id": room, "type": kind, "sender": self.USER,
                 "origin_server_ts": int(time.time() * 1000), "txn_id": txn,
                 "content": content,
                 "dropped_tags": dropped_tags(str(content.get("formatted_body") or ""))}
        self.messages.append(entry)
        self.txns[(token, room, kind, txn)] = event_id
        self.keep(entry)
        return 200, {"event_id": event_id}, {}

    def _message(self, room: str, content: dict) -> str | None:
        """Why an m.room.message's content is refused (the spec's required fields, a
        relation to an event the room does not have), or None."""
        if not isinstance(content.get("msgtype"), str) or not isinstance(content.get("body"),
                                                                         str):
            return "m.room.message needs a string msgtype and body"
        if "format" in content and (content["format"] != "org.matrix.custom.html" or
                                    not isinstance(content.get("formatted_body"), str)):
            return "format org.matrix.custom.html needs a string formatted_body"
        relates = content.get("m.relates_to")
        if relates is None:
            return None
        if not isinstance(relates, dict):
            return "m.relates_to must be an object"
        reply = relates.get("m.in_reply_to")
        target = reply.get("event_id") if isinstance(reply, dict) else relates.get("event_id")
        if not isinstance(target, str):
            return "m.relates_to without an event_id"
        original = next((m for m in self.messages if m["event_id"] == target), None)
        if original is None or original["room_id"] != room:
            return "Can't send relation to unknown event"
        if relates.get("rel_type") == "m.replace" and (
                original["sender"] != self.USER or
                not isinstance(content.get("m.new_content"), dict)):
            return "an edit needs m.new_content and the original's sender"
        return None

    def _event(self, room: str, event_id: str, query: str):
        for m in self.messages:
            if m["event_id"] == event_id and m["room_id"] == room:
                return 200, {k: m[k] for k in ("event_id", "room_id", "type", "sender",
                                               "origin_server_ts", "content")}, {}
        return error(404, "M_NOT_FOUND", "Event not found.")

    def _messages(self, room: str, query: str):
        limit = (parse_qs(query).get("limit") or ["10"])[0]
        limit = max(1, min(1000, int(limit))) if limit.isdigit() else 10
        chunk = [{k: m[k] for k in ("event_id", "room_id", "type", "sender",
                                    "origin_server_ts", "content")}
                 for m in reversed(self.messages) if m["room_id"] == room][:limit]
        return 200, {"chunk": chunk, "start": "t0", "end": f"t{len(chunk)}"}, {}

    def in_room(self, room: str | None = None) -> list[dict]:
        """The messages sent to ``room`` (any: all), oldest first."""
        with self.lock:
            return [m for m in self.messages if room is None or m["room_id"] == room]

    @classmethod
    def for_demo(cls, directory: Path, port: int) -> "Matrix":
        return cls(directory, port,
                   tokens=((directory / "matrix-token").read_text().strip(),))

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        """The room !demo:localhost, the bot's access token in a file."""
        token = directory / "matrix-token"
        private.write(token, "syt_ZmxlZXR3YXRjaA_demo_token\n")
        return {"type": "matrix", "homeserver": f"http://127.0.0.1:{port}",
                "room": "!demo:localhost", "token_file": str(token), "timeout": 5.0}
