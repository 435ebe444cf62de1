"""What a device's polls (:class:`agent.devices.poll.Poll`) say: its metrics, its checks and
its events. Pure logic over two polls, the previous good one and the current one: no I/O,
no clock but the polls' own ``at``.

Metrics (Graphite paths below the device's host, SPEC 4.7):

- per interface, NODE its name as a path node (below): ``if.NODE.in_bps``, ``out_bps``
  (from the 64-bit octet counters, the 32-bit ones where the device has no others),
  ``in_errors_ps``, ``out_errors_ps``, ``in_discards_ps``, ``out_discards_ps`` (per second),
  ``speed_bps``, ``oper_up`` (1 or 0), ``utilisation_percent`` (the busier direction, when
  the speed is known);
- ``uptime_seconds`` (sysUpTime), ``poll_seconds`` (how long the poll took);
- ``cpu.N.load_percent`` (hrProcessorLoad, N counting the processors from 0 in index order)
  and ``cpu.load_percent`` (their mean);
- ``storage.NODE.used_percent``, ``used_bytes``, ``size_bytes`` (hrStorageTable: a mount
  point named as the agent's own ``disk`` collector names it, ``/`` -> ``root``,
  ``/var/lib`` -> ``var_lib``; another description as a node, ``Physical memory`` ->
  ``Physical_memory``);
- each extra OID whose value is a number (an integer, or text that reads as one) under its
  configured name.

Rates need two good polls. A counter that went down is a reset (no rate, never a negative
one): always for a 64-bit counter; for a 32-bit one, unless it was in its upper half and the
wrapped rate is one the interface can carry (octets up to 1.1 times its speed, when known),
which is a wrap (2^32 added). A rate that went up is taken as it is, whatever the speed says
(a Linux ``lo`` claims 10 Mbit/s). A reboot gives no rates at all.

Interface names: ifName, else ifDescr, else ``ifINDEX``, made a path node (each run of
characters other than ``A-Z a-z 0-9 _ -`` becomes ``_``, dots too:
:func:`fleetwatch.metricpath.node`; at most :data:`MAX_NODE` characters). Two interfaces
whose nodes are equal (``Gi0/1`` and ``Gi0.1``) keep them apart: the lowest ifIndex keeps
the node, each other one gets ``_INDEX`` after it. ``include`` and ``exclude`` (globs on the
name, case-sensitive) choose the interfaces; at most ``max_interfaces`` of them, in ifIndex
order, the rest counted (``interfaces_dropped``).

Checks, as Nagios plugins print them: ``if_NODE`` per interface: OK up (or dormant); OK
"admin down" when it is administratively down (never an alert); CRITICAL down,
lowerLayerDown or notPresent while admin up; WARNING testing; UNKNOWN otherwise; perfdata
``in_bps`` and ``out_bps``. ``snmp``, the device's reachability: OK when the poll answered,
CRITICAL when nothing did (a timeout, a deadline, an address that does not resolve), UNKNOWN
when the device answered but could not be read (credentials, an SNMP error, garbage).

Events: a reboot, when sysUpTime is lower than the previous poll's plus the time between them
allows (less a slack); a sysUpTime wrap (2^32 hundredths: 497 days) is no reboot. Net-SNMP's
sysUpTime is its agent's: a restart of snmpd reads as a reboot too, and the text says so.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from agent.collectors import mount_name
from agent.devices import oids, poll as polled
from fleetwatch.metricpath import node
from plugins.output import perfdata_text

#: interfaces of one device at most (the config's ``max_interfaces``), and storage entries
MAX_INTERFACES, MAX_STORAGE = 1000, 64
#: a name node's longest (so that ``if_NODE_INDEX`` stays a 64-character plugin name)
MAX_NODE = 48
#: the first path nodes of the metrics above: an extra OID's name must not start so
RESERVED = ("if", "cpu", "storage", "uptime_seconds", "poll_seconds")
#: a check's status
OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
#: the reachability check's name, and the prefix of an interface's
SNMP_CHECK, IF_CHECK = "snmp", "if_"
#: a rate of octets past this times the interface's speed cannot be
SPEED_MARGIN = 1.1
#: sysUpTime's hundredths before it wraps
UPTIME_WRAP = 2 ** 32
#: the reboot test's slack: seconds, and the share of the time between the polls
SLACK_SECONDS, SLACK_SHARE = 2.0, 0.02

_WORDS = ("OK", "WARNING", "CRITICAL", "UNKNOWN")
#: ifOperStatus (while admin up) -> the interface check's status
_OPER = {1: OK, 5: OK, 2: CRITICAL, 6: CRITICAL, 7: CRITICAL, 3: WARNING}
#: Poll faults where nothing answered
_SILENT = (polled.TIMEOUT, polled.DEADLINE, polled.ADDRESS)
#: the Counter32 columns of errors and discards -> their metrics
_COUNTERS_32 = (("in_errors", "in_errors_ps"), ("out_errors", "out_errors_ps"),
                ("in_discards", "in_discards_ps"), ("out_discards", "out_discards_ps"))


@dataclass(frozen=True)
class Check:
    """A check's result: ``output`` the status line without perfdata, ``perfdata`` items as
    RESULT carries them (SPEC 4.5)."""

    name: str
    status: int
    output: str
    perfdata: list = field(default_factory=list)

    @property
    def line(self) -> str:
        """The line a Nagios plugin would print: ``output | perfdata``."""
        perf = perfdata_text(self.perfdata)
        return f"{self.output} | {perf}" if perf else self.output


@dataclass(frozen=True)
class Event:
    """Something that happened to the device, for a NOTIFY (``severity`` as NOTIFY's)."""

    kind: str
    severity: str
    text: str


@dataclass
class Reading:
    """What one poll says: ``metrics`` {path below the host: number}, ``checks``, ``events``."""

    metrics: dict[str, float] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


class Readings:
    """One device's readings, poll after poll: it keeps the last good poll to compute rates
    from. :attr:`counts`: ``interfaces_dropped``, ``storage_dropped``, ``name_collisions``,
    ``counter_resets``, ``counter_wraps``, ``rates_impossible``, ``reboots``,
    ``uptime_wraps``, ``extra_missing``, ``extra_not_numeric``, ``polls_failed``."""

    def __init__(self, max_interfaces: int = MAX_INTERFACES, include=(), exclude=(),
                 max_storage: int = MAX_STORAGE):
        self.max_interfaces, self.max_storage = max_interfaces, max_storage
        self.include, self.exclude = tuple(include), tuple(exclude)
        self.counts: Counter = Counter()
        self.previous: polled.Poll | None = None
        #: {ifIndex: path node} of the interfaces the last good poll kept
        self.nodes: dict[int, str] = {}

    def update(self, poll: polled.Poll) -> Reading:
        """The reading of ``poll``; a good one becomes the previous poll of the next."""
        if not poll.ok:
            self.counts["polls_failed"] += 1
            return Reading(checks=[reachability(poll)])
        reading = self.read(self.previous, poll)
        self.previous = poll
        return reading

    def read(self, previous: polled.Poll | None, current: polled.Poll) -> Reading:
        """The reading of the good poll ``current`` after the good poll ``previous`` (None:
        the first, no rates)."""
        reading = Reading(checks=[reachability(current)])
        metrics = reading.metrics
        self._extra(current, metrics)
        elapsed = current.at - previous.at if previous is not None else 0.0
        rebooted = previous is not None and self._rebooted(previous, current, elapsed)
        if rebooted:
            reading.events.append(reboot_event(previous, current, elapsed))
        uptime = current.system.uptime if current.system else None
        if uptime is not None:
            metrics["uptime_seconds"] = uptime / 100
        metrics["poll_seconds"] = round(current.duration, 6)
        before = previous.interfaces if previous is not None and not rebooted else {}
        self.nodes = self.interface_nodes(current.interfaces)
        for index, name in self.nodes.items():
            interface = current.interfaces[index]
            rates = self._rates(before.get(index), interface, elapsed)
            metrics.update({f"if.{name}.{k}": v for k, v in rates.items()})
            reading.checks.append(interface_check(name, interface, rates))
        loads = [load for _, load in sorted(current.processors.items())]
        for n, load in enumerate(loads):
            metrics[f"cpu.{n}.load_percent"] = load
        if loads:
            metrics["cpu.load_percent"] = sum(loads) / len(loads)
        self._storage(current, metrics)
        return reading

    def link_check(self, if_index: int | None, admin: int | None, oper: int | None,
                   fallback_oper: int) -> Check | None:
        """The ``if_NODE`` check a linkDown or linkUp trap gives at once: the interface
        ``if_index`` of the last good poll (None when it has none, or it is not among the
        interfaces kept) with the trap's admin and oper status (``fallback_oper`` when the
        trap carries none: down for linkDown, up for linkUp). No rates: the next poll's."""
        if self.previous is None or if_index is None:
            return None
        interface = self.previous.interfaces.get(if_index)
        name = self.nodes.get(if_index)
        if interface is None or name is None:
            return None
        interface = replace(interface, oper_status=oper if oper is not None else fallback_oper,
                            admin_status=admin if admin is not None
                            else interface.admin_status)
        return interface_check(name, interface, {})

    # ---------------------------------------------------------------- names
    def interface_nodes(self, interfaces: dict[int, polled.Interface]) -> dict[int, str]:
        """{ifIndex: its path node} of the interfaces kept (filters, bound), in ifIndex
        order, nodes made distinct (see the module's docstring)."""
        chosen = {}
        for index, interface in sorted(interfaces.items()):
            label = interface_label(interface)
            if self.include and not any(fnmatchcase(label, g) for g in self.include):
                continue
            if any(fnmatchcase(label, g) for g in self.exclude):
                continue
            if len(chosen) >= self.max_interfaces:
                self.counts["interfaces_dropped"] += 1
                continue
            chosen[index] = label
        return self._distinct(chosen, "if")

    def _distinct(self, labels: dict[int, str], fallback: str, name=node) -> dict[int, str]:
        """{index: node} with no two nodes equal: a later index's node gets ``_INDEX``."""
        out: dict[int, str] = {}
        taken: set[str] = set()
        for index, label in labels.items():
            base = name(label)[:MAX_NODE] or f"{fallback}{index}"
            candidate = base
            while candidate in taken:
                self.counts["name_collisions"] += 1
                candidate = f"{candidate}_{index}"
            taken.add(candidate)
            out[index] = candidate
        return out

    # ---------------------------------------------------------------- rates
    def _rates(self, before: polled.Interface | None, now: polled.Interface,
               elapsed: float) -> dict[str, float]:
        """An interface's metrics: states, speed, and the rates since ``before``."""
        out: dict[str, float] = {}
        if now.oper_status is not None:
            out["oper_up"] = 1 if now.oper_status == oids.UP else 0
        speed = interface_speed(now)
        if speed:
            out["speed_bps"] = speed
        if before is None or elapsed <= 0:
            return out
        most = speed * SPEED_MARGIN / 8 if speed else None     # octets/s
        for direction in ("in", "out"):
            hc = f"hc_{direction}_octets"
            if getattr(before, hc) is not None and getattr(now, hc) is not None:
                rate = self._rate(getattr(before, hc), getattr(now, hc), 64, elapsed, most)
            else:
                plain = f"{direction}_octets"
                rate = self._rate(getattr(before, plain), getattr(now, plain), 32, elapsed,
                                  most)
            if rate is not None:
                out[f"{direction}_bps"] = rate * 8
        for column, metric in _COUNTERS_32:
            rate = self._rate(getattr(before, column), getattr(now, column), 32, elapsed)
            if rate is not None:
                out[metric] = rate
        if speed and "in_bps" in out and "out_bps" in out:
            out["utilisation_percent"] = max(out["in_bps"], out["out_bps"]) / speed * 100
        return out

    def _rate(self, before: int | None, now: int | None, bits: int, elapsed: float,
              most: float | None = None) -> float | None:
        """Per second from ``before`` to ``now`` (counters of ``bits``), None when there is
        no rate: a value missing, a reset (a wrap would mean a rate past ``most``)."""
        if before is None or now is None:
            return None
        delta = now - before
        if delta >= 0:
            return delta / elapsed
        if bits == 64 or before < 2 ** 31:
            self.counts["counter_resets"] += 1
            return None
        rate = (delta + 2 ** 32) / elapsed
        if most is not None and rate > most:
            self.counts["rates_impossible"] += 1      # a reset, not a wrap
            return None
        self.counts["counter_wraps"] += 1
        return rate

    def _rebooted(self, previous: polled.Poll, current: polled.Poll, elapsed: float) -> bool:
        before = previous.system.uptime if previous.system else None
        now = current.system.uptime if current.system else None
        if before is None or now is None:
            return False
        expected = before + elapsed * 100
        slack = (SLACK_SECONDS + previous.duration + current.duration
                 + SLACK_SHARE * elapsed) * 100
        if now >= expected - slack:
            return False
        if expected + slack >= UPTIME_WRAP and abs(now - (expected - UPTIME_WRAP)) <= slack:
            self.counts["uptime_wraps"] += 1
            return False
        self.counts["reboots"] += 1
        return True

    # ---------------------------------------------------------------- the rest
    def _storage(self, poll: polled.Poll, metrics: dict) -> None:
        rows = dict(list(sorted(poll.storage.items()))[:self.max_storage])
        self.counts["storage_dropped"] += len(poll.storage) - len(rows)
        labels = {i: s.descr or "" for i, s in rows.items()}
        for index, name in self._distinct(labels, "storage", storage_node).items():
            entry = rows[index]
            units = entry.allocation_units
            if not units or units < 0 or entry.size is None or entry.size < 0:
                continue
            metrics[f"storage.{name}.size_bytes"] = entry.size * units
            if entry.used is not None and entry.used >= 0:
                metrics[f"storage.{name}.used_bytes"] = entry.used * units
                if entry.size:
                    metrics[f"storage.{name}.used_percent"] = entry.used / entry.size * 100

    def _extra(self, poll: polled.Poll, metrics: dict) -> None:
        for name, value in poll.extra.items():
            if value is None:
                self.counts["extra_missing"] += 1
                continue
            number = number_of(value)
            if number is None:
                self.counts["extra_not_numeric"] += 1
                continue
            metrics[".".join(node(part) or "_" for part in name.split("."))] = number


def interface_label(interface: polled.Interface) -> str:
    """What an interface is called: ifName, else ifDescr, else ``ifINDEX``."""
    return interface.name or interface.descr or f"if{interface.index}"


def storage_node(descr: str) -> str:
    """A storage entry's path node: a mount point as the ``disk`` collector names it."""
    return mount_name(descr) if descr.startswith("/") else node(descr)


def interface_speed(interface: polled.Interface) -> int | None:
    """Bits per second: ifSpeed below its ceiling (2^32-1), else ifHighSpeed's Mbit/s;
    None when neither says (0 is unknown too)."""
    if interface.speed and interface.speed < 2 ** 32 - 1:
        return interface.speed
    if interface.high_speed:
        return interface.high_speed * 1_000_000
    return None


def number_of(value) -> float | int | None:
    """An extra OID's value as a number: an int, or text that reads as a finite number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def interface_check(name: str, interface: polled.Interface, rates: dict) -> Check:
    """The ``if_NODE`` check of an interface (see the module's docstring)."""
    label = interface_label(interface)
    if interface.alias:
        label += f" ({interface.alias})"
    admin, oper = interface.admin_status, interface.oper_status
    word = oids.IF_STATUS.get(oper, "unknown" if oper is None else f"status {oper}")
    if admin is not None and admin != oids.UP:
        status = OK
        text = f"{label} admin {oids.IF_STATUS.get(admin, f'status {admin}')}"
    else:
        status = _OPER.get(oper, UNKNOWN)
        text = f"{label} {word}" + ("" if admin is not None else " (admin status unknown)")
    speed = rates.get("speed_bps")
    if speed:
        text += f", {bits(speed)}"
    if "in_bps" in rates and "out_bps" in rates:
        text += f", in {bits(rates['in_bps'])}, out {bits(rates['out_bps'])}"
    perfdata = [_perf(k, rates[k], speed) for k in ("in_bps", "out_bps") if k in rates]
    return Check(IF_CHECK + name, status, f"IF {_WORDS[status]} - {text}", perfdata)


def reachability(poll: polled.Poll) -> Check:
    """The ``snmp`` check: did the device answer the poll?"""
    perfdata = [_perf("time", round(poll.duration, 6), None, "s")]
    if poll.ok:
        system = poll.system or polled.System()
        text = f"answered in {poll.duration:.3f}s, {len(poll.interfaces)} interfaces"
        if system.name:
            text += f", sysName {system.name}"
        return Check(SNMP_CHECK, OK, f"SNMP OK - {text}", perfdata)
    status = CRITICAL if poll.fault in _SILENT else UNKNOWN
    return Check(SNMP_CHECK, status, f"SNMP {_WORDS[status]} - {poll.error}", perfdata)


def reboot_event(previous: polled.Poll, current: polled.Poll, elapsed: float) -> Event:
    """The event of a reboot between ``previous`` and ``current``."""
    now, before = current.system.uptime / 100, previous.system.uptime / 100
    return Event("reboot", "warning",
                 f"rebooted about {duration(now)} ago: sysUpTime {duration(now)}, was "
                 f"{duration(before)} at the poll {duration(elapsed)} before (the device or "
                 "its SNMP agent restarted)")


def _perf(label: str, value: float, most: float | None, uom: str = "") -> dict:
    return {"label": label, "value": value, "uom": uom, "warn": None, "crit": None,
            "min": 0, "max": most}


def bits(rate: float) -> str:
    """``1.5 Gb/s``, ``100 Mb/s``, ``12 b/s``."""
    for scale, unit in ((1e12, "Tb/s"), (1e9, "Gb/s"), (1e6, "Mb/s"), (1e3, "kb/s")):
        if rate >= scale:
            return f"{rate / scale:.3g} {unit}"
    return f"{rate:.3g} b/s"


def duration(seconds: float) -> str:
    """``3d 4h``, ``2h 5m``, ``7m 3s``, ``42s``."""
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    for big, small, a, b in ((days, hours, "d", "h"), (hours, minutes, "h", "m"),
                             (minutes, secs, "m", "s")):
        if big:
            return f"{big}{a} {small}{b}"
    return f"{secs}s"
