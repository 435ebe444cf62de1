"""The local intake: local processes hand the agent messages over ipc (SPEC.md section 2).

A local process sends SIGNATURE, TYPE, BODY from a DEALER (or a REQ: an empty delimiter is
kept and echoed) to the agent's ROUTER. :class:`Intake` checks a message and rewrites it as
the agent's own: ``uuid`` becomes the agent's, ``msg_id``, ``ts`` and ``source`` are kept,
``retry``/``dup`` are dropped (the spool owns resends). NOTIFY and REGISTER are spooled and
committed by the daemon before it answers ACK; STATS and HEARTBEAT are queued at most once
and answered at once. Bad input is answered ERROR (never for a foreign signature: dropped)
and counted; nothing a local process sends stops the agent.
"""

from __future__ import annotations

import logging
import os

import zmq

from fleetwatch import protocol
from fleetwatch.logs import Throttle

log = logging.getLogger(__name__)

INTAKE_TYPES = frozenset({"NOTIFY", "STATS", "HEARTBEAT", "REGISTER"})
DURABLE_TYPES = frozenset({"NOTIFY", "REGISTER"})
DRAIN = 256


class Intake:
    """Checks and rewrites local messages; counts what it received and refused."""

    def __init__(self, uuid: str, hostname: str, max_body: int = protocol.MAX_BODY):
        self.uuid, self.hostname, self.max_body = uuid, hostname, max_body
        self.received = 0
        self.errors = 0
        self.throttle = Throttle(log, 10.0)

    def accept(self, frames: list[bytes]) -> tuple[protocol.Message | None,
                                                   protocol.Message | None]:
        """(the rewritten message, or None; an ERROR reply, or None).

        Both None: a foreign message, dropped without an answer.
        """
        self.received += 1
        try:
            msg = protocol.decode(frames, INTAKE_TYPES, self.max_body)
        except protocol.ProtocolError as e:
            self.errors += 1
            self.throttle.warning("intake", "intake: refused a local message: %s", e)
            if e.status == protocol.BAD_REQUEST and frames and \
                    frames[0][:3] != protocol.SIGNATURE_PREFIX:
                return None, None
            return None, protocol.error(e.status, e.reason, uuid=self.uuid)
        body = {k: v for k, v in msg.body.items() if k not in ("retry", "dup")}
        body["uuid"] = self.uuid
        if msg.type == "STATS" and "hostname" not in body:
            body["hostname"] = self.hostname
        return protocol.Message(msg.type, body), None

    def ack(self, msg: protocol.Message) -> protocol.Message:
        return protocol.make("ACK", self.uuid, msg_ids=[msg.msg_id])


class IntakeSocket:
    """The ROUTER bound on the intake endpoint; an ipc socket file is made mode 0600."""

    def __init__(self, ctx: zmq.Context, endpoint: str, max_body: int = protocol.MAX_BODY):
        self.endpoint = endpoint
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 1000)
        self.sock.setsockopt(zmq.RCVHWM, 1000)
        self.sock.setsockopt(zmq.MAXMSGSIZE, max_body + 4096)
        if endpoint.startswith("ipc://"):
            path = endpoint[len("ipc://"):]
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.sock.bind(endpoint)
        if endpoint.startswith("ipc://"):
            os.chmod(endpoint[len("ipc://"):], 0o600)
        log.info("intake listening on %s", endpoint)

    def drain(self, limit: int = DRAIN) -> list[tuple[list[bytes], list[bytes]]]:
        """Up to ``limit`` waiting messages as (envelope, frames)."""
        out = []
        for _ in range(limit):
            try:
                parts = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            # ROUTER adds the routing id; a REQ peer adds an empty delimiter too.
            cut = 2 if len(parts) > 1 and parts[1] == b"" else 1
            out.append((parts[:cut], parts[cut:]))
        return out

    def reply(self, envelope: list[bytes], msg: protocol.Message) -> None:
        try:
            self.sock.send_multipart(envelope + protocol.encode(msg), zmq.NOBLOCK)
        except zmq.ZMQError as e:  # the local process left, or its queue is full
            log.debug("intake: reply dropped: %s", e)

    def close(self) -> None:
        self.sock.close(linger=0)
        if self.endpoint.startswith("ipc://"):
            # libzmq removes the file from its I/O thread, maybe after we exit: do it now.
            try:
                os.unlink(self.endpoint[len("ipc://"):])
            except FileNotFoundError:
                pass
