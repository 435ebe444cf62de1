"""The landing files as replay reads them (``fleetwatch tail --since``,
:mod:`fleetwatch.lake.follow`), without Spark: their lines as :class:`Event` objects, in the
lake's order, and which files and tables a replay from a given point must read.

**Order.** The lake's order is the order messages landed: by ``received`` (the history sink's
clock when it wrote the line), then the sender's ``ts``, then msg_id (:func:`order`). A sink
writes a batch with one ``received``: within it, one agent's messages come in the order it sent
them. A sender's ``ts`` alone is not an order: an agent's spooled NOTIFY resent after an outage
has an old ts and still landed after what came before it. Rows compacted before the tables had
``received`` sort by ts.

**Which files.** A landing file is named ``STAMP-SINK-TOKEN.jsonl`` (sinks/history/landing.py):
STAMP is the sink's clock when it opened the file, and a sink opens its next file only after
closing the last one, so every line of a file landed before the stamp of the next file of the
same sink (plus a second, the stamp's rounding). :class:`Files` uses that bound (the *end* of a
file; the newest file of a sink has none) to skip the files that hold nothing at or after a
point, and to tell when the tables must be read: when compaction deleted a landing file
(``processed: delete``: its name is in a manifest, the file in neither ``landing/`` nor
``landing/done/``) whose end is at or after the point, or, in a lake without manifests, when the
point is older than the oldest landing file.

**Lines.** :class:`Reader` reads each file (``*.jsonl``, the live sinks' ``*.jsonl.open``,
``done/``) up to its last complete line, and on the next call only what was appended since
(files are followed by inode, so a file closed or moved to ``done/`` meanwhile is not read
twice). A resent message (``dup``, SPEC 4.2) read there may have landed first in a file skipped
for the point: :meth:`Reader.find` looks for its earlier copies. A line is taken when it is a
JSON object of a type the history sink lands, with a body holding a msg_id, a number ts and the
stamped uuid (or none), as compaction takes it (fleetwatch/lake/tables.py); anything else counts
in ``bad``.
"""

from __future__ import annotations

import json
import math
import os
import re
from calendar import timegm
from dataclasses import dataclass
from time import strptime

from fleetwatch import protocol
from sinks.history.landing import OPEN_SUFFIX, SUFFIX

#: the types the history sink lands (every agent type but DEREGISTER: the lake has no table
#: for it; sinks.history.sink.HistorySink.handles)
LANDED_TYPES = frozenset(protocol.AGENT_TYPES - {"DEREGISTER"})
#: the tables compaction makes of messages (fleetwatch/lake/schema.py TABLE_OF_TYPE)
MESSAGE_TABLES = ("metrics", "heartbeats", "results", "notifications", "registrations")
#: a file's lines landed before the next file of its sink was opened, whose stamp is rounded
#: down to the second: this much is added to that stamp for the file's end
END_SLACK = 2.0
_NAME = re.compile(r"^(\d{8}T\d{6})-(.+)-([0-9A-Za-z]+)\.jsonl(?:\.open)?$")


@dataclass(frozen=True)
class Event:
    """One message of a replay: from the lake (``received``: when it landed; None for a row
    compacted before the tables kept it) or from the live tail (``live``, ``received``
    None). ``body`` is the message as the agent sent it (from a table: the fields the table
    keeps). ``path``: the routers it passed (SPEC 4.10), ``router`` first, the one its
    agent is attached to last; ``(router,)`` when it passed one, or for a row compacted
    before the tables kept the path."""

    msg_id: str
    type: str
    uuid: str
    router: str
    received: float | None
    body: dict
    live: bool = False
    path: tuple[str, ...] = ()

    @property
    def ts(self) -> float | None:
        ts = self.body.get("ts")
        return ts if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None


def order(event: Event) -> tuple[float, float, str]:
    """An event's place in the lake's order: (received, else ts; ts; msg_id)."""
    ts = event.ts if event.ts is not None else 0.0
    return (event.received if event.received is not None else ts, ts, event.msg_id)


def _number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def parse(line: bytes) -> Event | None:
    """The event of one landing line, or None for a line compaction would count as bad."""
    try:
        doc = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    body, type_, uuid, router = doc.get("msg"), doc.get("type"), doc.get("uuid"), doc.get("router")
    received = doc.get("received")
    if (type_ not in LANDED_TYPES or not isinstance(uuid, str) or not isinstance(router, str)
            or not isinstance(body, dict) or not _number(received)):
        return None
    msg_id, ts = body.get("msg_id"), body.get("ts")
    if (not isinstance(msg_id, str) or not msg_id or not _number(ts)
            or not protocol.TS_MIN <= ts < protocol.TS_END
            or body.get("uuid", uuid) != uuid):
        return None
    path = doc.get("path")
    hops = tuple(path.split(",")) if isinstance(path, str) and path else (router,)
    return Event(msg_id, type_, uuid, router, float(received), body, path=hops)


# ---------------------------------------------------------------- files and their bounds

@dataclass(frozen=True)
class FileName:
    name: str
    start: float            # the stamp: the sink's clock when it opened the file
    sink: str


def file_name(name: str) -> FileName | None:
    """A landing file's name read: its stamp and its sink (None: not a landing file name)."""
    match = _NAME.match(name)
    if match is None:
        return None
    try:
        start = float(timegm(strptime(match.group(1), "%Y%m%dT%H%M%S")))
    except ValueError:
        return None
    return FileName(name, start, match.group(2))


