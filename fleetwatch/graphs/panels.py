"""Which graphs a host page shows, in which order, each in one unit: the catalogue of the
series the agent's collectors send (agent/collectors.py) and the checks' perfdata.

A host page is read top down by someone asking "what is wrong with this machine": CPU, load,
memory, disk use per mount, network and disk traffic first (:data:`PANELS`), then each
check's perfdata, one graph per unit of measure (its ``uom``, from the check's latest
result); then, behind a fold, the rest: the checks' states (0 to 3), the raw counters and
sizes, and the agent's own counters (``agent.*``). A graph never mixes units: bytes and
percent, or bytes and packets, are two graphs. A counter (the collectors' totals since boot,
a perfdata ``c``) is drawn as its rate per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

#: the sections of a host page's graphs, in order
HOST, CHECKS, MORE = "host", "checks", "more"


@dataclass(frozen=True)
class Panel:
    """One graph of the catalogue: ``key`` (stable: the anchor and what a pin names), its
    title, its unit, the series it draws (globs over the path below the host), whether
    they are counters drawn as rates, and its section."""
    key: str
    title: str
    unit: str
    patterns: tuple[str, ...]
    rate: bool = False
    section: str = HOST


PANELS = (
    Panel("cpu", "CPU", "%", ("cpu.*",)),
    Panel("load", "Load average", "", ("load.*",)),
    Panel("memory", "Memory and swap used", "%", ("memory.used_percent", "swap.used_percent")),
    Panel("disk", "Disk used, per mount", "%", ("disk.*.used_percent",)),
    Panel("network", "Network in and out", "B/s", ("netio.bytes_recv", "netio.bytes_sent"),
          rate=True),
    Panel("diskio", "Disk reads and writes", "B/s", ("diskio.read_bytes",
                                                     "diskio.write_bytes"), rate=True),
    Panel("procs", "Processes", "", ("procs.count",)),
    Panel("packets", "Network packets", "/s", ("netio.packets_*",), rate=True, section=MORE),
    Panel("net-errors", "Network errors and drops", "/s",
          ("netio.err*", "netio.drop*"), rate=True, section=MORE),
    Panel("diskops", "Disk operations", "/s", ("diskio.reads", "diskio.writes"), rate=True,
          section=MORE),
    Panel("disk-free", "Disk free, per mount", "B", ("disk.*.free",), section=MORE),
    Panel("memory-bytes", "Memory and swap", "B", ("memory.total", "memory.available",
                                                   "swap.total", "swap.used"), section=MORE),
    Panel("uptime", "Uptime", "s", ("uptime.seconds",), section=MORE),
)

#: a perfdata unit of measure (Nagios plugin guidelines) -> the axis's unit and whether it
#: is a counter: the graphite sink writes values in base units (sinks/graphite/paths.py
#: ``UNITS``: bytes, seconds); an unknown one is shown as it is
UOMS = {"": ("", False), "%": ("%", False), "c": ("/s", True),
        **{u: ("s", False) for u in ("s", "ms", "us", "µs")},
        **{u: ("B", False) for u in ("B", "KB", "kB", "KiB", "MB", "MiB", "GB", "GiB", "TB",
                                     "TiB")}}


@dataclass
class Arranged:
    """A graph to draw: the panel's key and title, its unit, whether its series are rates,
    its section, and its series as (name in the legend, the series)."""
    key: str
    title: str
    unit: str
    rate: bool
    section: str
    series: list = field(default_factory=list)


def arrange(relatives: dict[str, object], units: dict[str, str] | None = None) -> list[Arranged]:
    """The graphs of a host's series (``relatives``: the path below the host -> its
    series), in the page's order: the catalogue's, then the checks' perfdata by check and
    unit (``units``: ``checks.P.LABEL`` -> its uom), then the rest (section MORE). Every
    series is in one graph."""
    units = units or {}
    left = dict(relatives)
    out: list[Arranged] = []
    for panel in PANELS:
        names = sorted(n for n in left if any(fnmatchcase(n, p) for p in panel.patterns))
        if names:
            out.append(Arranged(panel.key, panel.title, panel.unit, panel.rate, panel.section,
                                [(_legend(n, panel), left.pop(n)) for n in names]))
    checks: dict[tuple[str, str], Arranged] = {}
    for name in sorted(n for n in left if n.startswith("checks.") and n.count(".") >= 2):
        _, plugin, label = name.split(".", 2)
        if label == "status":
            graph = Arranged(f"check-{plugin}-status", f"{plugin}: state (0 OK, 1 WARNING, "
                             f"2 CRITICAL, 3 UNKNOWN)", "", False, MORE)
            graph.series.append(("status", left.pop(name)))
            checks[(plugin, "\0status")] = graph
            continue
        unit, rate = UOMS.get(units.get(name, ""), (units.get(name, ""), False))
        key = (plugin, unit)
        if key not in checks:
            shown = f" ({unit})" if unit else ""
            checks[key] = Arranged(f"check-{plugin}" + (f"-{_slug(unit)}" if unit else ""),
                                   f"{plugin}{shown}", unit, rate, CHECKS)
        checks[key].series.append((label, left.pop(name)))
    out += sorted((g for g in checks.values() if g.section == CHECKS), key=lambda g: g.key)
    more = sorted((g for g in checks.values() if g.section == MORE), key=lambda g: g.key)
    groups: dict[str, Arranged] = {}
    for name in sorted(left):
        group = ".".join(name.split(".")[:-1]) or name
        graph = groups.setdefault(group, Arranged(f"series-{_slug(group)}", group, "", False,
                                                  MORE))
        graph.series.append((name[len(group) + 1:] or name, left.pop(name)))
    return out + more + sorted(groups.values(), key=lambda g: (g.title.startswith("agent."),
                                                                g.title))


def _legend(name: str, panel: Panel) -> str:
    """A series' name in its graph: what its path says beyond the panel's common part
    (``cpu.user`` -> ``user``, ``disk.root.used_percent`` -> ``root``)."""
    parts = name.split(".")
    if panel.key in ("disk", "disk-free"):
        return ".".join(parts[1:-1]) or name
    return ".".join(parts[1:]) or name


def _slug(text: str) -> str:
    """A part of a graph's key (an HTML id): ``/s`` is ``per-s``, not seconds' ``s``."""
    text = text.replace("/", "per-")
    return "".join(c if c.isalnum() or c in "_-" else "-" for c in text).strip("-") or "x"


def rates(points) -> list[tuple[float | None, int]]:
    """A counter's points as its rate per second between each two (None at a reset, where
    it went back, or across a gap)."""
    out: list[tuple[float | None, int]] = []
    before = None
    for value, ts in sorted(points, key=lambda p: p[1]):
        if value is None:
            out.append((None, ts))
            before = None
            continue
        if before is not None and ts > before[1] and value >= before[0]:
            out.append(((value - before[0]) / (ts - before[1]), ts))
        elif before is not None:
            out.append((None, ts))
        before = (value, ts)
    return out
