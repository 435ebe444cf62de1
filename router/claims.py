"""A site's claims, checked with the mesh (SPEC 4.10): before a central router lets a site
link speak for a uuid, it asks the other routers of its mesh whether that uuid is attached
to one of them; a router knows its own agents, not its peers', so without asking a site
key could rename, re-parent or deregister an agent attached elsewhere in the mesh.

- A site's message for a uuid its link does not speak for yet is *held* (:meth:`Claims.hold`,
  at most :data:`MAX_HELD` messages a uuid, :data:`MAX_PENDING` uuids; beyond, refused and
  counted) while the other live routers are asked (ATTACHED, :data:`BATCH` uuids a request,
  :meth:`Claims.flush`).
- When every router asked has answered, or after :data:`TIMEOUT` seconds (a router that
  does not answer is counted: ``unverified``, and its silence taken as "not here": a dead
  router has no agents), each uuid is *settled*: elsewhere (a router said it is attached
  there) or free, with the messages held for it in order (:class:`Settled`).
- The uuids links speak for are asked about again every :data:`RECHECK` seconds
  (:meth:`Claims.recheck`), settled the same way with no message held: an agent that
  attached elsewhere since is taken from the site.

The caller (:class:`router.sites.Sites`) relays what is free, refuses what is elsewhere,
and keeps a uuid refused for :data:`REFUSED_FOR` seconds before asking again. With no other
router live nothing is held: a router alone knows every agent it has. Pure logic: ``ask``
sends the request (:meth:`router.mesh.Mesh.ask_attached`), ``clock`` is monotonic seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetwatch.protocol import MAX_ATTACHED

#: seconds to wait for the routers asked
TIMEOUT = 1.0
#: messages held for one uuid while it is checked (a burst at a site's reconnection)
MAX_HELD = 64
#: uuids held at once (a site of 10,000 agents linking: its first messages)
MAX_PENDING = 20_000
#: uuids one ATTACHED names
BATCH = MAX_ATTACHED
#: seconds between two checks of the uuids links speak for
RECHECK = 60.0
#: seconds a uuid found elsewhere is refused before the mesh is asked again (an agent that
#: moved behind a site is taken once the router it left let it go)
REFUSED_FOR = 10.0


@dataclass
class Held:
    """A uuid being checked: the link that spoke for it (``rid``, of ``site``) and its
    messages in order (each whatever the caller holds: :class:`router.sites.Sites` keeps its
    frames)."""

    rid: bytes
    site: str
    messages: list = field(default_factory=list)


@dataclass
class Settled:
    """A uuid checked: ``elsewhere`` where it is attached (a router, or a site linked to
    one), None when free."""

    uuid: str
    held: Held
    elsewhere: str | None


@dataclass
class Round:
    uuids: list[str]
    waiting: set[str]
    deadline: float
    found: dict[str, str] = field(default_factory=dict)


class Claims:
    """The uuids being checked (``pending``) and the requests out (``rounds``);
    ``ask(uuids)`` -> (request id, ids of the routers asked), or None when no other router
    is live."""

    def __init__(self, ask: Callable[[list[str]], tuple[str, set[str]] | None],
                 clock=time.monotonic):
        self.ask, self.clock = ask, clock
        self.pending: dict[str, Held] = {}
        self.unasked: list[str] = []
        self.rounds: dict[str, Round] = {}
        #: uuid -> Held, the uuids links speak for, asked about again (no message held)
        self.rechecked: dict[str, Held] = {}
        #: routers that did not answer in time, messages refused for room
        self.unverified = self.overflow = 0
        self.next_recheck = clock() + RECHECK

    def __len__(self) -> int:
        return len(self.pending)

    def hold(self, uuid: str, rid: bytes, site: str, message) -> bool:
        """Hold ``message`` of link ``rid`` (site ``site``) for ``uuid`` until it is settled;
        False (not held) past :data:`MAX_HELD` for the uuid or :data:`MAX_PENDING` uuids."""
        held = self.pending.get(uuid)
        if held is None:
            if len(self.pending) >= MAX_PENDING:
                self.overflow += 1
                return False
            held = self.pending[uuid] = Held(rid, site)
            self.unasked.append(uuid)
        elif len(held.messages) >= MAX_HELD:
            self.overflow += 1
            return False
        held.messages.append(message)
        return True

    def flush(self) -> list[Settled]:
        """Ask about the uuids held since the last call; what needs no asking (no other
        router live) is settled now, free."""
        settled = []
        while self.unasked:
            batch, self.unasked = self.unasked[:BATCH], self.unasked[BATCH:]
            settled += self._send(batch)
        return settled

    def due(self) -> bool:
        """Whether :meth:`recheck` is due."""
        return self.clock() >= self.next_recheck

    def recheck(self, speaking: dict[str, tuple[bytes, str]]) -> list[Settled]:
        """Every :data:`RECHECK` seconds, ask again about the uuids links speak for
        (``speaking``: uuid -> its link's rid and site), settled as the others (with no
        message)."""
        now = self.clock()
        if now < self.next_recheck:
            return []
        self.next_recheck = now + RECHECK
        fresh = [u for u in speaking if u not in self.pending and u not in self.rechecked]
        settled = []
        for at in range(0, len(fresh), BATCH):
            batch = fresh[at:at + BATCH]
            for uuid in batch:
                self.rechecked[uuid] = Held(*speaking[uuid])
            settled += self._send(batch)
        return settled

    def _send(self, batch: list[str]) -> list[Settled]:
        asked = self.ask(batch)
        if asked is None:
            return [self._take(uuid, None) for uuid in batch]
        ref, routers = asked
        self.rounds[ref] = Round(batch, set(routers), self.clock() + TIMEOUT)
        return []

    def answered(self, router: str, ref: str, attached: dict) -> list[Settled]:
        """A router's answer to the request ``ref``: of the uuids asked about, those
        attached to it (uuid -> "") or behind a site linked there (uuid -> the site). One
        behind the very site that claims it is not elsewhere (the site moved its uplink).
        The round is settled once every router asked has answered."""
        round_ = self.rounds.get(ref)
        if round_ is None or router not in round_.waiting:
            return []
        round_.waiting.discard(router)
        named = set(round_.uuids)
        for uuid, where in attached.items():
            held = self.pending.get(uuid) or self.rechecked.get(uuid)
            if uuid in named and held is not None and where != held.site:
                round_.found.setdefault(uuid, f"router {router}" + (
                    f" behind site {str(where)[:64]}" if where else ""))
        return self._settle(ref) if not round_.waiting else []

    def expire(self) -> list[Settled]:
        """The rounds past :data:`TIMEOUT`, settled with the answers they had."""
        now = self.clock()
        late = [ref for ref, r in self.rounds.items() if now >= r.deadline]
        settled = []
        for ref in late:
            self.unverified += len(self.rounds[ref].waiting)
            settled += self._settle(ref)
        return settled

    def _settle(self, ref: str) -> list[Settled]:
        round_ = self.rounds.pop(ref)
        out = (self._take(uuid, round_.found.get(uuid)) for uuid in round_.uuids)
        return [s for s in out if s is not None]

    def _take(self, uuid: str, elsewhere: str | None) -> Settled | None:
        held = self.pending.pop(uuid, None) or self.rechecked.pop(uuid, None)
        return Settled(uuid, held, elsewhere) if held is not None else None
