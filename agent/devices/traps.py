"""SNMP notifications from the poller's devices: traps and informs (v1, v2c, v3) received on
one UDP port, each handed on as a :class:`agent.devices.notifications.Trap`
(docs/operating/devices.md, "Traps").

pysnmp does the wire (decoding, communities, USM authentication and privacy, the inform's
answer); this module decides what is let in and what comes out:

- a datagram is the device's whose address it came from (``device_of(ip)``, the poller's map),
  never what a varbind says; one from an address no device has is dropped before it is
  decoded (``traps_unknown_source``), and one beyond its source's token bucket too
  (``traps_rate_limited``: ``rate`` a second, bursts of ``burst``);
- a wrong community, an unknown v3 user or a wrong key is dropped by pysnmp and counted
  here (``traps_auth_failed``), with the device's name in a throttled log line and never
  the secret; an inform sender's engine discovery is counted apart (``traps_v3_discovery``);
- a v3 trap comes under its sender's engine ID, to which a user's keys are localized: the
  engine ID is learned from the first trap of a configured user from a device's address,
  which is then taken again, and kept if it authenticates; at most ``max_engine_ids`` an
  address, and as many tries at once, then one a minute (``traps_engine_ids_refused``);
- ``on_trap(trap)`` is called before an inform is answered: it returns normally once the
  trap is kept (spooled); ``False`` or an exception refuses it (``traps_refused``), and an
  inform is then not answered, so that its sender sends it again; a resent inform already
  taken (the same content and sysUpTime.0 from the same address, within INFORM_MEMORY
  seconds) is answered again and not handed on twice (``traps_duplicates``);
- anything else (not SNMP, not a notification, no ``snmpTrapOID.0``) is
  ``traps_malformed``; nothing a sender sends stops the receiver.

Runs on the devices' asyncio loop: :meth:`TrapReceiver.start` and :meth:`TrapReceiver.close`
are coroutines of that loop, and ``on_trap`` is called on it.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import logging
import socket
import time
from typing import Callable, Sequence

from pyasn1.codec.ber import decoder
from pysnmp.carrier.asyncio.dgram import udp, udp6
from pysnmp.entity import config, engine
from pysnmp.entity.rfc3413 import ntfrcv
from pysnmp.proto import errind, rfc1902, rfc3411
from pysnmp.proto.api import v2c
from pysnmp.proto.proxy import rfc2576
from pysnmp.proto.secmod.rfc3414.service import UsmSecurityParameters

from fleetwatch.display import escape
from fleetwatch.logs import Throttle

from agent.devices.config import read_communities
from agent.devices.notifications import Malformed, Trap, decode
from agent.devices.snmp import AUTH_PROTOCOLS, PRIV_PROTOCOLS, Credentials

log = logging.getLogger(__name__)

#: The receiver's counters (all from zero).
COUNTERS = ("traps_datagrams", "traps_unknown_source", "traps_rate_limited", "traps_received",
            "traps_informs", "traps_duplicates", "traps_refused", "traps_auth_failed",
            "traps_v3_discovery", "traps_engine_ids_refused", "traps_malformed",
            "traps_varbinds_dropped", "traps_values_cut")
#: message processing model -> SNMP version
VERSIONS = {0: "1", 1: "2c", 3: "3"}
#: USM failures that are an inform sender finding this engine's ID and time: normal
DISCOVERY = (errind.unknownEngineID, errind.notInTimeWindow)


class Buckets:
    """A token bucket per source address (``rate`` tokens a second, at most ``burst``), at
    most ``max_sources`` of them (the least recently used forgotten: a full bucket)."""

    def __init__(self, rate: float, burst: float, clock=time.monotonic,
                 max_sources: int = 10_000):
        self.rate, self.burst, self.clock, self.max_sources = rate, burst, clock, max_sources
        self.buckets: collections.OrderedDict[str, tuple[float, float]] = \
            collections.OrderedDict()

    def take(self, source: str) -> bool:
        """Whether ``source`` may send one more datagram now (a token taken)."""
        now = self.clock()
        tokens, then = self.buckets.pop(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        allowed = tokens >= 1
        self.buckets[source] = (tokens - 1 if allowed else tokens, now)
        if len(self.buckets) > self.max_sources:
            self.buckets.popitem(last=False)
        return allowed


def peer(host: str) -> str:
    """A UDP peer's address as ``device_of`` is asked it: an IPv4-mapped IPv6 one (a
    dual-stack socket's) as IPv4."""
    if ":" in host:
        mapped = ipaddress.IPv6Address(host.split("%")[0]).ipv4_mapped
        return str(mapped) if mapped is not None else host
    return host


