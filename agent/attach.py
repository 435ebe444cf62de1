"""Which routers an agent keeps links to: ``k`` of a mesh's live set (SPEC 4.9, issue 20).

The *live set* is what the agent's alive links last told: the union of the ``routers`` of
each one's newest WELCOME, when that WELCOME had ``members`` naming more than its router (a
router of a mesh; ``members`` also maps an agents endpoint to its router's id: a router
alone names itself only, and routers each alone, configured side by side, are every one
linked, as before meshes). The agent attaches
to ``choose(uuid, live, k)`` (:mod:`agent.rendezvous`), and :meth:`Attach.arrange` makes the
links match:

- a chosen endpoint not linked becomes a learnt link, unless its router is already alive
  through another endpoint (an alias: that link counts as the chosen one);
- a learnt link whose router left the live set is dropped at once (as without ``k``);
- an endpoint that leaves the live set, a configured router's as well as a learnt one's,
  stays out of it for :data:`QUARANTINE` seconds, whatever a router still names it;
- a link to a live router not chosen (learnt: forgotten until chosen again; configured, a
  *seed*: parked) is closed once a chosen link is alive, so the agent is never left without
  a router by its own choice; a configured link to a router outside the live set (another
  router alone, or one not yet heard: its id is not known before its WELCOME) is kept;
- while no chosen link is alive, the parked seeds are unparked (they are how the agent
  learns the live set again).

With ``k`` 0, or while no alive link's WELCOME had ``members`` (routers older than meshes, or
no link alive), every named router is linked, as before: learnt ones are only dropped when
no alive router names them (:meth:`agent.links.Links.unlisted`), and the seeds are unparked.
No sockets here: :mod:`agent.routers` closes and opens what :meth:`Attach.arrange` says.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from agent.links import MAX_LINKS, Link, Links
from agent.rendezvous import choose

log = logging.getLogger(__name__)

#: why a link is closed: its router left the live set; live but not among the k; a seed
#: not among the k (parked, kept to learn the live set again)
DROPPED, UNCHOSEN, PARKED = "dropped", "unchosen", "parked"
#: seconds a router dropped from the live set stays out of it, whatever a router still
#: names it: while the mesh converges on a router's death, a router that has not expired it
#: yet (the one a new link's first WELCOME comes from) would bring it back, and the agent
#: would move to it and away again (a configured router as well: its link is kept, and
#: reconnects, but its endpoint counts as live only once the quarantine is over)
QUARANTINE = 30.0


@dataclass
class Changes:
    """What :meth:`Attach.arrange` changed: new links to open, links to close and why."""

    new: list[Link] = field(default_factory=list)
    closed: list[tuple[Link, str]] = field(default_factory=list)


class Attach:
    """The agent's choice of routers over its :class:`agent.links.Links`."""

    def __init__(self, links: Links, uuid: str, k: int):
        self.links, self.uuid, self.k = links, uuid, k
        #: endpoint -> until when it stays out of the live set (dropped from it: QUARANTINE)
        self.quarantine: dict[str, float] = {}
        #: the endpoints of the live set at the previous arrange (None: no live set then)
        self.was_live: set[str] | None = None
        self.now = 0.0

    def live(self) -> dict[str, str | None] | None:
        """The live set told by the alive links, agents endpoint -> router id (None for an
        endpoint no ``members`` entry names, such as a router's configured ``peers``);
        None when ``k`` is 0 or no alive link's newest WELCOME had ``members``."""
        if self.k <= 0:
            return None
        tellers = [link for link in self.links.alive()
                   if link.told is not None and link.members is not None
                   and len(link.members) > 1]
        if not tellers:
            return None
        live: dict[str, str | None] = {}
        for link in tellers:
            for endpoint in link.told:
                if self.quarantine.get(endpoint, 0.0) > self.now:
                    continue
                if live.get(endpoint) is None:
                    live[endpoint] = link.members.get(endpoint)
        return live

    def chosen(self) -> list[str] | None:
        """The endpoints the agent attaches to, best first; None: every named router."""
        live = self.live()
        return None if live is None else choose(self.uuid, live, self.k)

    def arrange(self, now: float) -> Changes:
        """Make the links match the choice (the caller closes and opens the sockets)."""
        changes = Changes()
        self.now = now
        self.quarantine = {e: t for e, t in self.quarantine.items() if t > now}
        live = self.live()
        if live is not None and self.was_live is not None:
            for endpoint in self.was_live - live.keys():    # a configured router's too
                self.quarantine[endpoint] = now + QUARANTINE
            live = self.live()
        self.was_live = None if live is None else set(live)
        if live is None:
            for link in self.links:
                if link.parked:
                    link.unpark(now)
            for link in self.links.unlisted():
                self.links.forget(link)
                changes.closed.append((link, DROPPED))
            return changes
        chosen = choose(self.uuid, live, self.k)
        chosen_ids = {live[e] for e in chosen if live[e] is not None}
        live_ids = {i for i in live.values() if i is not None}

        def is_chosen(link: Link) -> bool:
            return link.endpoint in chosen or (link.router_id is not None
                                               and link.alive and link.router_id in chosen_ids)

        def is_live(link: Link) -> bool:
            return link.endpoint in live or (link.router_id is not None and link.alive
                                             and link.router_id in live_ids)

        settled = any(link.alive and is_chosen(link) for link in self.links)
        for link in self.links:
            if is_chosen(link):
                if link.parked:
                    link.unpark(now)
            elif link.learned and not is_live(link):
                self.links.forget(link)
                changes.closed.append((link, DROPPED))
                self.quarantine[link.endpoint] = now + QUARANTINE
            elif not settled:
                if link.parked:
                    link.unpark(now)
            elif link.learned:
                self.links.forget(link)
                changes.closed.append((link, UNCHOSEN))
            elif not link.parked and is_live(link):
                link.park()
                changes.closed.append((link, PARKED))
        linked_ids = {link.router_id for link in self.links.alive()}
        for endpoint in chosen:
            if endpoint in self.links.links or endpoint in self.links.ignored \
                    or (live[endpoint] is not None and live[endpoint] in linked_ids):
                continue
            if len(self.links) >= MAX_LINKS:
                log.warning("%d routers known already: %s ignored", MAX_LINKS, endpoint)
                continue
            changes.new.append(self.links.add(endpoint, True))
        return changes
