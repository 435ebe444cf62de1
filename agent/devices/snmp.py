"""Polling a device by SNMP (v2c or v3) with pysnmp on the devices' asyncio loop: plain data
out, no fleetwatch protocol.

One poll (:meth:`Poller.poll`) reads, one request at a time:

1. the system group (sysDescr, sysObjectID, sysUpTime, sysContact, sysName, sysLocation) and
   the target's extra OIDs (``{name: OID}``), in GETs of at most :data:`GET_CHUNK` OIDs;
2. IF-MIB's counters and states (:data:`COUNTER_COLUMNS`: ifAdminStatus, ifOperStatus,
   ifHCIn/OutOctets, ifIn/OutErrors, ifIn/OutDiscards, and ifIn/OutOctets while some
   interface lacks the 64-bit ones), and their names and speeds (:data:`NAME_COLUMNS`:
   ifName, ifDescr, ifAlias, ifType, ifSpeed, ifHighSpeed) at the first poll, every
   ``names_every`` polls and whenever an interface appears (in between, the last ones read);
3. HOST-RESOURCES-MIB's hrProcessorLoad and hrStorageTable.

Each of 2 and 3 is a table walk: GETBULKs asking the next rows of every column not finished
yet (Net-SNMP's ``snmptable`` way), ``max_repetitions`` rows at most, or as many as the last
poll found plus one (to see the end) when that is fewer (a device may answer fewer: Net-SNMP
sends at most 100 values, its ``maxGetbulkResponses``). A column that leaves its subtree is
finished: a device without HOST-RESOURCES gives none, and no error. A ``tooBig`` answer is
asked again with half the rows; a column stops at ``max_rows`` rows (``Poll.truncated``); an
OID that does not increase ends the poll (``invalid``). CPU goes to pysnmp's BER decoding
(pyasn1: about 60 us a value), hence few columns, and numeric OIDs sent as such
(pysnmp's hlapi resolves each through its MIB tree).

An answer counts only from the device's own address (pysnmp matches answers to requests by
request-id alone, so any host could answer for another): one from elsewhere fails the poll.

A poll never raises: a timeout, an SNMP error or a device's garbage is a :class:`Poll` with
``error`` (one line, never a secret) and ``fault`` (:data:`TIMEOUT`, :data:`AUTH`...),
counted in :attr:`Poller.counts`. Each request has the target's ``timeout`` and ``retries``
(Net-SNMP's ``-t`` and ``-r``), a whole poll at most ``deadline`` seconds.

The :class:`Poller` runs any number of polls at once on the running loop, at most
``max_concurrent`` (one request each in flight), so a device that answers slowly or not at
all holds one place and delays no other. Polls share one pysnmp engine (one UDP socket);
two v3 users of one name with different keys need an engine each (pysnmp keys its user table
by name), and the poller makes the few that takes.

Text a device sends (names, descriptions, extend output) is kept with control characters
escaped (:func:`fleetwatch.display.escape`) and cut at :data:`MAX_TEXT` characters.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

from pyasn1.type import univ
from pysnmp.entity.rfc3413.cmdgen import BulkCommandGeneratorSingleRun, GetCommandGenerator
from pysnmp.error import PySnmpError
from pysnmp.hlapi.v3arch.asyncio import (
    USM_AUTH_HMAC96_MD5, USM_AUTH_HMAC96_SHA, USM_AUTH_HMAC128_SHA224,
    USM_AUTH_HMAC192_SHA256, USM_AUTH_HMAC256_SHA384, USM_AUTH_HMAC384_SHA512,
    USM_PRIV_CBC56_DES, USM_PRIV_CBC168_3DES, USM_PRIV_CFB128_AES, USM_PRIV_CFB192_AES,
    USM_PRIV_CFB192_AES_BLUMENTHAL, USM_PRIV_CFB256_AES, USM_PRIV_CFB256_AES_BLUMENTHAL,
    USM_PRIV_NONE, CommunityData, SnmpEngine, Udp6TransportTarget, UdpTransportTarget,
    UsmUserData)
from pysnmp.hlapi.v3arch.asyncio.lcd import CommandGeneratorLcdConfigurator
from pysnmp.proto import errind, rfc1902, rfc1905

from agent.devices import config, oids
from agent.devices.poll import (  # noqa: F401 (the poll's kinds, named here too)
    ADDRESS, AUTH, DEADLINE, ERROR, INTERNAL, INVALID, TIMEOUT, Interface, Poll, Storage, System)
from fleetwatch.display import escape
from fleetwatch.logs import Throttle

log = logging.getLogger(__name__)

#: v3 authentication protocols, as a config names them
AUTH_PROTOCOLS = {"MD5": USM_AUTH_HMAC96_MD5, "SHA": USM_AUTH_HMAC96_SHA,
                  "SHA224": USM_AUTH_HMAC128_SHA224, "SHA256": USM_AUTH_HMAC192_SHA256,
                  "SHA384": USM_AUTH_HMAC256_SHA384, "SHA512": USM_AUTH_HMAC384_SHA512}
#: v3 privacy protocols. AES192 and AES256 extend a short key as Net-SNMP does
#: (draft-blumenthal: its ``AES-256``), AES192C and AES256C as Cisco does (draft-reeder);
#: they differ only when the auth protocol's digest is shorter than the key (MD5, SHA).
PRIV_PROTOCOLS = {"DES": USM_PRIV_CBC56_DES, "3DES": USM_PRIV_CBC168_3DES,
                  "AES": USM_PRIV_CFB128_AES, "AES192": USM_PRIV_CFB192_AES_BLUMENTHAL,
                  "AES256": USM_PRIV_CFB256_AES_BLUMENTHAL, "AES192C": USM_PRIV_CFB192_AES,
                  "AES256C": USM_PRIV_CFB256_AES}
#: a v3 key's fewest characters (USM's)
MIN_KEY = 8

#: OIDs in one GET at most
GET_CHUNK = 16
#: rows of one column a poll reads at most (``Target.max_rows``)
MAX_ROWS = 10_000
#: a text value's longest (characters, after escaping)
MAX_TEXT = 255
#: polls in flight at once (one request each). An answer of 100 values takes the loop 10
#: to 30 ms to decode (pyasn1), and pysnmp's
#: request timeout runs while it waits its turn: past about timeout / decode time answers
#: at once, requests time out with their answers already here, are sent again, and the
#: retries' answers lengthen the queue (bench/snmp.py: 100 at once failed half of 1,000
#: devices' polls, 20 at once none, at the same polls per second)
MAX_CONCURRENT = 20
#: polls between two reads of the interfaces' names and speeds
NAMES_EVERY = 10
#: how long a resolved address is used before it is looked up again (seconds)
RESOLVE_EVERY = 300.0

#: :class:`Interface`'s fields read at every poll -> their columns
COUNTER_COLUMNS = {
    "admin_status": oids.IF_ADMIN_STATUS, "oper_status": oids.IF_OPER_STATUS,
    "hc_in_octets": oids.IF_HC_IN_OCTETS, "hc_out_octets": oids.IF_HC_OUT_OCTETS,
    "in_errors": oids.IF_IN_ERRORS, "out_errors": oids.IF_OUT_ERRORS,
    "in_discards": oids.IF_IN_DISCARDS, "out_discards": oids.IF_OUT_DISCARDS,
    "in_octets": oids.IF_IN_OCTETS, "out_octets": oids.IF_OUT_OCTETS,
}
#: the 32-bit octet counters: walked only while some interface lacks the 64-bit ones
OCTETS_32 = ("in_octets", "out_octets")
#: :class:`Interface`'s fields read now and then (see the module's docstring)
NAME_COLUMNS = {"name": oids.IF_NAME, "descr": oids.IF_DESCR, "alias": oids.IF_ALIAS,
                "type": oids.IF_TYPE, "speed": oids.IF_SPEED, "high_speed": oids.IF_HIGH_SPEED}
#: :class:`Storage`'s fields -> their columns
STORAGE_COLUMNS = {"type": oids.HR_STORAGE_TYPE, "descr": oids.HR_STORAGE_DESCR,
                   "allocation_units": oids.HR_STORAGE_ALLOCATION_UNITS,
                   "size": oids.HR_STORAGE_SIZE, "used": oids.HR_STORAGE_USED}
PROCESSOR_COLUMNS = {"load": oids.HR_PROCESSOR_LOAD}

_NUMERIC_OID = re.compile(r"\.?([0-2](\.\d{1,10}){1,127})")
_LCD = CommandGeneratorLcdConfigurator()
_GET, _BULK = GetCommandGenerator(), BulkCommandGeneratorSingleRun()
_NULL = rfc1902.Null("")
#: where pysnmp keeps an answer's transport address while it hands the answer over
_RESPONSE = "rfc3412.receiveMessage:response"


# ------------------------------------------------------------------------ credentials
def read_secret(path, what: str) -> str:
    """The one-line secret in the file ``path`` (:func:`agent.devices.config.read_secret`),
    a ValueError naming ``what`` and the file, never the secret."""
    try:
        return config.read_secret(path)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


@dataclass(frozen=True)
class Credentials:
    """How to speak to a device: v2c with a community, or v3 with a user, an auth protocol
    and key, and a privacy protocol and key (none: authNoPriv). Made from files
    (:meth:`v2c`, :meth:`v3`); the secrets are never in its ``repr``."""

    version: str
    community: str = field(default="", repr=False)
    user: str = ""
    auth_protocol: str = ""
    auth_key: str = field(default="", repr=False)
    priv_protocol: str = ""
    priv_key: str = field(default="", repr=False)

    @classmethod
    def v2c(cls, community_file) -> Credentials:
        return cls("2c", community=read_secret(community_file, "SNMP community"))

    @classmethod
    def v3(cls, user: str, auth_protocol: str, auth_key_file, priv_protocol: str | None = None,
           priv_key_file=None) -> Credentials:
        """ValueError for an unknown protocol, a key file that cannot be read or a key
        shorter than USM's 8 characters (naming the file)."""
        if not user or len(user) > 32:
            raise ValueError(f"an SNMPv3 user name has 1 to 32 characters, not {len(user)}")
        if auth_protocol not in AUTH_PROTOCOLS:
            raise ValueError(f"unknown SNMPv3 auth protocol {auth_protocol!r}: expected one "
                             f"of {', '.join(AUTH_PROTOCOLS)}")
        if priv_protocol and priv_protocol not in PRIV_PROTOCOLS:
            raise ValueError(f"unknown SNMPv3 privacy protocol {priv_protocol!r}: expected "
                             f"one of {', '.join(PRIV_PROTOCOLS)}")
        if priv_protocol and priv_key_file is None:
            raise ValueError(f"the privacy protocol {priv_protocol} needs a privacy key file")
        keys = []
        for what, path in (("auth key", auth_key_file),
                           ("privacy key", priv_key_file if priv_protocol else None)):
            key = "" if path is None else read_secret(path, f"SNMPv3 {what}")
            if path is not None and len(key) < MIN_KEY:
                raise ValueError(f"SNMPv3 {what}: {path}: holds fewer than {MIN_KEY} "
                                 "characters (USM needs at least 8)")
            keys.append(key)
        return cls("3", user=user, auth_protocol=auth_protocol, auth_key=keys[0],
                   priv_protocol=priv_protocol or "", priv_key=keys[1])

    @classmethod
    def of_usm(cls, usm) -> Credentials:
        """The v3 credentials of a config's user (``agent.devices.config.Usm``: a device's
        ``snmp`` section, a trap user): no ``priv_key_file``, no privacy (authNoPriv)."""
        return cls.v3(usm.user, usm.auth_protocol, usm.auth_key_file,
                      usm.priv_protocol if usm.priv_key_file else None,
                      usm.priv_key_file or None)

    @cached_property
    def auth_data(self) -> CommunityData | UsmUserData:
        """pysnmp's form of them."""
        if self.version == "2c":
            return CommunityData(self.community, mpModel=1)
        return UsmUserData(
            self.user, authKey=self.auth_key, authProtocol=AUTH_PROTOCOLS[self.auth_protocol],
            privKey=self.priv_key or None,
            privProtocol=PRIV_PROTOCOLS[self.priv_protocol] if self.priv_protocol
            else USM_PRIV_NONE)


