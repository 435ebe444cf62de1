"""The fleetwatch wire protocol, version 1: the only code that turns frames into messages.

``SPEC.md`` beside this file is normative; this module implements it. No sockets here:
functions take and return lists of ``bytes`` frames. Wire data is never checked with
``assert``: every defect raises :class:`ProtocolError` carrying the status code a peer
should be answered with.

Frame layouts (see SPEC.md, "Frames"):

===========  ====================================================  ================
socket       frames                                                functions
===========  ====================================================  ================
agents       SIGNATURE, TYPE, BODY                                 encode / decode
sink PUSH    SIGNATURE, ENVELOPE, BODY                             encode_relayed / decode_relayed
control      SIGNATURE, TYPE, TARGET, BODY  (back-end -> router)   encode_control / decode_control
tail PUB     ENVELOPE, SIGNATURE, BODY, SEQ                        topic / decode_tail
sites        SIGNATURE, ENVELOPE, BODY      (site -> central)      decode_relayed
sites        SIGNATURE, TYPE, TARGET, BODY  (central -> site)      encode_down / decode_down
===========  ====================================================  ================

ENVELOPE is ``TYPE/UUID/ROUTER``: the type frame extended with the router's stamp (the
sender's uuid and the relaying router's id). Behind sites (SPEC 4.10) ROUTER is a *path*,
``central-1,site-3``: the routers the message passed, the one that relayed it to the sinks
first (ACKs go to it), the one the agent is attached to last (:func:`parse_path`). It is one
frame so that a router relays three frames, not five (bench/RESULTS.md), and it doubles as
the tail topic, so subscribing to ``NOTIFY/`` or ``NOTIFY/UUID/`` filters on the router. SEQ
numbers what a router published on its tail, per type and per sender, so that a subscriber
learns what it lost (:data:`TAIL_SEQ`, :mod:`fleetwatch.tailgaps`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from fleetwatch import sinktypes

VERSION = 1
#: Frame 0 of every message: a three byte protocol signature then the version byte.
SIGNATURE_PREFIX = b"FWP"
SIGNATURE = SIGNATURE_PREFIX + bytes([VERSION])

#: Largest body a peer may send, unless a router is configured otherwise.
MAX_BODY = 256 * 1024
MAX_ID = 64
#: uuids, router ids and sink names: what may stand between the slashes of an envelope.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")

#: A device's uuid (SPEC 7.2): its poller's uuid, ``@``, the device's slug
DEVICE_SEP = "@"
#: the longest uuid of a poller (an agent's is a UUID's 36 characters): room for any slug
#: within :data:`MAX_ID`
MAX_POLLER = 36
#: a device name that is its own slug; any other is hashed (:func:`device_slug`)
_SLUG = re.compile(r"[A-Za-z0-9._:-]{1,27}")


def device_slug(name: str) -> str:
    """A device's part of its uuid: its name when it matches ``[A-Za-z0-9._:-]{1,27}``, else
    the first 24 hex digits of its name's SHA-256 (stable, and free of ``@`` and ``/``)."""
    if _SLUG.fullmatch(name):
        return name
    import hashlib
    return hashlib.sha256(name.encode()).hexdigest()[:24]


def device_uuid(poller: str, name: str) -> str:
    """The uuid of the device ``name`` polled by the agent ``poller`` (ValueError when the
    poller's uuid leaves no room for it: :data:`MAX_POLLER` characters at most)."""
    if DEVICE_SEP in poller or len(poller) > MAX_POLLER:
        raise ValueError(f"an agent whose uuid is {poller[:64]!r} cannot poll devices: a "
                         f"poller's uuid has at most {MAX_POLLER} characters and no "
                         f"{DEVICE_SEP!r}")
    return f"{poller}{DEVICE_SEP}{device_slug(name)}"


def poller_of(uuid: str) -> str | None:
    """The poller a device's uuid names (the part before its one ``@``), None for any
    other uuid."""
    poller, sep, slug = uuid.partition(DEVICE_SEP)
    return poller if sep and poller and slug and DEVICE_SEP not in slug else None

