"""A notification as a device sent it (:class:`Trap`), decoded from pysnmp's varbinds
(:func:`decode`): the trap's OID and name, sysUpTime, the interface a linkDown or linkUp
names, and the other varbinds, bounded (:data:`MAX_VARBINDS` of at most :data:`MAX_VALUE`
characters) and their text escaped. The receiver (:mod:`agent.devices.traps`) decides which
notifications come this far."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pyasn1.type import univ
from pysnmp.proto import rfc1902

from fleetwatch.display import escape

from agent.devices import oids

MAX_VARBINDS, MAX_VALUE = 64, 255

#: snmpTrapCommunity.0: a v1 trap's community, which the v1 -> v2 translation adds when told
#: it (a secret: never kept)
TRAP_COMMUNITY = "1.3.6.1.6.3.18.1.4.0"
#: the columns whose varbinds fill a Trap's link fields
LINK_FIELDS = {oids.IF_INDEX: "if_index", oids.IF_ADMIN_STATUS: "admin_status",
               oids.IF_OPER_STATUS: "oper_status"}

class Varbind(NamedTuple):
    """One variable of a notification: its numeric OID, its name where known (``ifIndex.4``;
    else the OID), its ASN.1 type (``Integer``, ``OctetString``...) and its value as text."""
    oid: str
    name: str
    type: str
    value: str


@dataclass(frozen=True)
class Trap:
    """One notification, as received from a device."""
    #: the UDP peer: the device it is (``device_of``)
    address: str
    port: int
    device: str
    #: "1", "2c" or "3"; "trap" or "inform" (an inform was answered)
    version: str
    kind: str
    #: snmpTrapOID.0 (numeric) and its name (``linkDown``; else the OID)
    oid: str
    name: str
    #: sysUpTime.0 in seconds, None when the notification has none
    uptime: float | None
    #: the other varbinds, at most MAX_VARBINDS (``dropped``: how many more came; ``cut``:
    #: how many values were cut to MAX_VALUE characters)
    varbinds: tuple[Varbind, ...]
    dropped: int = 0
    cut: int = 0
    #: the v3 user it came as ("" with a community, which is never kept)
    user: str = ""
    #: from ifIndex, ifAdminStatus, ifOperStatus varbinds (linkDown, linkUp): oids.IF_STATUS
    if_index: int | None = None
    admin_status: int | None = None
    oper_status: int | None = None
    #: when it came (the receiver's clock: time.monotonic unless given another)
    at: float = 0.0

    def summary(self, limit: int = 400) -> str:
        """One line: the name, then ``name=value`` of the varbinds, cut at ``limit``."""
        line = " ".join([self.name, *(f"{v.name}={v.value}" for v in self.varbinds)])
        return line if len(line) <= limit else line[:limit - 3] + "..."


class Malformed(ValueError):
    """A notification that is none: ``str()`` says why."""


def text(value) -> str:
    """A varbind's value as text: an OCTET STRING that is UTF-8 with at most a quarter of
    control characters as text (those escaped), else ``0x`` and hex; others as pysnmp shows
    them (IpAddress dotted, OID numeric, TimeTicks and counters as numbers)."""
    if isinstance(value, univ.OctetString) and not isinstance(value, rfc1902.IpAddress):
        raw = bytes(value)
        try:
            decoded = raw.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + raw.hex()
        controls = sum(1 for c in decoded if not c.isprintable() and c not in "\t\n\r")
        return escape(decoded) if controls * 4 <= len(decoded) else "0x" + raw.hex()
    return escape(value.prettyPrint())


def _integer(value) -> int | None:
    return int(value) if isinstance(value, univ.Integer) else None


def decode(var_binds, **received) -> Trap:
    """The :class:`Trap` of a notification's ``var_binds`` (pysnmp's (OID, value) pairs, v2
    form), ``received`` the Trap's other fields (address, port, device, version, kind, user,
    at). Raises :class:`Malformed` without a snmpTrapOID.0 that is an OID."""
    oid, uptime, kept, dropped, cut = None, None, [], 0, 0
    link: dict[str, int] = {}
    for name, value in var_binds:
        numeric = str(name)
        if numeric == oids.SNMP_TRAP_OID and oid is None:
            if not isinstance(value, univ.ObjectIdentifier):
                raise Malformed(f"snmpTrapOID.0 is a {type(value).__name__}, not an OID")
            oid = str(value)
            continue
        if numeric == oids.SYS_UPTIME and uptime is None and _integer(value) is not None:
            uptime = int(value) / 100
            continue
        if numeric == TRAP_COMMUNITY:
            continue
        column, _, index = numeric.rpartition(".")
        field = LINK_FIELDS.get(column)
        if field is not None and _integer(value) is not None:
            link.setdefault(field, int(value))
            if index.isdigit():             # ifOperStatus.4: ifIndex 4
                link.setdefault("if_index", int(index))
        if len(kept) == MAX_VARBINDS:
            dropped += 1
            continue
        shown = text(value)
        cut += len(shown) > MAX_VALUE
        kept.append(Varbind(numeric, oids.name_of(numeric), type(value).__name__,
                            shown[:MAX_VALUE]))
    if oid is None:
        raise Malformed("no snmpTrapOID.0")
    return Trap(oid=oid, name=oids.name_of(oid), uptime=uptime, varbinds=tuple(kept),
                dropped=dropped, cut=cut, **link, **received)
