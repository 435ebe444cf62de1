"""What the router has received, relayed and dropped, as STATS metric names.

The relay's hot path counts into plain lists and dicts; :meth:`Counters.metrics` turns them
into the flat ``{name: number}`` of the router's own STATS:

- ``router.received.TYPE``: agent messages of TYPE accepted (from attached agents);
- ``router.relayed.TYPE.SINK`` / ``router.dropped.TYPE.SINK``: sends to a sink type's PUSH
  socket that succeeded / would have blocked (no sink connected, or every queue full);
- ``router.bad.STATUS``: messages refused, by the status they were (or would be) answered
  with; but a RUN for an agent not attached here (answered 404) is ``router.run.elsewhere``,
  what a scheduler's RUN meets on every router but the agent's, not a fault;
- ``router.tail.published``, ``router.tail.topics`` (distinct topics subscribed, a gauge),
  ``router.tail.excess`` (subscriptions above ``limits.tail_topics``),
  ``router.forwarded.TYPE`` (ACK, RUN to agents),
  ``router.replies.failed`` (answers that could not be delivered);
- ``router.refused.REASON``: connections and HELLOs refused by the security checks (ZAP
  reasons such as ``unknown_key``, ``handshake`` for failed handshakes, ``uuid_mismatch``);
- ``router.rate_limited`` (agent messages above the agent's rate), ``router.admission_deferred``
  (HELLOs of new agents above the admission pace, put to wait), ``router.admission_expired``
  (of those, dropped unanswered: waited too long or no room), ``router.admission_gone``
  (HELLOs of new connections whose WELCOME could not be sent: the connection was gone by
  the time the HELLO was read; nothing bound, nothing relayed), ``router.admission_waiting``
  (HELLOs waiting, a gauge), ``router.clones`` (cloned uuids
  reported), ``router.events`` (security NOTIFYs the router made), ``router.acks.own``
  (ACKs of those, swallowed);
- ``router.agents``: attached agents, a gauge;
- ``router.durable_unavailable``: agent messages of a durable route (SPEC 4.1) that its
  sink type could not take, each answered ``503`` at most once a second per connection;
  beside these the relay reports ``router.sinks.TYPE`` (sink connections, gauges),
  ``router.durable_missing`` (durable routes with no sink connected, a gauge) and the drop
  ledger's ``router.drops.pending``, ``.reported``, ``.unledgered`` (router/presence.py,
  router/drops.py);
- ``router.fd_used``, ``router.fd_limit``, ``router.fd_headroom_pct``: file descriptors open,
  the limit, and the share of it left (gauges kept by router/descriptors.py, which warns
  when under 20 % is left);
- ``router.config.reloads`` / ``router.config.reload_failed``: config reloads on SIGHUP
  applied / refused (router/reload.py);
- ``router.heap.trims``, ``router.heap.trim_ms``: how often and how long (in all) the freed
  memory of closed connections was given back to the system (fleetwatch/heap.py).
"""

from __future__ import annotations

import logging
from collections import Counter

log = logging.getLogger(__name__)


class Counters:
    """Message counters. ``slot(type, sink)`` gives the index used in :attr:`relayed` and
    :attr:`dropped`, so the hot path does ``counters.relayed[slot] += 1``."""

    def __init__(self, types=()):
        #: type frame (bytes) -> messages accepted from agents
        self.received: dict[bytes, int] = {t.encode() if isinstance(t, str) else t: 0 for t in types}
        self._slots: dict[tuple[str, str], int] = {}
        self.relayed: list[int] = []
        self.dropped: list[int] = []
        #: status code -> messages refused
        self.bad: Counter[int] = Counter()
        #: forwarded control traffic by type (ACK, RUN)
        self.forwarded: Counter[str] = Counter()
        self.tail_published = 0
        #: distinct tail topics subscribed (a gauge), and subscriptions above the limit
        self.tail_topics = 0
        self.tail_excess = 0
        self.replies_failed = 0
        #: agent messages with the wrong number of frames (each starts careful draining)
        self.misframed = 0
        #: security refusals by reason
        self.refused: Counter[str] = Counter()
        self.rate_limited = 0
        self.admission_deferred = 0
        self.admission_expired = 0
        self.admission_gone = 0
        self.clones = 0
        self.events = 0
        self.own_acks = 0
        #: agent messages a durable route's sink type could not take, answered 503
        self.durable_unavailable = 0
        #: STATS of back-end processes relayed from the control socket
        self.control_stats = 0
        #: RUNs for an agent not attached here (answered 404; not a fault: a scheduler
        #: sends each RUN to every router, and all but one answer so)
        self.run_elsewhere = 0
        #: metric name -> count, kept by the config reloader (router/reload.py)
        self.reloads: dict[str, int] = {}

    def slot(self, type_: str, sink: str) -> int:
        """The counter index of (type, sink), allocated on first use."""
        key = (type_, sink)
        index = self._slots.get(key)
        if index is None:
            index = self._slots[key] = len(self.relayed)
            self.relayed.append(0)
            self.dropped.append(0)
        return index

    def count_received(self, type_frame: bytes) -> None:
        self.received[type_frame] = self.received.get(type_frame, 0) + 1

    def count_bad(self, status: int) -> None:
        self.bad[status] += 1

    def relayed_to(self, type_: str, sink: str) -> int:
        index = self._slots.get((type_, sink))
        return 0 if index is None else self.relayed[index]

    def dropped_at(self, type_: str, sink: str) -> int:
        index = self._slots.get((type_, sink))
        return 0 if index is None else self.dropped[index]

    def metrics(self, agents: int, waiting: int = 0) -> dict[str, int]:
        """The flat STATS metrics; ``agents`` is the number of attached agents, ``waiting``
        the number of HELLOs waiting for the admission pace."""
        out: dict[str, int] = {"router.agents": agents, "router.admission_waiting": waiting}
        for type_frame, n in self.received.items():
            out[f"router.received.{type_frame.decode('ascii', 'replace')}"] = n
        for (type_, sink), index in self._slots.items():
            out[f"router.relayed.{type_}.{sink}"] = self.relayed[index]
            out[f"router.dropped.{type_}.{sink}"] = self.dropped[index]
        for status, n in sorted(self.bad.items()):
            out[f"router.bad.{status}"] = n
        for type_, n in sorted(self.forwarded.items()):
            out[f"router.forwarded.{type_}"] = n
        out["router.tail.published"] = self.tail_published
        out["router.tail.topics"] = self.tail_topics
        out["router.tail.excess"] = self.tail_excess
        out["router.replies.failed"] = self.replies_failed
        out["router.misframed"] = self.misframed
        for reason, n in sorted(self.refused.items()):
            out[f"router.refused.{reason}"] = n
        out["router.rate_limited"] = self.rate_limited
        out["router.admission_deferred"] = self.admission_deferred
        out["router.admission_expired"] = self.admission_expired
        out["router.admission_gone"] = self.admission_gone
        out["router.clones"] = self.clones
        out["router.events"] = self.events
        out["router.acks.own"] = self.own_acks
        out["router.durable_unavailable"] = self.durable_unavailable
        out["router.control.stats"] = self.control_stats
        out["router.run.elsewhere"] = self.run_elsewhere
        out.update(self.reloads)
        return out