# Status codes (SPEC.md, "Status codes").
OK = 200
ACCEPTED = 202
BAD_REQUEST = 400
HELLO_REQUIRED = 401
FORBIDDEN = 403
NOT_FOUND = 404
NOT_ALLOWED = 405
TOO_LARGE = 413
RATE_LIMITED = 429
INTERNAL = 500
UNAVAILABLE = 503
VERSION_NOT_SUPPORTED = 505

STATUS_TEXT = {
    OK: "ok",
    ACCEPTED: "accepted",
    BAD_REQUEST: "bad request",
    HELLO_REQUIRED: "hello required",
    FORBIDDEN: "forbidden",
    NOT_FOUND: "not found",
    NOT_ALLOWED: "not allowed here",
    TOO_LARGE: "too large",
    RATE_LIMITED: "rate limited",
    INTERNAL: "internal error",
    UNAVAILABLE: "unavailable",
    VERSION_NOT_SUPPORTED: "protocol version not supported",
}

SEVERITIES = ("debug", "info", "warning", "error", "critical")

#: Times a receiver takes (``ts``, RESULT ``started``; SPEC 4): epoch seconds from
#: 1970-01-01T00:00:00Z up to, not including, 10000-01-01T00:00:00Z. A wrong but dated clock
#: passes; a number no date can show does not.
TS_MIN = 0.0
TS_END = 253402300800.0

_NUMBER = (int, float)
_STR = (str,)
_LIST = (list,)
_DICT = (dict,)
_BOOL = (bool,)

# type -> {field: (accepted python types, required)}. Common fields are checked for all.
_COMMON = {
    "msg_id": (_STR, True),
    "uuid": (_STR, True),
    "ts": (_NUMBER, True),
    "retry": ((int,), False),
    "dup": (_BOOL, False),
}
SCHEMAS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "HELLO": {
        "hostname": (_STR, True),
        "heartbeat": (_NUMBER, True),
        "version": (_STR, False),
        "role": (_STR, False),
        "sink": (_STR, False),
        "plugins": (_LIST, False),
        "instance": (_STR, False),
        "ephemeral": (_BOOL, False),
    },
    "WELCOME": {
        "router": (_STR, True),
        "routers": (_LIST, True),
        "endpoints": (_DICT, False),
        "durable": (_DICT, False),
        "members": (_LIST, False),
    },
    "HEARTBEAT": {"name": (_STR, False), "interval": (_NUMBER, False)},
    "STATS": {"metrics": (_DICT, True), "hostname": (_STR, False), "source": (_STR, False),
              "drops": (_LIST, False)},
    "NOTIFY": {"severity": (_STR, True), "text": (_STR, True), "source": (_STR, False)},
    "ACK": {"msg_ids": (_LIST, True), "sink": (_STR, False)},
    "REGISTER": {
        "name": (_STR, True),
        "plugins": (_LIST, False),
        "heartbeat": (_NUMBER, False),
        "hostname": (_STR, False),
        "version": (_STR, False),
        "ephemeral": (_BOOL, False),
    },
    "DEREGISTER": {"reason": (_STR, False)},
    "RUN": {"command_id": (_STR, True), "plugin": (_STR, True), "timeout": (_NUMBER, False),
            "slot": (_NUMBER, False)},
    "RESULT": {
        "command_id": (_STR, True),
        "plugin": (_STR, True),
        "status": ((int,), True),
        "output": (_STR, True),
        "long_output": (_STR, False),
        "perfdata": (_LIST, False),
        "slot": (_NUMBER, False),
        "started": (_NUMBER, False),
        "duration": (_NUMBER, False),
        "boot": (_STR, False),
        "seq": (_NUMBER, False),
    },
    "PEERS": {"agents": (_LIST, False), "router": (_STR, False), "after": (_STR, False),
              "limit": ((int,), False), "total": ((int,), False), "next": (_STR, False),
              "sinks": (_DICT, False), "durable": (_DICT, False)},
    "MEMBERS": {"router": (_STR, False), "routers": (_LIST, False)},
    "ATTACHED": {"router": (_STR, False), "uuids": (_LIST, False), "attached": (_DICT, False),
                 "ref": (_STR, False)},
    "ERROR": {"status": ((int,), True), "reason": (_STR, True), "ref": (_STR, False)},
}
TYPES = frozenset(SCHEMAS)
TYPE_FRAMES = frozenset(t.encode() for t in TYPES)

