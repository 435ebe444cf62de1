"""What a tail subscriber lost: told by the SEQ frame of each message (SPEC 4.1, "The tail").

A router numbers what it publishes on its tail twice: among the messages of that type, and
among those of that type from that sender. A subscriber to whole types (``NOTIFY/``, or
everything) follows the first number, one to some senders' messages (``NOTIFY/UUID/``) the
second: a number more than one past the last seen is that many messages the router
published and this subscriber never got (it fell behind, and the router's queue for it,
``limits.tail_hwm``, was full). A number not past the last seen means the count started
again: the router restarted (or the sender attached anew after the router forgot it), and
nothing can be told across it.

Pure logic: :class:`Gaps` is fed each :class:`fleetwatch.protocol.Relayed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.protocol import Relayed

#: most (router, type, sender) the subscriber remembers; past it, it starts afresh
MAX_KEYS = 100_000


@dataclass(frozen=True)
class Lost:
    """``count`` messages of ``type`` (from ``uuid``, when followed by sender) published by
    ``router`` and not received, before the one numbered ``seq``."""

    router: str
    type: str
    uuid: str | None
    count: int
    seq: int


class Gaps:
    """The numbers last seen, per router and type (``by_sender``: per router, type and
    sender); :meth:`seen` says what was lost before each message. ``lost`` sums it all,
    ``restarts`` counts the counts that started again, ``unnumbered`` the messages without
    SEQ (a router older than it: nothing can be told of them)."""

    def __init__(self, by_sender: bool = False):
        self.by_sender = by_sender
        self.last: dict[tuple, int] = {}
        self.lost = self.restarts = self.unnumbered = 0

    def seen(self, relayed: Relayed) -> Lost | None:
        """What was lost before ``relayed`` (None: nothing that can be told)."""
        if relayed.seq is None:
            self.unnumbered += 1
            return None
        type_ = relayed.message.type
        if self.by_sender:
            key, seq, uuid = (relayed.router, type_, relayed.uuid), relayed.seq[1], relayed.uuid
        else:
            key, seq, uuid = (relayed.router, type_), relayed.seq[0], None
        before = self.last.get(key)
        if before is None and len(self.last) >= MAX_KEYS:
            self.last.clear()
        self.last[key] = seq
        if before is None:
            return None
        if seq <= before:
            self.restarts += 1
            return None
        if seq == before + 1:
            return None
        missed = seq - before - 1
        self.lost += missed
        return Lost(relayed.router, type_, uuid, missed, seq)
