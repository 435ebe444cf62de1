"""Which ACKs a spooled message waits for (SPEC 4.2): pure rules, no database.

``required`` maps each spooled type to the sink types that must all ACK it (config
``spool.ack_from``; default the owning type, NOTIFY: alerting, REGISTER: registry). An ACK
names its sink type in ``sink``; an ACK without it (sinks older than the field) counts as
one from the message type's owner, which is what those sinks were. An ACK from a type the
message does not need is ignored (counted), so a history sink ACKing a NOTIFY it fsynced
never ends the resends an alerting sink still needs; one from a type no message type needs
is not even looked up. Which required types ACKed is kept, not which are missing, so that a
changed ``ack_from`` applies to messages already spooled.
"""

from __future__ import annotations

from typing import Iterable

from agent.config import ACK_OWNERS


class AckRule:
    """The sink types each spooled type waits for."""

    def __init__(self, required: dict[str, Iterable[str]] | None = None):
        if required is None:
            required = {t: (owner,) for t, owner in ACK_OWNERS.items()}
        #: spooled type -> the sink types that must all ACK a message of it
        self.required = {t: frozenset(sinks) for t, sinks in required.items()}
        self.wanted = frozenset().union(*self.required.values())

    def looked_up(self, sink: str | None) -> bool:
        """Whether an ACK from ``sink`` can count for any message (None: the owner)."""
        return sink is None or sink in self.wanted

    @staticmethod
    def sender(type_: str, sink: str | None) -> str | None:
        """The sink type an ACK stands for: its ``sink``, else the type's owner."""
        return sink if sink is not None else ACK_OWNERS.get(type_)

    def waits_for(self, type_: str, sink: str | None) -> bool:
        """Whether a message of ``type_`` counts an ACK from sink type ``sink``."""
        need = self.required.get(type_)
        return need is None or sink in need

    def complete(self, type_: str, acked) -> bool:
        """Whether sink types ``acked`` are all a message of ``type_`` waits for (a type with
        no requirement, which the agent does not spool, takes any ACK)."""
        need = self.required.get(type_)
        return need is None or need.issubset(acked)