@dataclass(frozen=True)
class Target:
    """A device to poll: ``timeout`` (seconds) and ``retries`` per request, ``deadline``
    (seconds) for a whole poll, ``max_repetitions`` rows per GETBULK, ``max_rows`` of each
    column at most."""

    address: str
    port: int
    credentials: Credentials
    timeout: float = 1.0
    retries: int = 1
    max_repetitions: int = 25
    max_rows: int = MAX_ROWS
    deadline: float = 30.0

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


class _Failure(Exception):
    def __init__(self, fault: str, text: str):
        super().__init__(text)
        self.fault = fault


@dataclass
class _Shape:
    """What a target's last complete poll found: rows of each walk, whether every interface
    had 64-bit octets, the interfaces' names and speeds and how many polls ago they were
    read."""

    rows: dict[str, int]
    hc: bool
    names: dict[int, dict]
    age: int = 0


# ------------------------------------------------------------------------ values
def plain(value):
    """A pysnmp value as plain data: an int (integers, counters, gauges, TimeTicks), text
    (an OCTET STRING, escaped and cut), a dotted OID or IPv4 address, or None (noSuchObject,
    noSuchInstance, endOfMibView, NULL, Opaque)."""
    if _end(value):
        return None
    if isinstance(value, univ.Integer):
        return int(value)
    if isinstance(value, rfc1902.IpAddress):
        return ".".join(str(b) for b in value.asNumbers())
    if isinstance(value, rfc1902.Opaque):
        return None
    if isinstance(value, univ.OctetString):
        return device_text(value.asOctets())
    if isinstance(value, univ.ObjectIdentifier):
        return str(value)
    return None


