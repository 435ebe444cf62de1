"""One node of a Graphite path, the rule written once: the graphite sink names a host's
series with it (:mod:`sinks.graphite.paths`) and the console's graphs find them with it
(:mod:`fleetwatch.graphs.client`), so both always agree on ``PREFIX.HOST``.

Every run of characters other than ``A-Z a-z 0-9 _ -`` becomes one ``_`` (dots too: a
hostname is one node, ``web1.example.com`` -> ``web1_example_com``), so no name can carry a
Graphite glob (``*``, ``{a,b}``, ``[x]``) or reach another node.
"""

from __future__ import annotations

import re

_ODD = re.compile(r"[^A-Za-z0-9_-]+")


def node(text: str) -> str:
    """One path node: odd characters (dots included) become ``_``; '' if nothing is left."""
    return _ODD.sub("_", text) if text else ""
