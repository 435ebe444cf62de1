"""Which ACKs a spooled message waits for (SPEC 4.2): pure rules, no database.

``required`` maps each spooled type to the sink types that must all ACK it: what the routers'
durable routes say (:class:`FleetRoutes`, from WELCOME), else the config's ``spool.ack_from``
(default the owning type, NOTIFY: alerting, REGISTER: registry). An ACK names its sink type
in ``sink``; an ACK without it (sinks older than the field) counts as one from the message
type's owner, which is what those sinks were. An ACK from a type the message does not need
never removes it (counted as ignored), so a history sink ACKing a NOTIFY it fsynced never
ends the resends an alerting sink still needs, but it is noted when that type ACKs such
messages at all, so that a route made durable later finds it done. Which types ACKed is
kept, not which are missing, so that a changed requirement applies to messages already
spooled.
"""

from __future__ import annotations

from typing import Iterable

from fleetwatch.protocol import ACK_OWNERS, ACKING_SINKS


#: every sink type that ACKs some spooled type
ACKING_TYPES = frozenset(s for sinks in ACKING_SINKS.values() for s in sinks)


class AckRule:
    """The sink types each spooled type waits for."""

    def __init__(self, required: dict[str, Iterable[str]] | None = None):
        if required is None:
            required = {t: (owner,) for t, owner in ACK_OWNERS.items()}
        #: spooled type -> the sink types that must all ACK a message of it
        self.required = {t: frozenset(sinks) for t, sinks in required.items()}
        self.wanted = frozenset().union(*self.required.values())

    def looked_up(self, sink: str | None) -> bool:
        """Whether an ACK from ``sink`` can count for any message (None: the owner): any
        type that ACKs spooled messages is noted, so that what a router makes durable later
        finds it done."""
        return sink is None or sink in self.wanted or sink in ACKING_TYPES

    def needs_none(self, type_: str) -> bool:
        """Whether a message of ``type_`` waits for no ACK at all (no durable route takes
        it): sent at most once, not spooled."""
        need = self.required.get(type_)
        return need is not None and not need

    @staticmethod
    def sender(type_: str, sink: str | None) -> str | None:
        """The sink type an ACK stands for: its ``sink``, else the type's owner."""
        return sink if sink is not None else ACK_OWNERS.get(type_)

    def waits_for(self, type_: str, sink: str | None) -> bool:
        """Whether a message of ``type_`` counts an ACK from sink type ``sink``."""
        need = self.required.get(type_)
        return need is None or sink in need

    @staticmethod
    def acks(type_: str, sink: str | None) -> bool:
        """Whether sink type ``sink`` ACKs messages of ``type_`` at all (SPEC 4.2)."""
        return sink in ACKING_SINKS.get(type_, ())

    def complete(self, type_: str, acked) -> bool:
        """Whether sink types ``acked`` are all a message of ``type_`` waits for (a type with
        no requirement, which the agent does not spool, takes any ACK)."""
        need = self.required.get(type_)
        return need is None or need.issubset(acked)


class FleetRoutes:
    """What the routers say each spooled type waits for (SPEC 4.1: WELCOME's ``durable``).

    Each router's latest WELCOME is kept (by router id); a spooled type waits for the union,
    over the routers that told anything since the agent started, of what each names for it,
    and, for a router that did not name the type (one older than ``durable``), for
    ``fallback`` (the config's ``spool.ack_from``: the owning type by default). Before any
    router told, it is what the spool last knew (:meth:`agent.spool.Spool.retarget` keeps it
    on disk), else ``fallback``.
    """

    def __init__(self, fallback: dict[str, Iterable[str]]):
        self.fallback = {t: tuple(s) for t, s in fallback.items()}
        self.told: dict[str, dict[str, tuple[str, ...]]] = {}

    @staticmethod
    def parse(durable) -> dict[str, tuple[str, ...]]:
        """The usable part of a WELCOME's ``durable``: spooled types to the sink types that
        ACK them (anything else, or a malformed value, is left out: the fallback holds)."""
        out: dict[str, tuple[str, ...]] = {}
        if not isinstance(durable, dict):
            return out
        for type_, sinks in durable.items():
            if type_ in ACKING_SINKS and isinstance(sinks, list):
                out[type_] = tuple(dict.fromkeys(
                    s for s in sinks if isinstance(s, str) and s in ACKING_SINKS[type_]))
        return out

    def tell(self, router: str, durable) -> dict[str, tuple[str, ...]]:
        """Router ``router``'s WELCOME said ``durable`` (None: it said nothing); the
        requirement now."""
        self.told[router] = self.parse(durable)
        return self.required()

    def required(self) -> dict[str, tuple[str, ...]]:
        if not self.told:
            return dict(self.fallback)
        out = {}
        for type_, fallback in self.fallback.items():
            sinks: dict[str, None] = {}
            for routes in self.told.values():
                sinks.update(dict.fromkeys(routes.get(type_, fallback)))
            out[type_] = tuple(sinks)
        return out
