"""The hostname of each agent uuid, as the sinks that name series after hosts learn it (the
graphite and prometheus sinks; SPEC 4.1): from the HELLOs routed to them, never from another
body's claim, except while they know none for that uuid (the sink started after the agent
connected): then the first STATS's ``hostname`` stands for it until a HELLO. Bounded:
:data:`MAX_HOSTS` uuids, least recently used forgotten first."""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict

from fleetwatch.logs import Throttle

log = logging.getLogger(__name__)

#: uuid -> hostname entries kept for naming RESULTs
MAX_HOSTS = 100_000


class HostNames:
    """A bounded uuid -> hostname map, least recently used forgotten first.

    A HELLO's hostname always sets the name; a STATS's only names a uuid not known yet.
    """

    def __init__(self, size: int = MAX_HOSTS):
        self.size = size
        self.names: OrderedDict[str, str] = OrderedDict()
        #: STATS filed under another name than they claim; RESULTs of a uuid with no name
        self.counts: Counter = Counter({"hostname_mismatch": 0, "result_no_host": 0})
        self.throttle = Throttle(log, 30.0)

    def of_stats(self, uuid: str, claim) -> str:
        """The name a STATS of ``uuid`` claiming ``claim`` is filed under (:meth:`claim`; the
        uuid when there is none); an overruled claim is counted and logged."""
        owner, overruled = self.claim(uuid, claim)
        if overruled:
            self.counts["hostname_mismatch"] += 1
            self.throttle.warning("mismatch", "agent %s sent STATS as %r: filed under %r, "
                                  "the hostname of its HELLO", uuid, str(claim)[:64], owner)
        return owner or uuid

    def of_result(self, uuid: str) -> str:
        """The name a RESULT of ``uuid`` is filed under: its known name, else the uuid
        (counted ``result_no_host``)."""
        owner = self.get(uuid)
        if owner is None:
            self.counts["result_no_host"] += 1
            return uuid
        return owner

    def hello(self, uuid: str, hostname) -> None:
        """The hostname the agent gave in its HELLO (the router bound it to ``uuid``)."""
        if isinstance(hostname, str) and hostname:
            self._set(uuid, hostname[:255])

    def claim(self, uuid: str, hostname) -> tuple[str | None, bool]:
        """(the name for a STATS of ``uuid`` claiming ``hostname``, whether the claim was
        overruled): the known name, else the claim, which then holds until a HELLO."""
        known = self.get(uuid)
        valid = isinstance(hostname, str) and hostname
        if known is not None:
            return known, bool(valid) and hostname[:255] != known
        if not valid:
            return None, False
        self._set(uuid, hostname[:255])
        return hostname[:255], False

    def _set(self, uuid: str, hostname: str) -> None:
        self.names[uuid] = hostname
        self.names.move_to_end(uuid)
        while len(self.names) > self.size:
            self.names.popitem(last=False)

    def get(self, uuid: str) -> str | None:
        name = self.names.get(uuid)
        if name is not None:
            self.names.move_to_end(uuid)
        return name
