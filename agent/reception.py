"""What the agent does with the messages local processes send through the intake.

:class:`agent.intake.Intake` decides what is accepted (``local`` limits) and
:class:`agent.intake.IntakeSocket` carries it; here the accepted messages go on. NOTIFY and
REGISTER are committed to the spool, in one batch per wake-up, before their ACK: a spool that
cannot be written (a full disk) answers each ``ERROR 500``. A REGISTER declaring plugins is
checked by :class:`agent.declared.Declared` (refused: ``ERROR 403``, counted, logged at most
every 10 s) and its declaration applied once the REGISTER is spooled. STATS and HEARTBEAT go
to the at-most-once queue and are ACKed at once; a STATS some of whose names the intake
refused (``local.max_metric_names``) goes with the rest, answered by the intake's ERROR 429.
"""

from __future__ import annotations

import logging

from fleetwatch import protocol
from fleetwatch.logs import Throttle

from agent.declared import Declared, Refused
from agent.intake import DURABLE_TYPES, Intake, IntakeSocket
from agent.outbox import Outbox

log = logging.getLogger(__name__)

#: messages read from the intake per wake-up
DRAIN = 256


class Reception:
    """Local processes' messages, from the intake on: spooled or queued, then answered."""

    def __init__(self, uuid: str, intake: Intake, declared: Declared, outbox: Outbox, clock):
        self.uuid, self.intake, self.declared, self.outbox = uuid, intake, declared, outbox
        self.throttle = Throttle(log, 10.0, clock)

    def drain(self, sock: IntakeSocket) -> None:
        """Take what the intake socket holds, and answer each message."""
        durable, declarations = [], []
        for envelope, frames in sock.drain(DRAIN):
            msg, err = self.intake.accept(frames)
            if err is None and msg is not None and msg.type == "REGISTER" \
                    and msg.get("plugins") is not None:
                msg, err = self._local_plugins(msg, declarations)
            if msg is None:
                if err is not None:
                    sock.reply(envelope, err)
            elif msg.type in DURABLE_TYPES:
                durable.append((envelope, msg))
            else:   # an ERROR with a message: a STATS whose names past the cap were left out
                self.outbox.enqueue(msg)
                sock.reply(envelope, err or self.intake.ack(msg))
        if not durable:
            return
        try:
            self.outbox.spool_messages([msg for _, msg in durable], own=False)
        except Exception as e:  # sqlite3.Error, OSError: the disk is full or gone
            self.throttle.warning("intake.spool", "spool write failed, %d local messages "
                                  "refused (500): %s: %s", len(durable), type(e).__name__, e)
            for envelope, msg in durable:
                sock.reply(envelope, protocol.error(
                    protocol.INTERNAL, "spool write failed", ref=msg.msg_id, uuid=self.uuid))
            return
        for process, plugins in declarations:
            self.declared.apply(process, plugins)
        for envelope, msg in durable:
            sock.reply(envelope, self.intake.ack(msg))

    def _local_plugins(self, msg: protocol.Message, declarations: list):
        """A local REGISTER declaring plugins: (the REGISTER to forward, None) or
        (None, ERROR); the declaration itself is applied once the REGISTER is spooled."""
        try:
            plugins, forward = self.declared.prepare(msg)
        except Refused as e:
            self.intake.refused += 1
            self.throttle.warning("intake.plugins", "intake: refused a REGISTER from %s: %s",
                                  msg.get("name"), e.reason)
            return None, protocol.error(e.status, e.reason, ref=msg.msg_id, uuid=self.uuid)
        declarations.append((msg.get("name"), plugins))
        return forward, None