def device_text(raw: bytes) -> str:
    """Bytes a device sent as text: UTF-8 (else replaced), trailing NULs dropped, control
    characters escaped, at most :data:`MAX_TEXT` characters."""
    return escape(raw.rstrip(b"\x00").decode("utf-8", errors="replace"))[:MAX_TEXT]


def numeric_oid(oid) -> str | None:
    """``oid`` without a leading dot if it is a numeric OID, else None."""
    m = _NUMERIC_OID.fullmatch(oid.strip()) if isinstance(oid, str) else None
    return m.group(1) if m else None


def _end(value) -> bool:
    return isinstance(value, (rfc1905.EndOfMibView, rfc1905.NoSuchObject,
                              rfc1905.NoSuchInstance))


def _line(error) -> str:
    return escape(" ".join(str(error).split()))[:300] or type(error).__name__


# ------------------------------------------------------------------------ the poller
class Poller:
    """Polls on the running asyncio loop, at most ``max_concurrent`` at once; ``clock``
    stamps :attr:`Poll.at`. :meth:`close` on the same loop when done.

    :attr:`counts`: ``polls``, ``polls_failed``, ``polls_failed.FAULT`` per fault,
    ``requests``, ``too_big`` (GETBULKs asked again with fewer rows), ``truncated`` (polls
    that hit ``max_rows``), ``foreign_answers`` (an answer from another address than the
    device's: the poll fails ``invalid``), ``bad_values`` (a value of the wrong type or a
    row index that is not one number, ignored), ``extra_invalid`` (an extra OID that is not
    numeric, skipped), ``engines`` (pysnmp engines made)."""

    def __init__(self, max_concurrent: int = MAX_CONCURRENT, clock=time.monotonic,
                 names_every: int = NAMES_EVERY, resolve_every: float = RESOLVE_EVERY):
        self.clock, self.names_every, self.resolve_every = clock, names_every, resolve_every
        self.counts: Counter = Counter()
        self.in_flight = 0
        self._gate = asyncio.Semaphore(max_concurrent)
        #: [(engine, {v3 user name: its credentials there})]
        self._engines: list[tuple[SnmpEngine, dict[str, Credentials]]] = []
        #: (address, port, timeout, retries) -> (pysnmp's transport target, when to resolve)
        self._transports: dict[tuple, tuple] = {}
        self._shapes: dict[Target, _Shape] = {}
        self._throttle = Throttle(log)

    async def poll_all(self, jobs) -> list[Poll]:
        """Poll each ``(target, extra_oids)`` of ``jobs`` concurrently; their Polls in order."""
        return list(await asyncio.gather(*(self.poll(t, extra) for t, extra in jobs)))

    async def poll(self, target: Target, extra_oids: dict[str, str] | None = None) -> Poll:
        """Poll ``target`` (its system group, interfaces, HOST-RESOURCES and ``extra_oids``
        {name: numeric OID}). Never raises (but for the caller's cancellation)."""
        async with self._gate:
            self.in_flight += 1
            started = self.clock()
            poll = Poll(at=started)
            try:
                async with asyncio.timeout(target.deadline):
                    await self._poll(target, extra_oids or {}, poll)
            except _Failure as failure:
                poll.fault, poll.error = failure.fault, str(failure)
            except TimeoutError:
                poll.fault = DEADLINE
                poll.error = f"{target}: the poll took longer than its {target.deadline:g}s"
            except PySnmpError as e:
                poll.fault, poll.error = ERROR, f"{target}: {_line(e)}"
            except Exception as e:                       # a bug of ours: logged, not fatal
                self._throttle.error("internal", "polling %s failed: %r", target, e)
                log.debug("polling %s failed", target, exc_info=True)
                poll.fault, poll.error = INTERNAL, f"{target}: internal error ({_line(e)})"
            finally:
                self.in_flight -= 1
            poll.duration = self.clock() - started
        self.counts["polls"] += 1
        self.counts["requests"] += poll.requests
        if poll.fault:
            self.counts["polls_failed"] += 1
            self.counts[f"polls_failed.{poll.fault}"] += 1
        if poll.truncated:
            self.counts["truncated"] += 1
        return poll

    def forget(self, target: Target) -> None:
        """Drop what the poller remembers of ``target`` (a device no longer polled)."""
        self._shapes.pop(target, None)

    def close(self) -> None:
        """Close the engines' sockets and timers (on the loop they run on)."""
        for engine, _ in self._engines:
            engine.close_dispatcher()
        self._engines.clear()
        self._transports.clear()

    # ---------------------------------------------------------------- one poll
    async def _poll(self, target: Target, extra_oids: dict, poll: Poll) -> None:
        session = _Session(self._engine(target.credentials), target,
                           await self._transport(target), poll, self.counts)
        extra = {}
        for name, oid in extra_oids.items():
            number = numeric_oid(oid)
            if number is None:
                self.counts["extra_invalid"] += 1
            else:
                extra[name] = number
        wanted = [*oids.SYSTEM_FIELDS.values(), *extra.values()]
        values = []
        for start in range(0, len(wanted), GET_CHUNK):
            values += await session.get(wanted[start:start + GET_CHUNK])
        system = dict(zip(oids.SYSTEM_FIELDS, values))
        poll.system = System(**{k: self._typed(v, k == "uptime") for k, v in system.items()})
        poll.extra = dict(zip(extra, values[len(oids.SYSTEM_FIELDS):]))

        shape = self._shapes.get(target)
        rows = shape.rows if shape else {}
        counters = {k: c for k, c in COUNTER_COLUMNS.items()
                    if not (shape and shape.hc and k in OCTETS_32)}
        interfaces = self._rows(await session.walk(counters, rows.get("interfaces")))
        names = shape.names if shape else {}
        fresh = shape is None or shape.age + 1 >= self.names_every or \
            not interfaces.keys() <= names.keys()
        if fresh:
            names = self._rows(await session.walk(NAME_COLUMNS, len(interfaces)))
        poll.interfaces = {i: Interface(index=i, **names.get(i, {}), **row)
                           for i, row in interfaces.items()}
        loads = self._rows(await session.walk(PROCESSOR_COLUMNS, rows.get("processors")))
        poll.processors = {i: row["load"] for i, row in loads.items() if row["load"] is not None}
        storage = self._rows(await session.walk(STORAGE_COLUMNS, rows.get("storage")),
                             text=("descr", "type"))
        poll.storage = {i: Storage(index=i, **row) for i, row in storage.items()}

        if len(self._shapes) >= MAX_ROWS and target not in self._shapes:
            self._shapes.clear()
        self._shapes[target] = _Shape(
            {"interfaces": len(interfaces), "processors": len(loads), "storage": len(storage)},
            bool(interfaces) and all(i.hc_in_octets is not None and i.hc_out_octets is not None
                                     for i in poll.interfaces.values()),
            names, 0 if fresh else shape.age + 1)

    def _rows(self, table: dict[str, dict[int, object]], text=("name", "descr", "alias")
              ) -> dict[int, dict]:
        """{index: {field: value}} from a walk's {field: {index: value}}, each value of the
        wrong type None (``text``: the fields that are text, the others integers)."""
        rows: dict[int, dict] = {}
        for name, column in table.items():
            numeric = name not in text
            for index, value in column.items():
                rows.setdefault(index, dict.fromkeys(table))[name] = \
                    self._typed(value, numeric)
        return dict(sorted(rows.items()))

    def _typed(self, value, numeric: bool):
        """``value`` if it has the column's type (an int, or text), else None (counted)."""
        if value is None or isinstance(value, int) == numeric:
            return value
        self.counts["bad_values"] += 1
        return None

    def _engine(self, credentials: Credentials) -> SnmpEngine:
        """An engine where ``credentials``' v3 user name means these credentials."""
        for engine, users in self._engines:
            if credentials.version != "3" or \
                    users.setdefault(credentials.user, credentials) == credentials:
                return engine
        engine = SnmpEngine()
        self.counts["engines"] += 1
        self._engines.append((engine, {credentials.user: credentials}
                              if credentials.version == "3" else {}))
        return engine

    async def _transport(self, target: Target):
        """pysnmp's target for ``target``, its name resolved at most every
        ``resolve_every`` seconds (an address literal once)."""
        key = (target.address, target.port, target.timeout, target.retries)
        now = time.monotonic()
        known = self._transports.get(key)
        if known is not None and now < known[1]:
            return known[0]
        try:
            literal = ipaddress.ip_address(target.address)
        except ValueError:
            literal = None
        kind = Udp6TransportTarget if literal is not None and literal.version == 6 \
            else UdpTransportTarget
        try:
            made = await kind.create((target.address, target.port), timeout=target.timeout,
                                     retries=target.retries)
        except PySnmpError as e:
            raise _Failure(ADDRESS, f"{target}: {_line(e)}") from None
        if len(self._transports) >= MAX_ROWS:
            self._transports.clear()
        self._transports[key] = (made, math.inf if literal else now + self.resolve_every)
        return made