#: Most routers an envelope's path names (SPEC 4.10: a tree of sites at most this deep)
MAX_PATH = 8
#: Longest ENVELOPE frame: a type, a uuid and a path of MAX_PATH ids
MAX_ENVELOPE = 16 + (MAX_PATH + 1) * (MAX_ID + 1)

#: Most agents one PEERS answer lists (SPEC 4.3); its body also stays within MAX_BODY.
PEERS_PAGE = 1000

#: What an agent may send on the agents socket, and what the router relays to sinks.
AGENT_TYPES = frozenset({"HELLO", "HEARTBEAT", "STATS", "NOTIFY", "REGISTER", "RESULT",
                         "DEREGISTER"})
#: What a central router sends down a site link (SPEC 4.10): its answers to the link, and
#: ACK, RUN and ERROR for an agent behind the site (TARGET).
DOWN_TYPES = frozenset({"WELCOME", "HEARTBEAT", "ERROR", "ACK", "RUN"})
#: What a back-end client may send on the control socket.
CONTROL_TYPES = frozenset({"HELLO", "ACK", "RUN", "PEERS", "STATS", "MEMBERS", "ATTACHED"})
#: Most uuids one ATTACHED request names (SPEC 4.10)
MAX_ATTACHED = 1000

#: The sink type owning each type an agent spools until ACKed (SPEC 4.2): what it waits for
#: when no router said otherwise, and the type an ACK without ``sink`` is taken to come from.
#: This and the next are derived from the table of sink types (:mod:`fleetwatch.sinktypes`).
ACK_OWNERS = sinktypes.owners()
#: The sink types that ACK each spooled type (SPEC 4.2): the ones a route can make durable.
#: By default each is durable wherever the routing table sends the type (SPEC 4.1).
ACKING_SINKS = sinktypes.acking()


class ProtocolError(Exception):
    """A frame list that is not a valid v1 message; ``status`` says how to answer."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Message:
    """One decoded message: its type and its JSON body (with msg_id, uuid and ts)."""

    type: str
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def msg_id(self) -> str:
        return self.body["msg_id"]

    @property
    def uuid(self) -> str:
        return self.body["uuid"]

    @property
    def ts(self) -> float:
        return self.body["ts"]

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)


@dataclass(frozen=True)
class Relayed:
    """A message as a sink receives it: stamped by the router with the sender's uuid. From
    a tail, ``seq``: the router's numbers of it among what it published of its type, and of
    its type from its sender (SPEC 4.1, "The tail"); None from a router older than them."""

    uuid: str
    router: str
    message: Message
    seq: tuple[int, int] | None = None
    #: the routers the message passed (SPEC 4.10), ``router`` first; () when it passed one
    path: tuple[str, ...] = ()


def new_id() -> str:
    """A fresh msg_id: 32 lowercase hex digits (random: a fifth of uuid4().hex's cost, paid
    for each answer a router makes)."""
    return os.urandom(16).hex()


def make(type_: str, uuid: str, clock=time.time, msg_id: str | None = None, **fields) -> Message:
    """Build a message with the common fields filled in; ``fields`` are type specific."""
    body = {"msg_id": msg_id or new_id(), "uuid": uuid, "ts": clock()}
    body.update({k: v for k, v in fields.items() if v is not None})
    return Message(type_, body)


def resend(msg: Message, retry: int) -> Message:
    """The same message marked as a possible duplicate with its retry count."""
    body = dict(msg.body)
    body["retry"] = retry
    body["dup"] = True
    return Message(msg.type, body)


def error(status: int, reason: str = "", ref: str | None = None, uuid: str = "unknown") -> Message:
    """An ERROR reply; ``uuid`` is the replying process's id (a router's id).

    The default must match ID_PATTERN, or the ERROR would not decode ("-" does not).
    """
    return make("ERROR", uuid, status=status, reason=reason or STATUS_TEXT.get(status, ""), ref=ref)


# ---------------------------------------------------------------- header checks

def check_signature(frame: bytes) -> None:
    """Raise unless ``frame`` is this protocol's signature at this version."""
    if frame == SIGNATURE:
        return
    if len(frame) == len(SIGNATURE) and frame[:3] == SIGNATURE_PREFIX:
        raise ProtocolError(VERSION_NOT_SUPPORTED, f"version {frame[3]} not supported, speak {VERSION}")
    raise ProtocolError(BAD_REQUEST, "not a fleetwatch message (bad signature)")