class _Gate:
    """pysnmp's UDP transport, each datagram shown to ``gate`` first, which hands it to
    pysnmp at once (:meth:`deliver`: the base class schedules it) and so sees what came of
    it."""

    def __init__(self, gate):
        super().__init__()
        self.gate = gate
        self.opened, self.closed = asyncio.Event(), asyncio.Event()

    def connection_made(self, transport):
        super().connection_made(transport)
        self.opened.set()

    def connection_lost(self, exc):
        super().connection_lost(exc)
        self.closed.set()

    def datagram_received(self, datagram, address):
        self.gate(self, datagram, address)

    def deliver(self, address, datagram: bytes) -> None:
        if self._callback_function is not None:
            self._callback_function(self, address, datagram)


class _Gate4(_Gate, udp.UdpTransport):
    pass


class _Gate6(_Gate, udp6.Udp6Transport):
    pass


class _Receiver(ntfrcv.NotificationReceiver):
    """pysnmp's notification receiver, answering an inform only once ``take`` kept it."""

    def __init__(self, snmp_engine, take):
        super().__init__(snmp_engine, lambda *args: None)
        self.take = take

    def process_pdu(self, snmp_engine, mp_model, security_model, security_name,
                    security_level, context_engine_id, context_name, pdu_version, pdu,
                    max_size, state_reference):
        if self.take(mp_model, security_name, pdu):
            super().process_pdu(snmp_engine, mp_model, security_model, security_name,
                                security_level, context_engine_id, context_name,
                                pdu_version, pdu, max_size, state_reference)


#: pysnmp's execution points where a message failed its community or USM checks
SM_FAILURES = ("rfc2576.prepareDataElements:sm-failure", "rfc3412.prepareDataElements:sm-failure")
#: what came of a message that passed its community or USM checks
AUTHENTIC = frozenset({"traps_received", "traps_duplicates", "traps_refused",
                       "traps_malformed"})
#: how long (seconds) and how many taken informs are remembered, to answer a resent one again
#: without taking it twice
INFORM_MEMORY, MAX_INFORMS = 300.0, 4096


def master_keys(user: Credentials) -> dict:
    """pysnmp's ``add_v3_user`` arguments for ``user``, its passphrases made master keys
    (RFC 3414 A.2's million-octet hash, done once here: localizing one to an engine ID is
    one hash more)."""
    auth = AUTH_PROTOCOLS[user.auth_protocol]
    keys = {"authProtocol": auth, "authKeyType": config.USM_KEY_TYPE_MASTER,
            "authKey": config.AUTH_SERVICES[auth].hash_passphrase(
                rfc1902.OctetString(user.auth_key))}
    if user.priv_protocol:
        priv = PRIV_PROTOCOLS[user.priv_protocol]
        keys.update(privProtocol=priv, privKeyType=config.USM_KEY_TYPE_MASTER,
                    privKey=config.PRIV_SERVICES[priv].hash_passphrase(
                        auth, rfc1902.OctetString(user.priv_key)))
    return keys


