"""The local intake: local processes hand the agent messages over ipc (SPEC.md section 2).

A local process sends SIGNATURE, TYPE, BODY from a DEALER (or a REQ: an empty delimiter is
kept and echoed) to the agent's ROUTER. :class:`Intake` checks a message and rewrites it as
the agent's own: ``uuid`` and ``hostname`` become the agent's (a local process speaks for
this machine only, never for another host), ``msg_id``, ``ts`` and ``source`` are kept,
``retry``/``dup`` are dropped (the spool owns resends). NOTIFY and REGISTER are spooled and
committed by the daemon before it answers ACK; STATS and HEARTBEAT are queued at most once
and answered at once. Bad input is answered ERROR (never for a foreign signature: dropped)
and counted; nothing a local process sends stops the agent.

What local processes may declare is limited by the config's ``local`` section: the types
allowed, and fnmatch patterns for the names they speak as (a REGISTER's or HEARTBEAT's
``name``, any message's ``source``). The agent's own name, ``agent``, is reserved, and so are
the back-ends' roles as a ``source`` (``router``, ``sink``, ``scheduler``). A refusal
is answered ``ERROR 403`` with the reason and counted (``refused``). A REGISTER that declares
plugins is checked further by the daemon with :class:`agent.declared.Declared` (400 or 403),
which also rewrites its ``plugins`` to their wire form before it is spooled.

Local processes together have at most ``local.max_metric_names`` distinct STATS metric names
(:class:`fleetwatch.cardinality.NameCap`: a name unseen for a day frees its place): each
sink makes a series of every name, under this host. A STATS's names past that are taken out
of it and counted (``names_refused``); the rest is queued, and the sender is answered
``ERROR 429`` saying how many were refused.

The socket file is created 0600, or 0660 and owned by ``intake_group`` when one is set; the
umask is narrowed around the bind so that there is no moment when it is more open.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import time

import zmq

from fleetwatch import private, protocol
from fleetwatch.cardinality import NameCap
from fleetwatch.logs import Throttle

from agent import config as agent_config

log = logging.getLogger(__name__)

INTAKE_TYPES = frozenset(agent_config.INTAKE_TYPES)
#: Names only the agent itself speaks as (its own REGISTER, its own notifications).
RESERVED_NAMES = frozenset({"agent"})
DURABLE_TYPES = frozenset({"NOTIFY", "REGISTER"})
DRAIN = 256


class Intake:
    """Checks and rewrites local messages; counts what it received and refused."""

    def __init__(self, uuid: str, hostname: str, max_body: int = protocol.MAX_BODY,
                 allow=INTAKE_TYPES, names=("*",),
                 max_metric_names: int = agent_config.MAX_METRIC_NAMES, clock=time.monotonic):
        self.uuid, self.hostname, self.max_body = uuid, hostname, max_body
        self.allow = frozenset(allow)
        self.names = tuple(names)
        #: the STATS metric names local processes sent (one owner: this host)
        self.metric_names = NameCap(max_metric_names, clock=clock, max_owners=1)
        self.received = 0
        self.errors = 0
        self.refused = 0
        #: STATS metric names refused past ``max_metric_names``
        self.names_refused = 0
        self.throttle = Throttle(log, 10.0)

    def refusal(self, msg: protocol.Message) -> str | None:
        """Why the config does not let a local process send ``msg`` (None: it may)."""
        if msg.type not in self.allow:
            return f"{msg.type} is not allowed from local processes (local.allow)"
        claims = [("source", msg.get("source"))]
        if msg.type in ("REGISTER", "HEARTBEAT"):
            claims.append(("name", msg.get("name")))
        for field, value in claims:
            if value is None:
                continue
            if value in RESERVED_NAMES:
                return f"{field} {value!r} is reserved for the agent itself"
            if field == "source" and value in protocol.REPORTERS:
                return (f"source {value!r} is a back-end's: a local process speaks for this "
                        f"host, never as a router, a sink or a scheduler")
            if not any(fnmatch.fnmatchcase(value, p) for p in self.names):
                return f"{field} {value[:64]!r} is not allowed (local.names)"
        return None

    def accept(self, frames: list[bytes]) -> tuple[protocol.Message | None,
                                                   protocol.Message | None]:
        """(the rewritten message, or None; an ERROR reply, or None).

        Both None: a foreign message, dropped without an answer. Both set: a STATS some of
        whose names were refused; the message (the rest) goes on, the ERROR answers it.
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
        reason = self.refusal(msg)
        if reason is not None:
            self.refused += 1
            self.throttle.warning("refused", "intake: refused a local %s: %s", msg.type, reason)
            return None, protocol.error(protocol.FORBIDDEN, reason, ref=msg.msg_id,
                                        uuid=self.uuid)
        body = {k: v for k, v in msg.body.items() if k not in ("retry", "dup")}
        body["uuid"] = self.uuid
        body["hostname"] = self.hostname
        err = None
        if msg.type == "STATS":
            err = self._cap_names(body, msg.msg_id)
            if err is not None and not body["metrics"]:
                return None, err
        return protocol.Message(msg.type, body), err

    def _cap_names(self, body: dict, msg_id: str) -> protocol.Message | None:
        """Take out of a STATS ``body`` the metric names past ``max_metric_names``; the
        ERROR 429 that says so, or None when every name was taken."""
        metrics = body["metrics"]
        admit = self.metric_names.admit
        kept = {name: value for name, value in metrics.items() if admit(None, name)}
        refused = len(metrics) - len(kept)
        if not refused:
            return None
        body["metrics"] = kept
        self.names_refused += refused
        limit = self.metric_names.limit
        self.throttle.warning("names", "intake: refused %d metric names of a local STATS: "
                              "local processes have their %d distinct names "
                              "(local.max_metric_names)", refused, limit)
        return protocol.error(protocol.RATE_LIMITED,
                              f"{refused} of {len(metrics)} metric names refused: local "
                              f"processes have their {limit} distinct names "
                              f"(local.max_metric_names); the others were queued"
                              if kept else
                              f"{refused} metric names refused: local processes have their "
                              f"{limit} distinct names (local.max_metric_names)",
                              ref=msg_id, uuid=self.uuid)

    def ack(self, msg: protocol.Message) -> protocol.Message:
        return protocol.make("ACK", self.uuid, msg_ids=[msg.msg_id])


