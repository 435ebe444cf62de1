"""The router's CURVE side: server sockets, the ZAP handler and handshake monitors.

A thin adapter around :class:`fleetwatch.security.Gatekeeper` and
:class:`fleetwatch.security.Keyring` (the decisions and the allowlists). The ZAP handler is a
REP socket on ``inproc://zeromq.zap.01`` in the router's context, answered from the router's
main loop (:meth:`Doorman.answer`, a bounded number per wake-up), so no thread shares
anything with the relay. Monitors on the server sockets count failed handshakes (a plain
client on a CURVE socket never reaches ZAP).
"""

from __future__ import annotations

import logging
import os
import time

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from fleetwatch.logs import Throttle
from fleetwatch.security import (Gatekeeper, Keyring, SecurityError, ServerSecurity,
                                 _check_private, key_hint, read_certificate, server)

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
#: ZAP requests answered per main-loop wake-up
ZAP_BUDGET = 64
FAILED = (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
#: at most one allowlist check per this many seconds from the sweep
REFRESH_PERIOD = 1.0


class Doorman:
    """Load the server certificate and the allowlists (start-up errors are
    :class:`SecurityError`), make sockets CURVE servers, answer ZAP."""

    def __init__(self, ctx: zmq.Context, cfg: ServerSecurity, refused, clock=time.monotonic):
        self.cert = read_certificate(cfg.server_key, need_secret=True)
        _check_private(cfg.server_key)
        for name in ("agent_keys", "backend_keys", "routers", "sites"):
            path = getattr(cfg, name)
            if not path and name in ("routers", "sites"):   # optional: none may join, link
                continue
            if not os.path.isdir(path) or not os.access(path, os.R_OK | os.X_OK):
                raise SecurityError(f"security.{name}: {path}: not a readable directory")
        self.keyring = Keyring(cfg.agent_keys, cfg.backend_keys, cfg.routers, cfg.sites)
        self.keyring.refresh(force=True)
        self.gatekeeper = Gatekeeper(self.keyring)
        #: reason -> count (the relay's Counters.refused)
        self.refused = refused
        self.clock = clock
        self.throttle = Throttle(log, 10.0, clock)
        self.next_refresh = clock() + REFRESH_PERIOD
        self.ctx = ctx
        self.zap = ctx.socket(zmq.REP)
        self.zap.linger = 0
        self.zap.bind(ZAP_ENDPOINT)
        self.monitors: list[zmq.Socket] = []

    def secure(self, sock: zmq.Socket, domain: str, watch: bool = True) -> None:
        """Make ``sock`` a CURVE server in ZAP ``domain`` and monitor its failed handshakes
        (``watch``; else the caller's own monitor hands them to :meth:`handshake_failed`:
        libzmq allows one monitor per socket). Call before ``bind``."""
        server(sock, self.cert, domain)
        if watch:
            monitor = sock.get_monitor_socket(FAILED)
            monitor.linger = 0
            self.monitors.append(monitor)

    # ---------------------------------------------------------------- ZAP
    def answer(self, budget: int = ZAP_BUDGET) -> int:
        """Answer up to ``budget`` pending ZAP requests; return how many."""
        zap = self.zap
        for n in range(budget):
            try:
                frames = zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return n
            reply, verdict = self.gatekeeper.decide(frames)
            if verdict.reason:
                self._refused(verdict.reason, frames)
            # REP must answer every request to receive the next one
            zap.send_multipart(reply or [b"1.0", b"", b"500", b"cannot parse", b"", b""])
        return budget

    def _refused(self, reason: str, frames: list[bytes]) -> None:
        self.refused[reason] += 1
        address = frames[3].decode("ascii", "replace")[:64] if len(frames) > 3 else "?"
        key = "?"
        if len(frames) > 6 and len(frames[6]) == 32:
            key = key_hint(z85.encode(frames[6]))
        domain = frames[2].decode("ascii", "replace")[:16] if len(frames) > 2 else "?"
        self.throttle.warning(f"zap:{reason}", "refused a connection from %s on %s: %s "
                              "(public key %s)", address, domain, reason, key)

    # ---------------------------------------------------------------- monitors
    def drain_monitors(self) -> int:
        """Drain every monitor (from the sweep); return the failed handshakes counted."""
        return sum(self._drain(m) for m in self.monitors)

    def _drain(self, monitor: zmq.Socket, budget: int = 1000) -> int:
        failed = 0
        for _ in range(budget):
            try:
                frames = monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                event = parse_monitor_message(frames)["event"]
            except (ValueError, KeyError, IndexError, TypeError):
                continue
            if event & FAILED:
                failed += 1
                self.handshake_failed(frames[1].decode("ascii", "replace")[:64])
        return failed

    def handshake_failed(self, endpoint: str) -> None:
        """A connection to ``endpoint`` failed its handshake: counted, logged (throttled)."""
        self.refused["handshake"] += 1
        self.throttle.warning("handshake", "a connection failed its handshake on %s "
                              "(a plain or misconfigured client)", endpoint)

    # ---------------------------------------------------------------- allowlists
    def refresh(self, force: bool = False) -> bool:
        """Re-read the allowlists if they changed (at most once a second) or ``force``."""
        now = self.clock()
        if not force and now < self.next_refresh:
            return False
        self.next_refresh = now + REFRESH_PERIOD
        changed = self.keyring.refresh(force=force)
        if force:
            log.info("keys reloaded (SIGHUP)%s", "" if changed else ": no change")
        return changed

    def close(self, secured=()) -> None:
        """Stop the handshake monitors of the ``secured`` sockets, then close the monitors'
        and the ZAP handler's sockets."""
        for sock in secured:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:        # closed already, or never monitored: nothing to stop
                continue
        for sock in (*self.monitors, self.zap):
            sock.close(linger=0)
        self.monitors.clear()
