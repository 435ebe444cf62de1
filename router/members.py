"""The member table: which routers are live, learnt by gossip (SPEC 4.9).

Each router keeps one entry per router it has heard of: its id, its ``agents``, ``control``
and ``tail`` endpoints, its ``incarnation`` (the microsecond it started at: a restart has a
larger one) and its ``beat`` (a count the router itself raises every gossip interval). The
pair (incarnation, beat) orders what is said of a router: an entry heard from anyone wins
over the one kept when its pair is larger, and the router's beat is then said to have
*advanced* (at the receiver's clock). A member whose beat has not advanced for
``expire_intervals`` intervals is dead: out of the live set, kept as a tombstone (its last
pair) until ``forget_after`` seconds have passed since its beat last advanced (a day by
default: ``fleetwatch status`` and the console list it as a router DOWN meanwhile, so that a
router that died at night is still a problem in the morning), so that stale gossip of a
lower pair cannot bring it back; only a larger pair does. A tombstone learnt from another
router's list ages from that list's ``age`` (how long ago its beat advanced there), so that
the mesh forgets it at about the same time everywhere and gossip does not keep it alive. A
full table makes room for a live router by forgetting its oldest tombstone. A ``dead`` flag from another router for a member this one still hears
advancing changes nothing here (its own observation wins), and what others say of this
router's own id is never taken (a larger incarnation under it is another process with the
same id: counted, logged).

Pure logic: no sockets; times come from an injected ``clock`` (monotonic seconds). The
relay's :class:`router.mesh.Mesh` ticks it, feeds it the ``routers`` lists of MEMBERS
requests and answers, and asks it what to say.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from fleetwatch.protocol import ID_PATTERN

log = logging.getLogger(__name__)

#: the endpoints a member entry carries (SPEC 4.9)
ENDPOINTS = ("agents", "control", "tail")
#: most routers a table keeps, live and dead (a MEMBERS list at most as long): 256 entries
#: of the longest endpoints fit one body of 262,144 octets
MAX_MEMBERS = 256
#: longest endpoint an entry may carry
MAX_ENDPOINT = 255
#: largest incarnation or beat (2**53: every JSON reader holds it exactly)
MAX_COUNT = 2 ** 53
#: seconds a dead router is kept (a tombstone, listed DOWN) after its beat last advanced
FORGET_AFTER = 86_400.0


@dataclass
class Member:
    """One router as this router knows it. ``advanced``: when its beat last advanced here
    (the table's clock); ``died``: when it was found dead (None while live)."""

    id: str
    endpoints: dict[str, str]
    incarnation: int
    beat: int
    advanced: float
    died: float | None = None

    @property
    def live(self) -> bool:
        return self.died is None

    @property
    def pair(self) -> tuple[int, int]:
        return self.incarnation, self.beat

    def as_wire(self, now: float) -> dict:
        """Its MEMBERS entry: ``age`` is how long ago its beat advanced here (s)."""
        entry = {"id": self.id, "endpoints": dict(self.endpoints),
                 "incarnation": self.incarnation, "beat": self.beat,
                 "age": round(max(0.0, now - self.advanced), 3)}
        if not self.live:
            entry["dead"] = True
        return entry

    def as_listing(self) -> dict:
        """Its WELCOME ``members`` entry."""
        return {"id": self.id, **self.endpoints}


@dataclass(frozen=True)
class Entry:
    """A MEMBERS entry as received, checked (:func:`parse_entry`)."""

    id: str
    endpoints: dict[str, str]
    incarnation: int
    beat: int
    dead: bool = False
    #: seconds since its beat advanced, as the sender said (0 when it did not)
    age: float = 0.0

    @property
    def pair(self) -> tuple[int, int]:
        return self.incarnation, self.beat


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT


def parse_entry(raw) -> Entry | None:
    """A MEMBERS ``routers`` entry (SPEC 4.9), or None when it is not one: ``id`` an id,
    ``endpoints`` an object with ``agents``, ``control`` and ``tail`` each a string of 1 to
    255 characters (other keys ignored), ``incarnation`` and ``beat`` integers from 0 below
    2**53, ``dead`` a boolean if present, ``age`` a number of seconds if present (else 0).
    Other fields are ignored."""
    if not isinstance(raw, dict):
        return None
    ident, endpoints = raw.get("id"), raw.get("endpoints")
    if not isinstance(ident, str) or not ID_PATTERN.fullmatch(ident):
        return None
    if not isinstance(endpoints, dict):
        return None
    kept = {}
    for name in ENDPOINTS:
        value = endpoints.get(name)
        if not isinstance(value, str) or not 0 < len(value) <= MAX_ENDPOINT:
            return None
        kept[name] = value
    incarnation, beat, dead = raw.get("incarnation"), raw.get("beat"), raw.get("dead", False)
    if not _count(incarnation) or not _count(beat) or not isinstance(dead, bool):
        return None
    age = raw.get("age", 0.0)
    age = float(age) if isinstance(age, (int, float)) and not isinstance(age, bool) \
        and 0 <= age < MAX_COUNT else 0.0
    return Entry(ident, kept, incarnation, beat, dead, age)


@dataclass
class Merged:
    """What one merge did: ids that joined (or came back), live ones whose endpoints
    changed (a restart elsewhere), and the entries skipped."""

    joined: list[str]
    moved: list[str] = field(default_factory=list)
    bad: int = 0
    full: int = 0
    impostor: int = 0


class Members:
    """The member table of router ``own_id`` (its ``endpoints``, its ``incarnation``),
    gossiping every ``interval`` seconds, a member dead after ``expire_intervals`` of them
    without its beat advancing."""

    def __init__(self, own_id: str, endpoints: dict[str, str], incarnation: int,
                 interval: float = 1.0, expire_intervals: int = 5, clock=time.monotonic,
                 max_members: int = MAX_MEMBERS, forget_after: float = FORGET_AFTER):
        self.clock = clock
        self.interval, self.expire_intervals = interval, expire_intervals
        #: seconds after its beat last advanced that a tombstone is forgotten (at least
        #: three expiries: a tombstone outlives the gossip that could revive it)
        self.forget_after = max(forget_after, 3 * self.expiry)
        self.max_members = max_members
        self.own = Member(own_id, {k: endpoints[k] for k in ENDPOINTS}, incarnation, 0,
                          clock())
        #: id -> Member, this router's own included (never dead)
        self.table: dict[str, Member] = {own_id: self.own}

    @property
    def expiry(self) -> float:
        """Seconds without an advancing beat after which a member is dead."""
        return self.expire_intervals * self.interval

    def __len__(self) -> int:
        return sum(1 for m in self.table.values() if m.live)

    def get(self, ident: str) -> Member | None:
        return self.table.get(ident)

    def dead(self) -> list[Member]:
        return [m for m in self.table.values() if not m.live]

    def live(self) -> list[Member]:
        """The live set: this router first, then the others by id."""
        others = sorted((m for m in self.table.values() if m.live and m is not self.own),
                        key=lambda m: m.id)
        return [self.own, *others]

    def tick(self) -> None:
        """One interval passed: this router's own beat advances."""
        self.own.beat += 1
        self.own.advanced = self.clock()

    # ---------------------------------------------------------------- what is said
    def entries(self) -> list[dict]:
        """The ``routers`` of a MEMBERS this router sends: every live member, itself
        first, then the tombstones (``dead``)."""
        now = self.clock()
        return [m.as_wire(now) for m in self.live()] + \
            [m.as_wire(now) for m in sorted(self.dead(), key=lambda m: m.id)]

    def listing(self) -> list[dict]:
        """WELCOME ``members``: the live set as {id, agents, control, tail}."""
        return [m.as_listing() for m in self.live()]

    # ---------------------------------------------------------------- what is heard
    def merge(self, raw_entries) -> Merged:
        """Take a MEMBERS ``routers`` list (already checked to be a list)."""
        now = self.clock()
        merged = Merged([])
        for raw in raw_entries:
            entry = parse_entry(raw)
            if entry is None:
                merged.bad += 1
                continue
            if entry.id == self.own.id:
                if entry.incarnation > self.own.incarnation:
                    merged.impostor += 1       # (logged by the caller, throttled)
                continue
            known = self.table.get(entry.id)
            if known is None:
                if entry.dead and entry.age >= self.forget_after:
                    continue                        # forgotten already
                if len(self.table) >= self.max_members and (entry.dead or not self._room()):
                    merged.full += 1
                    continue
                member = Member(entry.id, entry.endpoints, entry.incarnation, entry.beat,
                                now - entry.age if entry.dead else now,
                                None if not entry.dead else now)
                self.table[entry.id] = member
                if member.live:
                    merged.joined.append(entry.id)
                    log.info("router %s joined (control %s, incarnation %d)", entry.id,
                             entry.endpoints["control"], entry.incarnation)
                continue
            if entry.pair <= known.pair:
                continue
            known.incarnation, known.beat = entry.incarnation, entry.beat
            if known.endpoints != entry.endpoints:
                if known.live:
                    merged.moved.append(entry.id)
                    log.info("router %s moved: control %s (incarnation %d)", entry.id,
                             entry.endpoints["control"], entry.incarnation)
                known.endpoints = entry.endpoints
            if entry.dead:
                # a later pair said dead: it cannot be revived by what is older, but it
                # does not make a member this router hears advancing dead either
                continue
            known.advanced = now
            if not known.live:
                known.died = None
                merged.joined.append(entry.id)
                log.info("router %s joined again (incarnation %d, beat %d)", entry.id,
                         entry.incarnation, entry.beat)
        return merged

    def expire(self) -> list[str]:
        """Members silent past the expiry become tombstones (returned); tombstones older
        than twice the expiry are forgotten."""
        now = self.clock()
        left = []
        for member in list(self.table.values()):
            if member is self.own:
                continue
            if member.live:
                if now - member.advanced > self.expiry:
                    member.died = now
                    left.append(member.id)
                    log.info("router %s left: its beat has not advanced for %.1fs",
                             member.id, now - member.advanced)
            elif now - member.advanced > self.forget_after:
                del self.table[member.id]
                log.info("router %s forgotten: dead, its beat not advanced for %.0fs",
                         member.id, now - member.advanced)
        return left

    def _room(self) -> bool:
        """Forget the oldest tombstone of a full table; False when it holds none."""
        dead = self.dead()
        if not dead:
            return False
        oldest = min(dead, key=lambda m: m.advanced)
        del self.table[oldest.id]
        log.info("router %s forgotten: the member table is full", oldest.id)
        return True
