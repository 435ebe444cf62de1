"""One node of a Graphite path and one tag value, the rules written once: the graphite sink
names a host's series with them (:mod:`sinks.graphite.paths`) and the console's graphs find
them with them (:mod:`fleetwatch.graphs.client`), so both always agree on ``PREFIX.HOST``
and on ``host=HOST``.

Every run of characters other than ``A-Z a-z 0-9 _ -`` becomes one ``_`` (dots too: a
hostname is one node, ``web1.example.com`` -> ``web1_example_com``), so no name can carry a
Graphite glob (``*``, ``{a,b}``, ``[x]``) or reach another node. A tag value (the sink's
``tags: true``) is the same but keeps its dots (``host=web1.example.com``), so it cannot
carry a tag expression's operators (``=``, ``!=``, ``=~``) or a ``;``.
"""

from __future__ import annotations

import re

_ODD = re.compile(r"[^A-Za-z0-9_-]+")
_ODD_TAG = re.compile(r"[^A-Za-z0-9_.-]+")


def node(text: str) -> str:
    """One path node: odd characters (dots included) become ``_``; '' if nothing is left."""
    return _ODD.sub("_", text) if text else ""


def tag_value(text: str) -> str:
    """A tag value: like :func:`node`, but dots stay."""
    return _ODD_TAG.sub("_", text) if text else ""
