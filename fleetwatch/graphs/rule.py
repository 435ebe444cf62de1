"""What a rule's page shows of Graphite: :func:`rule_graph`, the series a rule on series reads
for one host, in one graph, with the rule's levels and spans of time (pages) drawn on it.

A rule's series are named as the graphite sink names a host's (``disk.root.used_percent``,
``checks.http.time``: the path below ``PREFIX.HOST``, docs/operating/rules.md), so each is
asked of ``/render`` by its own target, without searching the host's series: under
``PREFIX.HOST.SERIES`` or, with ``graphite.tags``, ``PREFIX.SERIES;host=HOST``. A series'
nodes are letters, digits, ``_`` and ``-`` (the rule's expression was parsed so), so a
target carries no glob and no function. A series Graphite does not have is drawn as "no
data". A series the rule reads as a counter's rate (``rate(S, W)``) is drawn as its rate.

Never raises for what Graphite does: as :func:`fleetwatch.graphs.host.host_graphs`, not
configured, an error, or one :class:`~fleetwatch.graphs.host.Graph`.
"""

from __future__ import annotations

import re
import time
from typing import Sequence

from fleetwatch.graphs.client import GraphError, Graphite
from fleetwatch.graphs.host import ERROR, NOT_CONFIGURED, OK, Graph, HostGraphs
from fleetwatch.graphs.panels import rates
from fleetwatch.graphs.svg import chart
from fleetwatch.metricpath import tag_value

#: a series name a rule reads (sinks/alerting/series/expr.py SERIES)
SERIES = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*")
#: series one graph draws at most
MAX_SERIES = 20


def target(client: Graphite, hostname: str, series: str) -> str:
    """The render target of ``hostname``'s ``series`` (a path, or a tagged series)."""
    if client.tags:
        head = f"{client.prefix}.{series}" if client.prefix else series
        return f"{head};host={tag_value(hostname)}"
    return f"{client.host_path(hostname)}.{series}"


def rule_graph(settings, hostname: str, series: Sequence[tuple[str, bool]],
               seconds: float = 3600.0, *, now: float | None = None, title: str = "",
               levels: Sequence[tuple[str, float]] = (),
               bands: Sequence[tuple[str, Sequence[tuple[float, float, str]]]] = (),
               fetch=None, width: int = 900, height: int = 220) -> HostGraphs:
    """One graph of ``hostname``'s ``series`` ((name, drawn as a rate)) over the last
    ``seconds`` (to ``now``), from the operator config's ``graphite:`` section
    ``settings``, with ``levels`` and ``bands`` (:func:`fleetwatch.graphs.svg.chart`).
    ``fetch`` replaces the HTTP call (tests)."""
    end = int(time.time() if now is None else now)
    start = end - max(1, int(seconds))
    if settings is None or not getattr(settings, "url", ""):
        return HostGraphs(hostname, NOT_CONFIGURED, "Graphite is not configured: set "
                          "graphite.url in the operator config (fleetwatch.yaml) to see "
                          "the rule's series", (), start, end)
    wanted = [(name, rate) for name, rate in series if SERIES.fullmatch(name)][:MAX_SERIES]
    client = Graphite.from_settings(settings, **({"fetch": fetch} if fetch else {}))
    targets = [target(client, hostname, name) for name, _ in wanted]
    found = client.render(targets, start, end, max_points=width) if targets else []
    if isinstance(found, GraphError):
        return HostGraphs(hostname, ERROR, found.message, (), start, end)
    by_name = {client.relative(one.name, hostname): one for one in found}
    drawn, kept = [], []
    for name, rate in wanted:
        one = by_name.get(name)
        points = () if one is None else (rates(one.points) if rate else one.points)
        drawn.append((f"rate of {name} (/s)" if rate else name, points))
        if one is not None:
            kept.append(one)
    svg = chart(drawn, title=title, width=width, height=height, start=start, end=end,
                levels=levels, bands=bands)
    return HostGraphs(hostname, OK, "", (Graph(title, tuple(kept), svg, "rule"),), start, end)
