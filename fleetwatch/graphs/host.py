"""What a host page shows of Graphite: :func:`host_graphs`, the one call the console makes.

It never raises for what Graphite does: without ``graphite.url`` the answer is ``not
configured``; Graphite down, slow, answering garbage or not knowing the host is ``error`` or
``unknown host`` with a one-line message; otherwise one :class:`Graph` per group of series,
each with its SVG (:func:`fleetwatch.graphs.svg.chart`).

The host's series are found as the graphite sink names them: under ``PREFIX.HOST`` or, with
``graphite.tags``, tagged ``host=HOST`` (:meth:`fleetwatch.graphs.client.Graphite.metrics`);
either way a page is the same. Series are grouped by the path below the host (the name
without ``PREFIX.`` and its tags, when tagged) without its last node, so ``cpu.percent``,
``load.1``, ``load.5`` make ``cpu`` and ``load``, and a check's perfdata ``checks.P.*`` one
graph; a check's ``status`` (0 to 3) gets a graph of its own (``checks.P.status``), apart
from perfdata in other units. The host's own metrics come first, then its checks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fleetwatch.graphs.client import GraphError, Graphite, Series
from fleetwatch.graphs.svg import chart

#: statuses of a HostGraphs
OK, NOT_CONFIGURED, UNKNOWN_HOST, ERROR = "ok", "not configured", "unknown host", "error"


@dataclass(frozen=True)
class Graph:
    """One graph of a host page: its title (the group's path below the host), the series
    drawn (names relative to the group) and the ``<svg>`` element as a string."""

    title: str
    series: tuple[Series, ...]
    svg: str


@dataclass(frozen=True)
class HostGraphs:
    """A host's graphs, or why there are none (``status`` and a one-line ``message``)."""

    hostname: str
    status: str
    message: str = ""
    graphs: tuple[Graph, ...] = field(default=())
    start: int = 0
    end: int = 0


def group_of(relative: str) -> str:
    """The graph a series (its path below the host) belongs to."""
    parts = relative.split(".")
    if parts[0] == "checks" and parts[-1] == "status":
        return relative
    return ".".join(parts[:-1]) or relative


def host_graphs(settings, hostname: str, seconds: float = 3600.0, *, now: float | None = None,
                fetch=None, width: int = 600, height: int = 160) -> HostGraphs:
    """``hostname``'s graphs over the last ``seconds`` (to ``now``, default the clock), from
    the operator config's ``graphite:`` section ``settings`` (None: not configured);
    ``fetch`` replaces the HTTP call (tests)."""
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
    series = client.render(paths, start, end, max_points=width)
    if isinstance(series, GraphError):
        return _failed(hostname, series, start, end)
    groups: dict[str, list[tuple[str, Series]]] = {}
    for s in series:
        relative = client.relative(s.name, hostname)
        groups.setdefault(group_of(relative), []).append((relative, s))
    graphs = []
    for title in sorted(groups, key=lambda g: (g.startswith("checks."), g)):
        members = sorted(groups[title], key=lambda m: m[0])
        names = [_legend(title, relative) for relative, _ in members]
        svg = chart([(n, s.points) for n, (_, s) in zip(names, members)], title=title,
                    width=width, height=height, start=start, end=end)
        graphs.append(Graph(title, tuple(s for _, s in members), svg))
    return HostGraphs(hostname, OK, "", tuple(graphs), start, end)


def _legend(title: str, relative: str) -> str:
    """A series' name in its graph's legend: the part below the graph's title."""
    return relative[len(title) + 1:] if relative.startswith(title + ".") else relative


def _failed(hostname: str, error: GraphError, start: int, end: int) -> HostGraphs:
    status = UNKNOWN_HOST if error.kind == "unknown host" else ERROR
    return HostGraphs(hostname, status, error.message, (), start, end)