#: v3 security failures a device reports: what to tell the operator
_AUTH_HINTS = {
    errind.WrongDigest: "authentication failure: wrong digest (the v3 auth key or "
                        "protocol is not the device's)",
    errind.UnknownUserName: "the device knows no v3 user {user!r}",
    errind.UnknownSecurityName: "the device knows no v3 user {user!r}",
    errind.DecryptionError: "decryption failed (the v3 privacy key or protocol is not the "
                            "device's)",
    errind.UnsupportedSecurityLevel: "the device refuses this security level for v3 user "
                                     "{user!r}",
    errind.NotInTimeWindow: "not in the device's time window (its engine boots or time "
                            "changed)",
    errind.AuthenticationFailure: "authentication failure",
    errind.AuthenticationError: "authentication failure",
    errind.UnknownEngineID: "unknown SNMP engine id",
}


class _Session:
    """The requests of one poll of one target, through pysnmp's command generators (the
    hlapi's ``get_cmd``/``bulk_cmd`` without their MIB lookups)."""

    def __init__(self, engine, target: Target, transport, poll: Poll, counts: Counter):
        self.engine, self.target, self.transport = engine, target, transport
        self.poll, self.counts = poll, counts
        self.auth = target.credentials.auth_data

    async def _send(self, generator, *args) -> tuple:
        """(error indication, error status, error index, var-binds) of one request. An
        answer that came from another address than the device's is none of its (pysnmp
        matches an answer to its request by request-id alone): _Failure, counted
        ``foreign_answers``."""
        future = asyncio.get_running_loop().create_future()

        def done(engine, handle, indication, status, index, var_binds, context):
            if future.done():
                return
            source = None
            if not indication:            # called while pysnmp processes the response
                try:
                    source = engine.observer.get_execution_context(_RESPONSE)[
                        "transportAddress"]
                except KeyError:
                    pass
            future.set_result((indication, status, index, var_binds, source))

        address, _ = _LCD.configure(self.engine, self.auth, self.transport, b"")
        generator.send_varbinds(self.engine, address, None, b"", *args, done)
        self.poll.requests += 1
        *response, source = await future
        if not response[0] and (source is None or tuple(source)[:2] !=
                                tuple(self.transport.transport_address)[:2]):
            self.counts["foreign_answers"] += 1
            where = "an unknown address" if source is None else f"{source[0]}:{source[1]}"
            raise _Failure(INVALID, f"{self.target}: answered from {where}, not the device's")
        return response

    async def get(self, wanted: list[str]) -> list:
        """The plain values of ``wanted``, in order."""
        response = await self._send(_GET, [(rfc1902.ObjectName(o), _NULL) for o in wanted])
        var_binds = self._check(*response)
        if len(var_binds) != len(wanted):
            raise _Failure(INVALID, f"{self.target}: {len(var_binds)} values answered to a "
                                    f"GET of {len(wanted)}")
        return [plain(value) for _, value in var_binds]

    async def walk(self, columns: dict[str, str], expected: int | None = None
                   ) -> dict[str, dict[int, object]]:
        """{field: {index: plain value}} of ``columns`` ({field: column OID}) in one table
        walk, asking for ``expected`` rows (and one more, to see the end) when the caller
        knows how many there were. A row whose index is not one number is skipped."""
        prefixes = {f: tuple(int(n) for n in c.split(".")) for f, c in columns.items()}
        last = dict(prefixes)                    # field -> the last OID read in its column
        table: dict[str, dict[int, object]] = {f: {} for f in columns}
        active = list(columns)
        most = max(1, self.target.max_repetitions)
        while active:
            repetitions = most
            if expected is not None:
                read = min(len(table[f]) for f in active)
                repetitions = min(most, max(1, expected - read + 1))
            asked = [(rfc1902.ObjectName(last[f]), _NULL) for f in active]
            response = await self._send(_BULK, 0, repetitions, asked)
            if _too_big(response) and repetitions > 1:
                most = max(1, repetitions // 2)
                self.counts["too_big"] += 1
                continue
            var_binds = self._check(*response)
            if not var_binds:
                raise _Failure(INVALID, f"{self.target}: an empty answer to a GETBULK")
            finished = set()
            for i, (name, value) in enumerate(var_binds):
                f = active[i % len(active)]
                if f in finished:
                    continue
                oid, prefix = tuple(name), prefixes[f]
                if _end(value) or oid[:len(prefix)] != prefix:
                    finished.add(f)
                    continue
                if oid <= last[f]:
                    raise _Failure(INVALID, f"{self.target}: OID {name} does not follow "
                                            f"{'.'.join(map(str, last[f]))}")
                last[f] = oid
                if len(oid) == len(prefix) + 1:
                    table[f][oid[-1]] = plain(value)
                else:
                    self.counts["bad_values"] += 1
                if len(table[f]) >= self.target.max_rows:
                    self.poll.truncated = True
                    finished.add(f)
            active = [f for f in active if f not in finished]
        return table

    def _check(self, indication, status, index, var_binds) -> list:
        """The response's var-binds, or _Failure for what went wrong."""
        target = self.target
        if indication:
            if isinstance(indication, errind.RequestTimedOut):
                tries = target.retries + 1
                # a v3 device says so of a wrong user or auth key, not of a wrong privacy key
                who = "community" if target.credentials.version == "2c" else "privacy key"
                raise _Failure(TIMEOUT, f"{target}: no SNMP answer in {tries} "
                                        f"{'try' if tries == 1 else 'tries'} of "
                                        f"{target.timeout:g}s (down, or not our {who})")
            hint = _AUTH_HINTS.get(type(indication))
            if hint is not None:
                self.poll.answered = True
                raise _Failure(AUTH, f"{target}: " + hint.format(user=target.credentials.user))
            if isinstance(indication, errind.EncryptionError):
                raise _Failure(ERROR, f"{target}: {indication} (SNMPv3 privacy needs the "
                                      "cryptography package: the snmp extra)")
            raise _Failure(ERROR, f"{target}: {_line(indication)}")
        self.poll.answered = True
        if int(status):
            at = ""
            if 0 < int(index) <= len(var_binds):
                at = f" at {var_binds[int(index) - 1][0]}"
            name = status.prettyPrint() if hasattr(status, "prettyPrint") else str(status)
            raise _Failure(ERROR, f"{target}: the device answered {escape(name)[:64]}{at}")
        return list(var_binds)


def _too_big(response) -> bool:
    indication, status = response[0], response[1]
    return isinstance(indication, errind.TooBig) or (not indication and int(status) == 1)


async def poll(target: Target, extra_oids: dict[str, str] | None = None,
               clock=time.monotonic) -> Poll:
    """One poll with a poller of its own (closed after it): for a single device, a test or a
    command line. Many devices share a :class:`Poller`."""
    poller = Poller(clock=clock)
    try:
        return await poller.poll(target, extra_oids)
    finally:
        poller.close()
