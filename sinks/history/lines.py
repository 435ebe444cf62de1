"""Landing lines straight from the relayed frames: the history sink's fast path (no I/O here).

Decoding and validating every body cost the history sink two thirds of its time and kept it
at a tenth of a router's relay rate (bench/RESULTS.md "History sink"). So the sink takes the
common loop's raw hook (:mod:`sinks.loop`): :class:`Sorter` looks at each message's frames,
hands the types the sink ACKs (NOTIFY, REGISTER) back to the loop to be decoded, deduplicated
and ACKed as before, and turns every other message into a line without decoding its fields::

    {"msg":BODY,"type":"STATS","uuid":"UUID","router":"ROUTER","received":1795000000.123}

and, for a message that came through sites (SPEC 4.10), ``"path":"ROUTER,SITE,..."`` after
``router`` (the routers it passed, the relaying one first; compaction keeps it in the
tables' ``path`` column, replay and ``fleetwatch tail --since`` show it).

BODY is the body frame as received; the envelope fields come from the ENVELOPE frame (the
router's stamp, checked by :func:`fleetwatch.protocol.parse_path`, cached per frame) and
follow it. A line must stay one line that means what the stamp says, so each body is still
checked, and refused (counted as ``refused_crlf``, ``refused_body``, ``refused_uuid`` or,
for the frames, ``refused_envelope``; logged with throttling; the rest of its batch lands)
unless:

- it holds no CR or LF (Spark's line reader splits on both) and fits ``max_body``;
- it is one JSON object, ending where BODY ends. Spark's JSON reader ignores whatever follows
  the first complete object on a line, so an unchecked body such as
  ``{...},"type":"NOTIFY","uuid":"victim"}`` would close the line's object early with
  envelope fields of its choosing (tests/integration/test_history_raw.py shows Spark doing so). Within
  one object the fields after BODY are the sink's, whatever their order;
- its ``uuid`` is the stamped one (SPEC 4.1: a sink refuses a body claiming another sender).

Most bodies are cleared by a quick look at the bytes that decide where a JSON string or
object ends (:func:`_one_object`, bytes methods only: 40 % of the json scanner's time, a
tenth of a full decode). When the body has no backslash, apostrophe, CR or LF, its quotes
delimit its strings exactly as for Spark (no escapes; its reader's one other string form,
single quotes, is ruled out), so the brackets outside the strings show whether the first
``{`` closes at the last byte; if Spark's reader fails anywhere inside, the whole line is a
corrupt record, never a shorter object. One ``"uuid"`` in the body, followed by the stamped
uuid, settles the third point. What the quick look cannot clear (escapes, brackets or
apostrophes inside strings...) gets the full check: the json module's C scanner, the same
grammar as Spark's reader. This holds for the reader options of
:func:`fleetwatch.lake.tables.read_landing` (comments not allowed).

Everything else (required fields, their types, the ts range, duplicates by msg_id) is
compaction's to check (fleetwatch/lake/tables.py), which counts a bad line and keeps one line
per msg_id.
"""

from __future__ import annotations

import json
import json.scanner
from collections import Counter

from fleetwatch import protocol
from fleetwatch.logs import Throttle
from fleetwatch.protocol import ProtocolError, Relayed

#: ENVELOPE frames remembered (type x agent x router); the cache starts over when full
MAX_ENVELOPES = 65536
#: body shapes remembered (see _one_object); past that, new shapes are worked out each time
MAX_SHAPES = 4096
#: an ENVELOPE whose messages the loop decodes (the sink ACKs their type)
DECODE = "decode"
OPEN = b'{"msg":'

#: every byte but those that decide where a JSON string or object ends (and CR, LF)
_NOT_MARKS = bytes(c for c in range(256) if c not in b'{}[]"\'\\\r\n')
#: one JSON value at a given offset, the json module's own C scanner (no per-call decoder)
_scan = json.scanner.make_scanner(json.JSONDecoder())
#: C encoder for decoded bodies, built once (json.dumps with options builds one per call)
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _one_object(marks: bytes) -> bool:
    """Whether ``marks`` (a body's brackets, quotes, apostrophes, backslashes, CR and LF in
    order, adjacent quote pairs removed) is one ``{...}`` of brackets only, properly nested:
    adjacent ``{}`` and ``[]`` pairs are removed until nothing is left."""
    if marks[:1] != b"{" or marks[-1:] != b"}":
        return False
    marks = marks[1:-1]
    while marks:
        shorter = marks.replace(b"{}", b"").replace(b"[]", b"")
        if len(shorter) == len(marks):
            return False
        marks = shorter
    return True


def tail(type_: str, uuid: str, router: str, path: tuple[str, ...] = ()) -> bytes:
    """What follows BODY on a line, up to ``"received":`` (ids need no JSON quoting, nor
    the commas between them); ``path`` when it names more than the relaying router."""
    hops = f',"path":"{",".join(path)}"' if len(path) > 1 else ""
    return f',"type":"{type_}","uuid":"{uuid}","router":"{router}"{hops}'.encode("ascii")