def group_id(group: str) -> int:
    """The gid of ``group`` (a name or a number); KeyError if there is no such group."""
    import grp
    if group.isdigit():
        return grp.getgrgid(int(group)).gr_gid
    return grp.getgrnam(group).gr_gid


class IntakeSocket:
    """The ROUTER bound on the intake endpoint; an ipc socket file is made mode 0600, or
    0660 owned by ``gid`` when one is given."""

    def __init__(self, ctx: zmq.Context, endpoint: str, max_body: int = protocol.MAX_BODY,
                 gid: int | None = None):
        self.endpoint = endpoint
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 1000)
        self.sock.setsockopt(zmq.RCVHWM, 1000)
        self.sock.setsockopt(zmq.MAXMSGSIZE, max_body + 4096)
        if not endpoint.startswith("ipc://"):
            self._bind(endpoint)
            log.info("intake listening on %s", endpoint)
            return
        path = endpoint[len("ipc://"):]
        mode = 0o600 if gid is None else 0o660
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        except OSError:
            self.sock.close(linger=0)
            raise
        # libzmq binds in this thread: the file is born with the mode, never wider.
        with private.born_with(mode):
            self._bind(endpoint)
        try:
            if gid is not None:
                os.chown(path, -1, gid)
            os.chmod(path, mode)
        except OSError:
            self.close()
            raise
        log.info("intake listening on %s (mode %04o%s)", endpoint, mode,
                 f", group {gid}" if gid is not None else "")

    def _bind(self, endpoint: str) -> None:
        """Bind, or close the socket and raise: a socket left open would hold the
        context's ``term()`` (the agent's exit) forever. (Its file, which may be another
        process's, is left as it is.)"""
        try:
            self.sock.bind(endpoint)
        except zmq.ZMQError:
            self.sock.close(linger=0)
            raise

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
