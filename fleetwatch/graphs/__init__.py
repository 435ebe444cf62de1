"""Graphs of a host's metrics and its checks' perfdata, from Graphite's render API.

- :mod:`fleetwatch.graphs.settings`: the operator config's ``graphite:`` section (``url``,
  ``timeout``, ``prefix``);
- :mod:`fleetwatch.graphs.client`: the render client (``/metrics/find``, ``/render``), with
  every failure returned as a :class:`~fleetwatch.graphs.client.GraphError` value;
- :mod:`fleetwatch.graphs.svg`: series drawn as an inline SVG string, every label escaped;
- :mod:`fleetwatch.graphs.host`: what a host page shows, :func:`~fleetwatch.graphs.host.
  host_graphs` (never raises; "not configured" without ``graphite.url``).

No web framework here: the console (web/) calls :func:`host_graphs` and puts the SVG strings
in its page as they are.
"""

from fleetwatch.graphs.client import GraphError, Graphite, Series
from fleetwatch.graphs.host import Graph, HostGraphs, host_graphs
from fleetwatch.graphs.settings import GraphiteWebSettings
from fleetwatch.graphs.svg import chart

__all__ = ["Graph", "GraphError", "Graphite", "GraphiteWebSettings", "HostGraphs", "Series",
           "chart", "host_graphs"]