def landing_data(kept: list[bytes], fresh: list[Relayed], received: float) -> bytes:
    """The lines of one batch: ``kept`` (BODY + tail, from :meth:`Sorter.sort`), then the
    decoded messages ``fresh`` with their bodies re-encoded."""
    items = list(kept)
    for r in fresh:
        msg = r.message
        items.append(_encode(msg.body).encode("utf-8", "surrogatepass")
                     + tail(msg.type, r.uuid, r.router, r.path))
    if not items:
        return b""
    close = f',"received":{received:.3f}}}\n'.encode("ascii")
    return OPEN + (close + OPEN).join(items) + close


class Sorter:
    """Sorts a batch of raw frame lists into lines to write and messages to decode."""

    def __init__(self, handles: frozenset[str], decoded: frozenset[str],
                 counts: Counter, throttle: Throttle, max_body: int = protocol.MAX_BODY):
        self.handles, self.decoded = handles, decoded
        self.counts, self.throttle, self.max_body = counts, throttle, max_body
        #: ENVELOPE frame -> DECODE, or (tail, stamped uuid)
        self.envelopes: dict[bytes, object] = {}
        #: the marks of bodies seen (a few shapes per message type) -> _one_object(marks)
        self.shapes: dict[bytes, bool] = {}

    def sort(self, raw: list[list[bytes]]) -> tuple[list[bytes], list[list[bytes]]]:
        """``(kept, to_decode)``: BODY + tail of each message taken as it is, and the frames
        of those the loop must decode; refused messages are in neither, counted."""
        kept, to_decode = [], []
        envelopes, signature, max_body = self.envelopes, protocol.SIGNATURE, self.max_body
        shapes = self.shapes
        for frames in raw:
            entry = None
            if len(frames) == 3 and frames[0] == signature:
                entry = envelopes.get(frames[1])
            if entry is None:
                entry = self._envelope(frames)
                if entry is None:
                    continue
            if entry is DECODE:
                to_decode.append(frames)
                continue
            body = frames[2]
            line_tail, uuid, claim = entry
            marks = body.translate(None, _NOT_MARKS).replace(b'""', b"")
            shape = shapes.get(marks)
            if shape is None:
                shape = _one_object(marks)
                if len(shapes) < MAX_SHAPES:
                    shapes[marks] = shape
            if (shape and body[:1] == b"{" and body[-1:] == b"}" and len(body) <= max_body
                    and body.count(b'"uuid"') == 1 and claim in body):
                kept.append(body + line_tail)
            elif self._checked(body, uuid):
                kept.append(body + line_tail)
        return kept, to_decode

    def _checked(self, body: bytes, uuid: str) -> bool:
        """The full check of a body the quick one could not clear: one JSON object (the json
        module's C scanner), no CR or LF, the stamped uuid. False: refused, counted."""
        if b"\n" in body or b"\r" in body:
            self._refuse("crlf", "a body holding CR or LF")
            return False
        try:
            if len(body) > self.max_body:
                raise ValueError(f"{len(body)} bytes, over {self.max_body}")
            text = body.decode("utf-8")
            doc, end = _scan(text, 0)
            if end != len(text) or type(doc) is not dict:
                raise ValueError("not one JSON object")
        except (ValueError, StopIteration, RecursionError) as e:   # UnicodeError too
            why = str(e)[:80] if isinstance(e, ValueError) else "no JSON value"
            self._refuse("body", "a body that is not one JSON object (%s)", why)
            return False
        if doc.get("uuid") != uuid:
            self._refuse("uuid", "a body whose uuid is not the sender %s", uuid)
            return False
        return True

    def _envelope(self, frames: list[bytes]):
        """Check SIGNATURE and ENVELOPE the slow way; remember a good ENVELOPE."""
        try:
            if len(frames) != 3:
                raise ProtocolError(protocol.BAD_REQUEST, f"{len(frames)} frames, not 3")
            protocol.check_signature(frames[0])
            type_, uuid, path = protocol.parse_path(frames[1], self.handles)
        except ProtocolError as e:
            self._refuse("envelope", "a message with a bad envelope (%s)", e)
            return None
        claim = f'"uuid":"{uuid}"'.encode("ascii")
        entry = DECODE if type_ in self.decoded else (tail(type_, uuid, path[0], path), uuid,
                                                      claim)
        if len(self.envelopes) >= MAX_ENVELOPES:
            self.envelopes.clear()
        self.envelopes[frames[1]] = entry
        return entry

    def _refuse(self, reason: str, what: str, *args) -> None:
        self.counts[f"refused_{reason}"] += 1
        self.throttle.warning(f"refused_{reason}", "refused " + what + ": dropped", *args)
