"""What a host page shows of Graphite: :func:`host_graphs`, the one call the console makes.

It never raises for what Graphite does: without ``graphite.url`` the answer is ``not
configured``; Graphite down, slow, answering garbage or not knowing the host is ``error`` or
``unknown host`` with a one-line message; otherwise one :class:`Graph` per group of series,
each with its SVG (:func:`fleetwatch.graphs.svg.chart`).

The host's series are found as the graphite sink names them: under ``PREFIX.HOST`` or, with
``graphite.tags``, tagged ``host=HOST`` (:meth:`fleetwatch.graphs.client.Graphite.metrics`);
either way a page is the same. Their path below the host (the name without ``PREFIX.`` and
its tags, when tagged) places each in one graph of :mod:`fleetwatch.graphs.panels`: CPU,
load, memory, disk, network first, then each check's perfdata by unit, then the rest; a
counter is drawn as its rate.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from fleetwatch.graphs.panels import HOST, MORE, arrange, rates
from fleetwatch.graphs.client import GraphError, Graphite, Series
from fleetwatch.graphs.svg import chart

#: statuses of a HostGraphs
OK, NOT_CONFIGURED, UNKNOWN_HOST, ERROR = "ok", "not configured", "unknown host", "error"


@dataclass(frozen=True)
class Graph:
    """One graph of a host page: its title, the series drawn, the ``<svg>`` element as a
    string, and from the catalogue (:mod:`fleetwatch.graphs.panels`) its ``key`` (the
    page's anchor), its ``unit`` and its ``section`` (host, checks, more)."""

    title: str
    series: tuple[Series, ...]
    svg: str
    key: str = ""
    unit: str = ""
    section: str = HOST


@dataclass(frozen=True)
class HostGraphs:
    """A host's graphs, or why there are none (``status`` and a one-line ``message``)."""

    hostname: str
    status: str
    message: str = ""
    graphs: tuple[Graph, ...] = field(default=())
    start: int = 0
    end: int = 0


def host_graphs(settings, hostname: str, seconds: float = 3600.0, *, now: float | None = None,
                fetch=None, width: int = 600, height: int = 160,
                units: dict[str, str] | None = None) -> HostGraphs:
    """``hostname``'s graphs over the last ``seconds`` (to ``now``, default the clock), from
    the operator config's ``graphite:`` section ``settings`` (None: not configured), in
    the catalogue's order (:func:`fleetwatch.graphs.panels.arrange`; ``units``: each
    perfdata series' unit, ``checks.PLUGIN.LABEL`` -> uom); ``fetch`` replaces the HTTP
    call (tests)."""
    found = _series_of(settings, hostname, seconds, now, fetch)
    if isinstance(found, HostGraphs):
        return found
    client, paths, start, end = found
    series = client.render(paths, start, end, max_points=width)
    if isinstance(series, GraphError):
        return _failed(hostname, series, start, end)
    relatives = {client.relative(one.name, hostname): one for one in series}
    graphs = []
    for found in arrange(relatives, units):
        drawn = [(name, rates(one.points) if found.rate else one.points)
                 for name, one in found.series]
        svg = chart(drawn, title=found.title, width=width, height=height, start=start,
                    end=end, unit=found.unit)
        graphs.append(Graph(found.title, tuple(one for _, one in found.series), svg,
                            found.key, found.unit, found.section))
    return HostGraphs(hostname, OK, "", tuple(graphs), start, end)


#: what a picked graph names (a dashboard pin ``series:PATTERN``): a glob over the path
#: below the host, as the catalogue's patterns are
PICKED = re.compile(r"[A-Za-z0-9_.*?\[\]!-]{1,200}")
#: what a picked graph's key starts with (then its pattern)
PICKED_KEY = "series:"
#: the series one picked graph draws at most (the first, by name)
PICKED_MAX = 20


def picked_graphs(settings, hostname: str, patterns: list[str], seconds: float = 3600.0, *,
                  now: float | None = None, fetch=None, width: int = 600,
                  height: int = 160) -> HostGraphs:
    """One graph per glob of ``patterns`` (:data:`PICKED`) over ``hostname``'s series as
    a host page finds them (their path below the host: ``load.*``, ``checks.http.*``),
    each drawn as it is, at most :data:`PICKED_MAX` series (the first by name), its key
    ``series:PATTERN``; a pattern that matches nothing has no graph. The host's series are
    found and fetched once for all of them. What Graphite does is said as
    :func:`host_graphs` says it."""
    found = _series_of(settings, hostname, seconds, now, fetch)
    if isinstance(found, HostGraphs):
        return found
    client, paths, start, end = found
    by_pattern = {p: sorted(n for n in paths if fnmatchcase(client.relative(n, hostname), p))
                  [:PICKED_MAX] for p in dict.fromkeys(patterns)}
    wanted = sorted({n for names in by_pattern.values() for n in names})
    series = client.render(wanted, start, end, max_points=width) if wanted else []
    if isinstance(series, GraphError):
        return _failed(hostname, series, start, end)
    relatives = sorted(((client.relative(one.name, hostname), one) for one in series),
                       key=lambda pair: pair[0])
    graphs = []
    for pattern in by_pattern:
        drawn = [(name, one) for name, one in relatives
                 if fnmatchcase(name, pattern)][:PICKED_MAX]
        if not drawn:
            continue
        svg = chart([(name, one.points) for name, one in drawn], title=pattern, width=width,
                    height=height, start=start, end=end)
        graphs.append(Graph(pattern, tuple(one for _, one in drawn), svg, PICKED_KEY + pattern,
                            "", MORE))
    return HostGraphs(hostname, OK, "", tuple(graphs), start, end)


def _series_of(settings, hostname: str, seconds: float, now: float | None, fetch):
    """(the client, ``hostname``'s series paths, the range's start and end), or the
    HostGraphs saying why there are none (not configured, Graphite's error)."""
    if settings is None or not getattr(settings, "url", ""):
        return HostGraphs(hostname, NOT_CONFIGURED, "Graphite is not configured: set "
                          "graphite.url in the operator config (fleetwatch.yaml) to see "
                          "this host's graphs")
    client = Graphite.from_settings(settings, **({"fetch": fetch} if fetch else {}))
    end = int(time.time() if now is None else now)
    start = end - max(1, int(seconds))
    paths = client.metrics(hostname)
    if isinstance(paths, GraphError):
        return _failed(hostname, paths, start, end)
    return client, paths, start, end


def _failed(hostname: str, error: GraphError, start: int, end: int) -> HostGraphs:
    status = UNKNOWN_HOST if error.kind == "unknown host" else ERROR
    return HostGraphs(hostname, status, error.message, (), start, end)