class TrapReceiver:
    """Receives the devices' notifications on ``listen`` (host, port: an IPv4 or IPv6
    address; port 0: any, see :attr:`address`) and hands each to ``on_trap`` (the module's
    docstring says how).

    ``device_of(ip)`` names the device an address is (IPv4 dotted, IPv6 as Python's
    ipaddress writes it; an IPv4-mapped IPv6 peer as IPv4), or None. The v2c communities are
    read from ``communities_file`` here, once; ``users`` are v3 :class:`Credentials` (their
    keys read from their files when they were made); ``engine_ids`` are (user, hex engine ID)
    pairs known beforehand (config ``engine_id``), added at start: their traps need no
    learning.
    """

    def __init__(self, device_of: Callable[[str], str | None],
                 on_trap: Callable[[Trap], bool | None], *,
                 listen: tuple[str, int] = ("127.0.0.1", 1162), communities_file: str = "",
                 users: Sequence[Credentials] = (), engine_ids: Sequence[tuple[str, str]] = (),
                 rate: float = 10.0, burst: float = 50.0, clock=time.monotonic,
                 max_engine_ids: int = 4, max_sources: int = 10_000):
        self.device_of, self.on_trap, self.listen, self.clock = device_of, on_trap, listen, clock
        self.communities = read_communities(communities_file) if communities_file else []
        if any(user.version != "3" for user in users):
            raise ValueError("traps: users are SNMPv3 credentials")
        self.users = {user.user: master_keys(user) for user in users}
        if not self.communities and not self.users:
            raise ValueError("traps: no communities_file and no users: no trap could come in")
        self.engine_ids = []
        for user, engine_id in engine_ids:
            try:
                self.engine_ids.append((bytes.fromhex(engine_id.removeprefix("0x")), user))
            except ValueError:
                raise ValueError(f"traps: the engine ID of user {user!r} is not hex") from None
            if user not in self.users:
                raise ValueError(f"traps: an engine ID for {user!r}, who is none of the users")
        self.buckets = Buckets(rate, burst, clock, max_sources)
        #: tries at learning an engine ID, an address: max_engine_ids at once, then one a
        #: minute (each localizes keys, and a failed one deletes them: ~10 ms of the loop)
        self.tries = Buckets(1 / 60, max_engine_ids, clock, max_sources)
        self.max_engine_ids, self.max_sources = max_engine_ids, max_sources
        self.counters = collections.Counter(dict.fromkeys(COUNTERS, 0))
        self.throttle = Throttle(log, 10.0, clock)
        #: the bound address, once started
        self.address: tuple[str, int] | None = None
        #: address -> the (engine ID, user) pairs learned from it (authenticated), oldest first
        self.learned: collections.OrderedDict[str, list[tuple[bytes, str]]] = \
            collections.OrderedDict()
        #: the informs taken (a hash of address and content) -> until when remembered
        self.recent: collections.OrderedDict[int, float] = collections.OrderedDict()
        self._engine = self._transport = self._receiver = self._sock = None
        #: while pysnmp handles a datagram: (ip, port, device); what came of it (a counter's
        #: name); the (engine ID, user) of a known user under an unknown engine ID
        self._source: tuple[str, int, str] | None = None
        self._outcome: str | None = None
        self._learn: tuple[bytes, str] | None = None

    # ------------------------------------------------------------------ lifetime
    async def start(self) -> tuple[str, int]:
        """Listen (on the running loop); the address bound. An OSError names the address
        (a port below 1024 needs CAP_NET_BIND_SERVICE)."""
        host, port = self.listen
        six = ":" in host
        self._sock = sock = socket.socket(socket.AF_INET6 if six else socket.AF_INET,
                                          socket.SOCK_DGRAM)
        try:
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            hint = " (a port below 1024 needs CAP_NET_BIND_SERVICE)" \
                if e.errno == errno.EACCES and port < 1024 else ""
            raise OSError(e.errno, f"traps: cannot listen on {host}:{port}: "
                                   f"{e.strerror}{hint}") from None
        sock.setblocking(False)
        self.address = sock.getsockname()[:2]
        try:
            self._engine = snmp_engine = engine.SnmpEngine()
            self._transport = (_Gate6 if six else _Gate4)(self._datagram)
            config.add_transport(snmp_engine, udp6.DOMAIN_NAME if six else udp.DOMAIN_NAME,
                                 self._transport.open_server_mode(sock=sock))
            for i, community in enumerate(self.communities):
                config.add_v1_system(snmp_engine, f"traps-{i}", community)
            for user in self.users:             # under this engine's ID: informs
                self._add_user(user)
            for engine_id, user in self.engine_ids:     # under a device's: its traps
                self._add_user(user, engine_id)
            snmp_engine.observer.register_observer(self._failed, *SM_FAILURES)
            self._receiver = _Receiver(snmp_engine, self._take)
            await asyncio.wait_for(self._transport.opened.wait(), 10)
        except BaseException:
            await self.close()
            raise
        log.info("receiving traps on %s port %d", *self.address)
        return self.address

    async def close(self) -> None:
        """Stop listening; returns once the socket is closed."""
        snmp_engine, self._engine = self._engine, None
        if snmp_engine is None:
            return
        if self._receiver is not None:
            self._receiver.close(snmp_engine)
        snmp_engine.observer.unregister_observer()
        snmp_engine.close_dispatcher()          # the transport, its socket, pysnmp's timer
        if self._transport is not None and self._transport.opened.is_set():
            await asyncio.wait_for(self._transport.closed.wait(), 10)
        else:
            self._sock.close()

    # ------------------------------------------------------------------ datagrams
    def _datagram(self, transport: _Gate, datagram: bytes, address) -> None:
        self.counters["traps_datagrams"] += 1
        ip = peer(address[0])
        device = self.device_of(ip)
        if device is None:
            self._drop("traps_unknown_source", "unknown", "traps from %s dropped: no device "
                       "has that address", ip)
            return
        if not self.buckets.take(ip):
            self._drop("traps_rate_limited", "rate", "traps from %s (%s) dropped: more than "
                       "%g a second", ip, device, self.buckets.rate)
            return
        source = (ip, address[1], device)
        self._handle(transport, address, datagram, source)
        if self._learn is not None and self._may_learn(ip, device):
            engine_id, user = learning = self._learn
            self._add_user(user, engine_id)     # its keys localized to that engine ID
            self._handle(transport, address, datagram, source)
            if self._outcome in AUTHENTIC:
                self._remember(ip, learning)
            else:
                config.delete_v3_user(self._engine, user,
                                      securityEngineId=v2c.OctetString(engine_id))
        if self._outcome is None:
            self._drop("traps_malformed", "malformed", "a datagram from %s (%s) is no SNMP "
                       "notification this receiver takes", ip, device)
        else:
            self.counters[self._outcome] += 1

    def _handle(self, transport: _Gate, address, datagram: bytes, source) -> None:
        """pysnmp decodes, checks, answers and calls :meth:`_failed` or :meth:`_take`."""
        self._source, self._outcome, self._learn = source, None, None
        try:
            transport.deliver(address, datagram)
        except Exception as e:                  # pysnmp's own, on what it could not handle
            self._outcome = None
            self.throttle.warning("error", "a datagram from %s (%s) not taken: %s",
                                  source[0], source[2], escape(str(e))[:200])
        finally:
            self._source = None

    def _drop(self, counter: str, key: str, msg: str, *args) -> None:
        self.counters[counter] += 1
        self.throttle.warning(key, msg, *args)

    def _failed(self, snmp_engine, point: str, variables: dict, context) -> None:
        """pysnmp refused a message's community or USM credentials."""
        if self._source is None:
            return
        failure = variables["statusInformation"].get("errorIndication")
        if failure in DISCOVERY:
            self._outcome = "traps_v3_discovery"
            return
        self._outcome = "traps_auth_failed"
        if point == SM_FAILURES[1] and failure == errind.unknownSecurityName:
            self._learn = self._engine_and_user(variables["securityParameters"])
            if self._learn is not None:
                return                          # known user, unknown engine: learn, again
        ip, _, device = self._source
        self.throttle.warning("auth", "a notification from %s (%s) refused: %s", ip, device,
                              failure)

    def _engine_and_user(self, security_parameters) -> tuple[bytes, str] | None:
        """A v3 message's (engine ID, user) when the user is one of ours."""
        try:
            params, _ = decoder.decode(bytes(security_parameters),
                                       asn1Spec=UsmSecurityParameters())
            engine_id, user = bytes(params[0]), bytes(params[3]).decode("utf-8")
        except Exception:                       # pyasn1's errors, a user that is no text
            return None
        return (engine_id, user) if engine_id and user in self.users else None

    def _may_learn(self, ip: str, device: str) -> bool:
        """Whether ``ip`` has fewer than ``max_engine_ids`` pairs learned and a try left
        (else counted)."""
        if len(self.learned.get(ip, ())) < self.max_engine_ids and self.tries.take(ip):
            return True
        self._drop("traps_engine_ids_refused", "engines", "v3 traps from %s (%s) refused: an "
                   "unknown engine ID, and %d learned or tried from that address already",
                   ip, device, self.max_engine_ids)
        return False

    def _remember(self, ip: str, learned: tuple[bytes, str]) -> None:
        self.learned.setdefault(ip, []).append(learned)
        self.learned.move_to_end(ip)
        if len(self.learned) > self.max_sources:
            for engine_id, user in self.learned.popitem(last=False)[1]:
                config.delete_v3_user(self._engine, user,
                                      securityEngineId=v2c.OctetString(engine_id))

    def _add_user(self, user: str, engine_id: bytes | None = None) -> None:
        """``user`` under ``engine_id`` (None: this engine's), its keys localized to it."""
        where = {} if engine_id is None else {"securityEngineId": v2c.OctetString(engine_id)}
        config.add_v3_user(self._engine, user, **self.users[user], **where)

    # ------------------------------------------------------------------ notifications
    def _take(self, mp_model: int, security_name, pdu) -> bool:
        """A notification pysnmp accepted: hand it on; whether it was taken (then pysnmp
        answers an inform)."""
        if self._source is None:
            return False
        ip, port, device = self._source
        confirmed = pdu.tagSet in rfc3411.CONFIRMED_CLASS_PDUS
        if mp_model == 0:
            pdu = rfc2576.v1_to_v2(pdu)         # no community given: none in the varbinds
        now = self.clock()
        try:
            trap = decode(v2c.apiPDU.get_varbinds(pdu), address=ip, port=port,
                          device=device, version=VERSIONS.get(mp_model, str(mp_model)),
                          kind="inform" if confirmed else "trap",
                          user=str(security_name) if mp_model == 3 else "", at=now)
        except Malformed as e:
            self._outcome = "traps_malformed"
            self.throttle.warning("decode", "a notification from %s (%s) dropped: %s", ip,
                                  device, e)
            return False
        # pysnmp hides the request-id of a v1/v2c inform: one resent is the same inform with
        # the same sysUpTime.0, sent again from the same address
        key = hash((ip, trap.version, trap.oid, trap.uptime, trap.varbinds)) \
            if confirmed else None
        if key is not None and self._taken_before(key, now):
            self._outcome = "traps_duplicates"
            return True
        try:
            taken = self.on_trap(trap) is not False
        except Exception as e:                  # the taker's failure: the sender sends again
            self.throttle.error("taker", "a trap from %s (%s) was not taken: %r", ip, device, e)
            taken = False
        if not taken:
            self._outcome = "traps_refused"
            return False
        self._outcome = "traps_received"
        self.counters["traps_informs"] += confirmed
        self.counters["traps_varbinds_dropped"] += trap.dropped
        self.counters["traps_values_cut"] += trap.cut
        if key is not None:
            self.recent[key] = now + INFORM_MEMORY
            if len(self.recent) > MAX_INFORMS:
                self.recent.popitem(last=False)
        return True

    def _taken_before(self, key: int, now: float) -> bool:
        while self.recent and next(iter(self.recent.values())) < now:
            self.recent.popitem(last=False)
        return key in self.recent