def check_type(frame: bytes, allowed: frozenset[str] = TYPES) -> str:
    try:
        name = frame.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError(BAD_REQUEST, "type frame is not ASCII") from None
    if name not in TYPES:
        raise ProtocolError(BAD_REQUEST, f"unknown message type {name[:16]!r}")
    if name not in allowed:
        raise ProtocolError(NOT_ALLOWED, f"{name} not accepted here")
    return name


# ---------------------------------------------------------------- bodies

def encode_body(msg: Message) -> bytes:
    return json.dumps(msg.body, separators=(",", ":"), allow_nan=False).encode()


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_MAX_FLOAT_INT = int(sys.float_info.max)
# A \uD800-\uDFFF escape: valid JSON syntax, but a lone one is no Unicode character.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")


def _parse_float(text: str) -> float:
    # 1e400 parses to inf, which encode_body cannot write back: refuse it like Infinity.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:32]} is out of range")
    return value


def _parse_int(text: str) -> int:
    # An integer past the double range makes math.isfinite() raise OverflowError.
    value = int(text)
    if abs(value) > _MAX_FLOAT_INT:
        raise ValueError(f"number {text[:32]}... is out of range")
    return value


def decode_body(type_: str, data: bytes, max_body: int = MAX_BODY) -> Message:
    """Parse and validate a body for ``type_`` (already checked to be a known type)."""
    if len(data) > max_body:
        raise ProtocolError(TOO_LARGE, f"body of {len(data)} bytes exceeds {max_body}")
    try:
        # Decode as UTF-8 here: json.loads(bytes) would also accept UTF-16 and UTF-32.
        body = json.loads(data.decode("utf-8"), parse_constant=_reject_constant,
                          parse_float=_parse_float, parse_int=_parse_int)
        if _SURROGATE_ESCAPE.search(data):
            json.dumps(body, ensure_ascii=False).encode("utf-8")  # lone surrogates raise
    except (ValueError, RecursionError) as e:
        reason = f"body is not valid UTF-8 JSON ({str(e)[:80]})"
        raise ProtocolError(BAD_REQUEST, reason) from None
    if not isinstance(body, dict):
        raise ProtocolError(BAD_REQUEST, "body is not a JSON object")
    _check_fields(body, _COMMON, type_)
    _check_fields(body, SCHEMAS[type_], type_)
    _check_values(type_, body)
    return Message(type_, body)


def _check_fields(body: dict, schema: dict, type_: str) -> None:
    for name, (types, required) in schema.items():
        if name not in body:
            if required:
                raise ProtocolError(BAD_REQUEST, f"{type_}: missing field {name!r}")
            continue
        value = body[name]
        # bool is an int in Python; on the wire a boolean is never a number.
        if isinstance(value, bool) and bool not in types:
            raise ProtocolError(BAD_REQUEST, f"{type_}: field {name!r} has the wrong type")
        if not isinstance(value, types):
            raise ProtocolError(BAD_REQUEST, f"{type_}: field {name!r} has the wrong type")


