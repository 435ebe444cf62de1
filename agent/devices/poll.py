"""What one SNMP poll of a device gives (:mod:`agent.devices.snmp` makes it): plain data, no
pysnmp, so that what reads it (:mod:`agent.devices.readings`) needs none."""

from __future__ import annotations

from dataclasses import dataclass, field

#: ``Poll.fault``: no answer; the device refused our v3 credentials; it answered with an
#: SNMP error; it answered nonsense; the address does not resolve; the poll took longer than
#: its deadline; a bug of ours (logged)
TIMEOUT, AUTH, ERROR, INVALID, ADDRESS, DEADLINE, INTERNAL = (
    "timeout", "auth", "error", "invalid", "address", "deadline", "internal")

@dataclass(frozen=True)
class System:
    """The system group: ``uptime`` in hundredths of a second (sysUpTime's TimeTicks);
    None for what the device did not give."""

    descr: str | None = None
    object_id: str | None = None
    uptime: int | None = None
    contact: str | None = None
    name: str | None = None
    location: str | None = None


@dataclass(frozen=True)
class Interface:
    """One interface (its ifIndex, ifTable's and ifXTable's columns; None: the device gave
    none). ``speed`` is ifSpeed (bit/s), ``high_speed`` ifHighSpeed (Mbit/s); octets, errors
    and discards are the raw counters (``hc_``: the 64-bit ones)."""

    index: int
    name: str | None = None
    descr: str | None = None
    alias: str | None = None
    type: int | None = None
    admin_status: int | None = None
    oper_status: int | None = None
    speed: int | None = None
    high_speed: int | None = None
    in_octets: int | None = None
    out_octets: int | None = None
    hc_in_octets: int | None = None
    hc_out_octets: int | None = None
    in_errors: int | None = None
    out_errors: int | None = None
    in_discards: int | None = None
    out_discards: int | None = None


@dataclass(frozen=True)
class Storage:
    """One hrStorageTable row: ``type`` an OID (:data:`agent.devices.oids.STORAGE_TYPES`),
    ``size`` and ``used`` in ``allocation_units`` of bytes."""

    index: int
    descr: str | None = None
    type: str | None = None
    allocation_units: int | None = None
    size: int | None = None
    used: int | None = None


@dataclass
class Poll:
    """One poll of one device. ``at``: the caller's clock (monotonic seconds) when it
    started; ``duration`` seconds. ``processors``: hrDeviceIndex -> load (percent).
    ``extra``: name -> value (int, or text; None when the device has no such OID).
    ``error`` says in one line why the poll failed ('' when it did not), ``fault`` which
    kind of failure; ``answered``: the device answered at all (an authentication error is
    an answer). What was read before a failure is kept."""

    at: float
    system: System | None = None
    interfaces: dict[int, Interface] = field(default_factory=dict)
    processors: dict[int, int] = field(default_factory=dict)
    storage: dict[int, Storage] = field(default_factory=dict)
    extra: dict[str, int | str | None] = field(default_factory=dict)
    error: str = ""
    fault: str = ""
    duration: float = 0.0
    answered: bool = False
    truncated: bool = False
    requests: int = 0

    @property
    def ok(self) -> bool:
        return not self.error
