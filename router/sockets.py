"""The sockets a router binds (SPEC 2, "Topology"): made, secured, bound and advertised.

``agents`` (ROUTER, ``ROUTER_MANDATORY``; no ``ROUTER_HANDOVER``: a routing id stays with its
connection, SPEC 7.3), ``control`` (ROUTER), ``tail`` (XPUB), one PUSH per sink type and,
with ``bind.sites``, ``sites`` (ROUTER, SPEC 4.10). Each has ``linger`` 0 and
``MAXMSGSIZE``; with CURVE the relay's :class:`router.doorman.Doorman` makes each a CURVE
server of its ZAP domain (``agents``, ``backends``, ``sites``). :meth:`RouterSockets.bind`
binds them, once the relay watches its sinks' connections, and returns the endpoints as
advertised (:func:`router.endpoints.advertised`). The relay owns them: each is appended to
its list as it is made, so that it closes them all even when a bind fails.
"""

from __future__ import annotations

import zmq

from router.config import RouterConfig
from router.doorman import Doorman
from router.endpoints import advertised

#: the agents socket's listen backlog (the kernel caps it at net.core.somaxconn)
AGENTS_BACKLOG = 65535


class RouterSockets:
    """The sockets of ``config``'s ``bind`` in ``ctx``, appended to ``made``."""

    def __init__(self, ctx: zmq.Context, config: RouterConfig, doorman: Doorman | None,
                 made: list, fqdn):
        self.ctx, self.config, self.made, self.fqdn = ctx, config, made, fqdn
        self.max_body = config.limits.max_message_bytes
        limits = config.limits
        # a restart's thousands of reconnects at once: with libzmq's listen backlog of 100
        # the kernel drops the SYNs above it and their clients retry 1, 3, 7, 15, 31 s later
        self.agents = self._socket(zmq.ROUTER, ROUTER_MANDATORY=1, SNDHWM=limits.agent_hwm,
                                   BACKLOG=AGENTS_BACKLOG)
        self.control = self._socket(zmq.ROUTER, ROUTER_MANDATORY=1)
        self.tail = self._socket(zmq.XPUB, SNDHWM=limits.tail_hwm)
        self.sinks = {name: self._socket(zmq.PUSH, SNDHWM=limits.sink_hwm)
                      for name in config.bind.sinks}
        self.sites = None
        if config.bind.sites:
            self.sites = self._socket(zmq.ROUTER, ROUTER_MANDATORY=1, SNDHWM=limits.sink_hwm,
                                      RCVHWM=limits.sink_hwm)
        if doorman is not None:
            doorman.secure(self.agents, "agents")
            for sock in (self.control, self.tail):
                doorman.secure(sock, "backends")
            for sock in self.sinks.values():     # (the relay watches their connections)
                doorman.secure(sock, "backends", watch=False)
            if self.sites is not None:          # only security.sites keys link (SPEC 4.10)
                doorman.secure(self.sites, "sites")

    def _socket(self, kind: int, **options) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        self.made.append(sock)
        sock.linger = 0
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_body)
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name), value)
        return sock

    def _bind(self, sock: zmq.Socket, endpoint: str) -> str:
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as e:
            raise zmq.ZMQError(e.errno, f"cannot bind {endpoint}: {e.strerror}") from None
        bound = sock.last_endpoint.decode()
        return advertised(bound, self.config.advertise_host, self.fqdn)

    def bind(self) -> dict:
        """Bind every socket; return the advertised endpoints (``sites`` with bind.sites)."""
        bind = self.config.bind
        endpoints = {
            "agents": self._bind(self.agents, bind.agents),
            "control": self._bind(self.control, bind.control),
            "tail": self._bind(self.tail, bind.tail),
            "sinks": {name: self._bind(sock, bind.sinks[name])
                      for name, sock in self.sinks.items()},
        }
        if self.sites is not None:
            endpoints["sites"] = self._bind(self.sites, bind.sites)
        return endpoints