def _check_values(type_: str, body: dict) -> None:
    if not 0 < len(body["msg_id"]) <= MAX_ID:
        raise ProtocolError(BAD_REQUEST, f"{type_}: msg_id must be 1 to {MAX_ID} characters")
    if not ID_PATTERN.fullmatch(body["uuid"]):
        raise ProtocolError(BAD_REQUEST, f"{type_}: uuid must be 1 to {MAX_ID} letters, digits "
                                         f"or ._:@- (not starting with a sign)")
    for name in ("ts", "started") if type_ == "RESULT" else ("ts",):
        if name in body and not TS_MIN <= body[name] < TS_END:      # also false for NaN
            raise ProtocolError(BAD_REQUEST, f"{type_}: {name} {body[name]!r:.32} is not a time "
                                             f"from 1970 to 9999 (epoch seconds, UTC)")
    if body.get("retry", 0) < 0:
        raise ProtocolError(BAD_REQUEST, f"{type_}: retry is negative")
    if type_ == "NOTIFY" and body["severity"] not in SEVERITIES:
        raise ProtocolError(BAD_REQUEST, f"NOTIFY: severity must be one of {', '.join(SEVERITIES)}")
    elif type_ == "STATS":
        for key, value in body["metrics"].items():
            if isinstance(value, bool) or not isinstance(value, _NUMBER) or not math.isfinite(value):
                raise ProtocolError(BAD_REQUEST, f"STATS: metric {key[:64]!r} is not a finite number")
    elif type_ == "ACK":
        if not all(isinstance(m, str) for m in body["msg_ids"]):
            raise ProtocolError(BAD_REQUEST, "ACK: msg_ids must be strings")
    elif type_ == "WELCOME":
        if not all(isinstance(r, str) for r in body["routers"]):
            raise ProtocolError(BAD_REQUEST, "WELCOME: routers must be strings")
        if not all(isinstance(m, dict) for m in body.get("members", ())):
            raise ProtocolError(BAD_REQUEST, "WELCOME: members must be objects")
    elif type_ == "MEMBERS":
        # each entry is checked by the receiver, which skips (and counts) a malformed one
        # (router/members.py, SPEC 4.9); the list as a whole is bounded there too
        if not all(isinstance(r, dict) for r in body.get("routers", ())):
            raise ProtocolError(BAD_REQUEST, "MEMBERS: routers must be objects")
    elif type_ == "ATTACHED":
        uuids = body.get("uuids", ())
        if len(uuids) > MAX_ATTACHED or not all(
                isinstance(u, str) and len(u) <= MAX_ID for u in uuids):
            raise ProtocolError(BAD_REQUEST, f"ATTACHED: uuids must be at most {MAX_ATTACHED} "
                                             f"ids")
    elif type_ == "HELLO":
        if not body["heartbeat"] > 0:
            raise ProtocolError(BAD_REQUEST, "HELLO: heartbeat must be a positive interval")
    elif type_ == "PEERS":
        for name in ("limit", "total"):
            if body.get(name, 0) < 0:
                raise ProtocolError(BAD_REQUEST, f"PEERS: {name} is negative")
    elif type_ == "RESULT":
        if not 0 <= body["status"] <= 3:
            raise ProtocolError(BAD_REQUEST, "RESULT: status must be 0 to 3")
        if not 0 < len(body.get("boot", "-")) <= MAX_ID:
            raise ProtocolError(BAD_REQUEST, f"RESULT: boot must be 1 to {MAX_ID} characters")
        if not 0 <= body.get("seq", 0) < 2 ** 53:             # also false for NaN
            raise ProtocolError(BAD_REQUEST, "RESULT: seq must be a number from 0 to 2^53")


