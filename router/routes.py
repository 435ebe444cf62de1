"""The compiled routing table: a TYPE frame -> the sink targets a message of that type goes to.

Built once at start from the config's ``routes`` (message type -> sink type names). Targets
are whatever the caller maps sink names to (PUSH sockets in the relay, indexes in tests); the
table carries the sink name with each target so drops can be counted per (type, sink).
"""

from __future__ import annotations

import logging
from typing import Generic, Mapping, Sequence, TypeVar

from fleetwatch.protocol import AGENT_TYPES

log = logging.getLogger(__name__)

T = TypeVar("T")


class RoutingTable(Generic[T]):
    """``lookup(type_frame)`` -> tuple of ``(sink_name, target)``; None for a type not relayed.

    Every agent type is in the table, with an empty tuple when no sink type takes it (it still
    goes to the tail). Types an agent may not send (WELCOME, ACK, ...) are not: None.
    """

    def __init__(self, routes: Mapping[str, Sequence[str]], targets: Mapping[str, T],
                 types: frozenset[str] = AGENT_TYPES):
        table: dict[bytes, tuple[tuple[str, T], ...]] = {}
        for type_ in sorted(types):
            sinks = routes.get(type_, ())
            missing = [s for s in sinks if s not in targets]
            if missing:
                raise ValueError(f"routes.{type_}: no sink socket for {', '.join(missing)}")
            # de-duplicate while keeping the configured order
            names = list(dict.fromkeys(sinks))
            table[type_.encode()] = tuple((name, targets[name]) for name in names)
        unknown = sorted(set(routes) - set(types))
        if unknown:
            raise ValueError(f"routes: types not relayed from agents: {', '.join(unknown)}")
        self.table = table

    def lookup(self, type_frame: bytes) -> tuple[tuple[str, T], ...] | None:
        return self.table.get(type_frame)

    def sinks_of(self, type_: str) -> list[str]:
        return [name for name, _ in self.table.get(type_.encode(), ())]

    def pairs(self) -> list[tuple[str, str]]:
        """Every (type, sink) pair the table relays on: the drop and relay counter keys."""
        return [(t.decode(), name) for t, entries in self.table.items() for name, _ in entries]
