"""The router's own STATS: its metrics, every ``stats_interval``, and the drops ledger's.

A router reports on itself as a host does, through its STATS route and its tail (envelope
``STATS/ID/ID``, ``source`` ``router``): :meth:`Report.stats` assembles the metrics of its
parts (counters, descriptors, sink connections, the drops ledger, the mesh, the site links:
router/counters.py, SPEC 4.1, 4.9, 4.10). With STATS going to a history sink, each report carries the
ledger's oldest drops (:mod:`router.drops`), and more STATS of no metrics follow with the
rest, as long as a history sink takes them (:meth:`Report.send`); what it did not take waits
for the next report.
"""

from __future__ import annotations

from fleetwatch import __version__, protocol
from fleetwatch.protocol import Message


class Report:
    """The STATS of router ``router_id``, made from ``parts``: each a callable returning
    metrics (name -> number), in the order they are merged. ``relay(envelope, type_frame,
    body)`` sends; ``counters`` tell whether a history sink took a report (relayed there)."""

    def __init__(self, router_id: str, clock, relay, counters, ledger, parts: list):
        self.id, self.clock, self.relay = router_id, clock, relay
        self.counters, self.ledger, self.parts = counters, ledger, parts
        self.hostname = ""
        self.ledger_on = False

    def stats(self, drops: list | None = None) -> Message:
        metrics: dict = {}
        for part in self.parts:
            metrics.update(part())
        ledger = self.ledger
        metrics.update({"router.drops.pending": len(ledger),
                        "router.drops.reported": ledger.reported_entries,
                        "router.drops.unledgered": ledger.unledgered})
        return protocol.make("STATS", self.id, self.clock, metrics=metrics,
                             hostname=self.hostname, source="router", drops=drops or None,
                             version=__version__)

    def send(self) -> None:
        """Relay the router's own STATS, with the ledger's oldest drops; more of them, if
        any, in STATS of no metrics that follow, as long as a history sink takes them."""
        envelope = protocol.envelope("STATS", self.id, self.id)
        chunks = self.ledger.chunks() if self.ledger_on else []
        if not chunks:
            self.relay(envelope, b"STATS", protocol.encode_body(self.stats()))
            return
        # a history sink took a STATS when the relay counted it relayed there
        relayed, to_history = self.counters.relayed, self.counters.slot("STATS", "history")
        for n, chunk in enumerate(chunks):
            drops = [d for _, d in chunk]
            msg = self.stats(drops) if n == 0 else protocol.make(
                "STATS", self.id, self.clock, metrics={}, hostname=self.hostname,
                source="router", drops=drops)
            before = relayed[to_history]
            self.relay(envelope, b"STATS", protocol.encode_body(msg))
            if relayed[to_history] == before:
                return                  # kept for the next report
            self.ledger.reported(chunk)