def peers_page(router: str, entries, total: int, limit: int = PEERS_PAGE, clock=time.time,
               max_body: int = MAX_BODY, fleet: dict | None = None) -> Message:
    """A PEERS answer (SPEC 4.3): the first of ``entries`` (PEERS entries in uuid order,
    an iterator read no further than needed) up to ``limit`` (at most PEERS_PAGE) and as
    many as keep the body within ``max_body``; ``next`` names the last one listed when
    more follow. ``total`` is the number of agents attached. ``fleet``: the router's
    ``sinks`` and ``durable`` (4.3), added as they are.

    The page is encoded once to learn its size; one over ``max_body`` (long hostnames) is
    cut in proportion and encoded again, so a page costs a few encodings at most.
    """
    limit = max(0, min(limit, PEERS_PAGE))
    page = list(itertools.islice(entries, limit + 1))
    more = len(page) > limit
    del page[limit:]
    while True:
        msg = make("PEERS", router, clock, router=router, total=total, agents=page,
                   next=page[-1]["uuid"] if more and page else None, **(fleet or {}))
        size = len(encode_body(msg))
        if size <= max_body or len(page) <= 1:
            return msg
        keep = min(len(page) - 1, max(1, len(page) * max_body // size - 1))
        del page[keep:]
        more = True


# ---------------------------------------------------------------- agents socket

def encode(msg: Message) -> list[bytes]:
    """Frames for the agents socket and for replies to any peer: SIGNATURE, TYPE, BODY."""
    return [SIGNATURE, msg.type.encode(), encode_body(msg)]


def decode(frames: list[bytes], allowed: frozenset[str] = TYPES, max_body: int = MAX_BODY) -> Message:
    """Decode SIGNATURE, TYPE, BODY (routing frames already removed)."""
    if len(frames) != 3:
        raise ProtocolError(BAD_REQUEST, f"expected 3 frames, got {len(frames)}")
    check_signature(frames[0])
    return decode_body(check_type(frames[1], allowed), frames[2], max_body)


# ---------------------------------------------------------------- relayed to sinks

def envelope(type_: str, uuid: str, router: str) -> bytes:
    """The ENVELOPE frame: ``TYPE/UUID/ROUTER`` (routers build it from frames, cached)."""
    return f"{type_}/{uuid}/{router}".encode()


def parse_envelope(frame: bytes, allowed: frozenset[str] = TYPES) -> tuple[str, str, str]:
    """Split an ENVELOPE frame into (type, uuid, router), checking each part; ``router`` is
    the first id of a path (SPEC 4.10: the router that relayed it to the sinks)."""
    type_, uuid, path = parse_path(frame, allowed)
    return type_, uuid, path[0]


def parse_path(frame: bytes, allowed: frozenset[str] = TYPES) -> tuple[str, str, tuple[str, ...]]:
    """Split an ENVELOPE frame into (type, uuid, path): ``path`` the routers it passed, the
    relaying router first, at most MAX_PATH of them (SPEC 4.10)."""
    if len(frame) > MAX_ENVELOPE:
        raise ProtocolError(BAD_REQUEST, "envelope frame too long")
    parts = frame.split(b"/")
    if len(parts) != 3:
        raise ProtocolError(BAD_REQUEST, "envelope frame is not TYPE/UUID/ROUTER")
    type_ = check_type(parts[0], allowed)
    hops = parts[2].split(b",")
    if len(hops) > MAX_PATH:
        raise ProtocolError(BAD_REQUEST, f"envelope path names more than {MAX_PATH} routers")
    return type_, _ascii_id(parts[1], "uuid"), tuple(_ascii_id(h, "router") for h in hops)


def stamped(frame: bytes, router: bytes) -> bytes:
    """The ENVELOPE ``frame`` (already checked: :func:`parse_path`) as ``router`` relays it
    on: its id put first in the path (SPEC 4.10)."""
    head, _, path = frame.rpartition(b"/")
    return b"".join((head, b"/", router, b",", path))


def encode_relayed(msg: Message, uuid: str, router: str) -> list[bytes]:
    """Frames a router pushes to a sink (routers build these without the codec, for speed)."""
    return [SIGNATURE, envelope(msg.type, uuid, router), encode_body(msg)]


def decode_relayed(frames: list[bytes], allowed: frozenset[str] = TYPES,
                   max_body: int = MAX_BODY) -> Relayed:
    """Decode SIGNATURE, ENVELOPE, BODY; the stamped uuid must match the body's uuid."""
    if len(frames) != 3:
        raise ProtocolError(BAD_REQUEST, f"expected 3 frames, got {len(frames)}")
    check_signature(frames[0])
    type_, uuid, path = parse_path(frames[1], allowed)
    msg = decode_body(type_, frames[2], max_body)
    if msg.uuid != uuid:
        raise ProtocolError(FORBIDDEN, f"body uuid {msg.uuid[:MAX_ID]!r} is not the sender {uuid!r}")
    return Relayed(uuid, path[0], msg, path=path if len(path) > 1 else ())


#: the roles of the processes whose own counters a STATS may carry besides agents (SPEC 4.3)
REPORTERS = frozenset({"router", "sink", "scheduler"})


def number(value) -> float | None:
    """``value`` as a float when it is a finite number (an int or a float, never a bool),
    else None: how a reader takes a number from a decoded body, a router's answer or a row,
    whatever the sender put there."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def reporter(relayed: Relayed) -> str | None:
    """Whose own counters a relayed STATS carries, from the router's stamp (SPEC 4.3): None
    for an agent's, whatever its body says. An agent's stamped uuid is never the last id of
    the path (the router it attached to, which refuses its own id as a uuid); a router's
    own STATS is stamped with its own id (``STATS/ID/ID``), a back-end's from control with
    its id ending the path (``STATS/ID/ROUTER,ID``). For those, the role is the body's
    ``source``, which the router checked (control takes ``sink`` and ``scheduler`` only)."""
    path = relayed.path or (relayed.router,)
    if relayed.uuid != path[-1]:
        return None
    if len(path) == 1:
        return "router"
    source = relayed.message.get("source")
    return source if source in REPORTERS else None


def _ascii_id(frame: bytes, what: str) -> str:
    try:
        text = frame.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError(BAD_REQUEST, f"{what} is not ASCII") from None
    if not ID_PATTERN.fullmatch(text):
        raise ProtocolError(BAD_REQUEST, f"{what} must be 1 to {MAX_ID} letters, digits or ._:@-")
    return text


# ---------------------------------------------------------------- control socket

def encode_control(msg: Message, target: str = "") -> list[bytes]:
    """Frames a back-end client sends to a router's control socket.

    ``target`` is the uuid of the agent to forward to (ACK, RUN), or empty for requests to
    the router itself (HELLO, PEERS).
    """
    return [SIGNATURE, msg.type.encode(), target.encode(), encode_body(msg)]


def decode_control(frames: list[bytes], max_body: int = MAX_BODY) -> tuple[str, Message]:
    """Decode SIGNATURE, TYPE, TARGET, BODY as a router receives it (routing id removed)."""
    return _decode_targeted(frames, CONTROL_TYPES, max_body)


def _decode_targeted(frames: list[bytes], allowed: frozenset[str],
                     max_body: int) -> tuple[str, Message]:
    """SIGNATURE, TYPE, TARGET, BODY: TARGET an id or empty, and an id for ACK and RUN."""
    if len(frames) != 4:
        raise ProtocolError(BAD_REQUEST, f"expected 4 frames, got {len(frames)}")
    check_signature(frames[0])
    type_ = check_type(frames[1], allowed)
    target = _ascii_id(frames[2], "target") if frames[2] else ""
    if type_ in ("ACK", "RUN") and not target:
        raise ProtocolError(BAD_REQUEST, f"{type_} needs a target uuid")
    return target, decode_body(type_, frames[3], max_body)


# ---------------------------------------------------------------- site links

#: Frames a central router sends down a site link (SPEC 4.10): SIGNATURE, TYPE, TARGET,
#: BODY, as a control request's; ``target`` the agent's uuid, empty for the link's own.
encode_down = encode_control


def decode_down(frames: list[bytes], max_body: int = MAX_BODY) -> tuple[str, Message]:
    """Decode SIGNATURE, TYPE, TARGET, BODY as a site router's uplink receives it."""
    return _decode_targeted(frames, DOWN_TYPES, max_body)


# ---------------------------------------------------------------- tail

def topic(type_: str, uuid: str = "") -> bytes:
    """A tail subscription: ``TYPE/`` for a type, ``TYPE/UUID/`` for one agent's messages.

    Tail messages start with their ENVELOPE, so these are prefixes of it.
    """
    return f"{type_}/{uuid}/".encode() if uuid else f"{type_}/".encode()


#: the tail's SEQ frame: the message's number among what the router published of its type,
#: then among what it published of its type from its sender; unsigned, big-endian, from 1
TAIL_SEQ = struct.Struct(">QQ")


def decode_tail(frames: list[bytes]) -> Relayed:
    """Decode ENVELOPE, SIGNATURE, BODY, SEQ as published on a router's tail (without SEQ:
    a router older than it)."""
    if len(frames) not in (3, 4):
        raise ProtocolError(BAD_REQUEST, f"expected 4 frames, got {len(frames)}")
    relayed = decode_relayed([frames[1], frames[0], frames[2]])
    if len(frames) == 3:
        return relayed
    if len(frames[3]) != TAIL_SEQ.size:
        raise ProtocolError(BAD_REQUEST, f"SEQ must be {TAIL_SEQ.size} octets, "
                                         f"got {len(frames[3])}")
    return Relayed(relayed.uuid, relayed.router, relayed.message, TAIL_SEQ.unpack(frames[3]),
                   relayed.path)


def encode_tail(msg: Message, uuid: str, router: str,
                seq: tuple[int, int] | None = None) -> list[bytes]:
    """Frames a router publishes on its tail (for tests and tools; routers build them)."""
    frames = [envelope(msg.type, uuid, router), SIGNATURE, encode_body(msg)]
    return frames if seq is None else frames + [TAIL_SEQ.pack(*seq)]
