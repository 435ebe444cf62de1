"""From raw frame lists to a batch to write and the ACKs owed once it is committed.

Plain logic between the PULL socket and the sink (no sockets, no database): decode each
relayed message, drop what the sink does not take, drop duplicates by msg_id, and collect the
ACKs to send, grouped per (router, agent). Bad frames are counted by status and logged with
throttling, never raised.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from fleetwatch import protocol
from fleetwatch.logs import Throttle
from fleetwatch.protocol import ProtocolError, Relayed
from sinks.dedupe import Dedupe

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """Messages to write in one transaction, and the ACKs to send once it is committed."""

    fresh: list[Relayed] = field(default_factory=list)
    #: (router id, agent uuid) -> msg_ids to ACK, in arrival order, each once
    acks: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def owe(self, router: str, uuid: str, msg_id: str) -> None:
        ids = self.acks.setdefault((router, uuid), [])
        if msg_id not in ids:
            ids.append(msg_id)

    @property
    def ack_count(self) -> int:
        return sum(len(ids) for ids in self.acks.values())


class Intake:
    """Prepares batches for one sink: ``handles`` are written, ``acks`` are acknowledged."""

    def __init__(self, handles: frozenset[str], acks: frozenset[str], dedupe: Dedupe,
                 counts: Counter | None = None, throttle: Throttle | None = None,
                 max_body: int = protocol.MAX_BODY):
        self.handles, self.acks, self.dedupe = handles, acks, dedupe
        self.counts = counts if counts is not None else Counter()
        self.throttle = throttle or Throttle(log)
        self.max_body = max_body

    def prepare(self, raw: list[list[bytes]]) -> Batch:
        batch = Batch()
        in_batch: set[str] = set()
        for frames in raw:
            self.counts["received"] += 1
            try:
                relayed = protocol.decode_relayed(frames, max_body=self.max_body)
            except ProtocolError as e:
                self.counts[f"bad_{e.status}"] += 1
                self.throttle.warning(f"bad_{e.status}", "dropped a bad relayed message: %s", e)
                continue
            msg = relayed.message
            if msg.type not in self.handles:
                self.counts["unhandled"] += 1
                self.throttle.warning(f"type_{msg.type}", "dropped %s: not taken by this sink",
                                      msg.type)
                continue
            if msg.msg_id in in_batch or self.dedupe.seen(msg.msg_id):
                self.counts["duplicate"] += 1
            else:
                in_batch.add(msg.msg_id)
                batch.fresh.append(relayed)
            if msg.type in self.acks:
                batch.owe(relayed.router, relayed.uuid, msg.msg_id)
        return batch

    def committed(self, batch: Batch) -> None:
        """The batch is durable: remember its msg_ids as written."""
        self.dedupe.add(r.message.msg_id for r in batch.fresh)
        self.counts["written"] += len(batch.fresh)