def ends(names) -> dict[str, float]:
    """Landing file name -> the time its lines landed before: the next file of the same
    sink's stamp plus :data:`END_SLACK`; infinity for a sink's newest file (or a name that
    says nothing)."""
    by_sink: dict[str, list[FileName]] = {}
    out: dict[str, float] = {}
    for name in names:
        parsed = file_name(name[:-len(OPEN_SUFFIX)] if name.endswith(OPEN_SUFFIX) else name)
        if parsed is None:
            out[name] = math.inf
        else:
            by_sink.setdefault(parsed.sink, []).append(FileName(name, parsed.start, parsed.sink))
    for files in by_sink.values():
        files.sort(key=lambda f: (f.start, f.name))
        for this, after in zip(files, files[1:] + [None]):
            out[this.name] = math.inf if after is None else after.start + END_SLACK
    return out


class Files:
    """The landing files of a lake: those present (``landing/``, ``landing/done/``), those
    compaction processed (named by its manifests), and what a replay from a point reads."""

    def __init__(self, lake: str):
        self.lake = lake
        self.landing = os.path.join(lake, "landing")
        self.done = os.path.join(self.landing, "done")
        self.tables = os.path.join(lake, "tables")
        self.manifests = os.path.join(lake, "_compaction", "manifest")

    def present(self) -> dict[str, str]:
        """name -> path of every landing file there is, open or closed, done or not."""
        out = {}
        for directory in (self.landing, self.done):
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            for name in names:
                if name.endswith((SUFFIX, SUFFIX + OPEN_SUFFIX)):
                    out[name] = os.path.join(directory, name)
        return out

    def compacted(self) -> set[str]:
        """The landing files compaction's manifests name (committed or settled runs)."""
        names: set[str] = set()
        for directory in (self.manifests, os.path.join(self.manifests, "settled")):
            try:
                entries = os.listdir(directory)
            except FileNotFoundError:
                continue
            for entry in entries:
                if not entry.endswith(".json"):
                    continue
                try:
                    with open(os.path.join(directory, entry), encoding="utf-8") as f:
                        names.update(json.load(f).get("landing") or [])
                except (OSError, ValueError, AttributeError):
                    continue
        return names

    def has_tables(self) -> bool:
        return any(os.path.isdir(os.path.join(self.tables, t)) for t in MESSAGE_TABLES)

    def to_read(self, at: float) -> list[str]:
        """Paths of the present files that may hold lines landed at or after ``at``."""
        present = self.present()
        end = ends(present)
        return [path for name, path in sorted(present.items()) if end[name] >= at]

    def needs_tables(self, at: float) -> bool:
        """Whether messages landed at or after ``at`` may be in the tables only."""
        if not self.has_tables():
            return False
        present = self.present()
        compacted = self.compacted()
        if not compacted:       # a lake without manifests: older than its oldest landing file
            starts = [f.start for f in map(file_name, present) if f is not None]
            return not starts or at < min(starts) + END_SLACK
        gone = compacted - set(present)
        end = ends(compacted | set(present))
        return any(end[name] >= at for name in gone)


class Reader:
    """Reads landing files incrementally: each call returns the complete lines appended
    since the last call (files followed by inode across a close or a move to done/)."""

    def __init__(self, files: Files):
        self.files = files
        self.offsets: dict[tuple[int, int], int] = {}
        self.bad = 0

    def read(self, at: float = -math.inf) -> list[Event]:
        events = []
        for path in self.files.to_read(at):
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    key = (st.st_dev, st.st_ino)
                    offset = self.offsets.get(key, 0)
                    if st.st_size <= offset:
                        continue
                    f.seek(offset)
                    data = f.read(st.st_size - offset)
            except FileNotFoundError:       # closed, moved or deleted meanwhile: next time
                continue
            complete = data.rfind(b"\n") + 1
            self.offsets[key] = offset + complete
            for line in data[:complete].split(b"\n")[:-1]:
                event = parse(line)
                if event is None:
                    self.bad += 1
                else:
                    events.append(event)
        return events

    def find(self, msg_ids, paths: list[str] | None = None) -> dict[str, Event]:
        """The first landed copy of each of ``msg_ids`` found in ``paths`` (default: every
        present file), each file read whole, the newest first: the search ends once each
        has a copy that is no resend (its first send)."""
        wanted = set(msg_ids)
        needles = {json.dumps(m).encode(): m for m in wanted}
        found: dict[str, Event] = {}
        paths = self.files.to_read(-math.inf) if paths is None else paths
        for path in sorted(paths, key=os.path.basename, reverse=True):
            if found and len(found) == len(wanted) and \
                    not any(resent(e) for e in found.values()):
                break
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            if not any(needle in data for needle in needles):
                continue
            for line in data[:data.rfind(b"\n") + 1].split(b"\n"):
                if not any(needle in line for needle in needles):
                    continue
                event = parse(line)
                if event is None or event.msg_id not in wanted:
                    continue
                known = found.get(event.msg_id)
                if known is None or first_copy(event, known):
                    found[event.msg_id] = event
        return found

    def skipped(self, at: float) -> list[str]:
        """The present files :meth:`read` skips for ``at`` (all their lines landed before)."""
        reading = set(self.files.to_read(at))
        return [p for p in self.files.to_read(-math.inf) if p not in reading]


def same_copy(a: Event, b: Event) -> bool:
    """Whether ``a`` and ``b`` are one line of the lake (one landing of a message)."""
    return (a.msg_id, a.received, a.router) == (b.msg_id, b.received, b.router)


def first_copy(event: Event, than: Event) -> bool:
    """Whether ``event`` is an earlier copy of a message than ``than``."""
    return (event.received, event.router) < (than.received, than.router)


def resent(event: Event) -> bool:
    """Whether the sender says ``event`` is a resend (SPEC 4.2: ``dup``, ``retry``): an
    earlier copy may have landed."""
    retry = event.body.get("retry")
    return event.body.get("dup") is True or (_number(retry) and retry > 0)
