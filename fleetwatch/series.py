"""The labelled series of a STATS (SPEC 4, ``series``; SPEC 4.7 and 4.7.1 say how each sink
names them): what an entry is, read the same way by every receiver. Plain logic.

An entry is ``{"name": str, "labels": {str: str}, "value": number, "kind": str}``: an
OpenTelemetry metric point the agent's OTLP intake took (SPEC 4.4.1), ``name`` as OTel named it
(dots kept, ``_bucket``/``_sum``/``_count`` for the parts of a histogram or summary),
``labels`` its resource's and its own attributes, ``kind`` ``counter`` (cumulative, only
grows) or ``gauge`` (absent: ``gauge``). A receiver takes an entry when:

- ``name`` is a string of 1 to :data:`MAX_NAME` characters;
- ``labels`` is absent or null (no labels) or an object of at most :data:`MAX_LABELS` entries, each
  key a string of 1 to :data:`MAX_KEY` characters, each value a string of at most
  :data:`MAX_VALUE`;
- ``value`` is a finite number (not a boolean);
- ``kind`` is absent (or null), ``gauge`` or ``counter``.

Any other entry is skipped and counted ``series_bad`` (a ``series`` that is not a list is one
such entry); the STATS's other entries and its ``metrics`` are taken all the same. The agent
enforces tighter bounds (SPEC 4.4.1), so only a foreign or broken sender meets these.

Label keys ``host``, ``instance``, ``uuid`` and ``site`` are the fleet's (:data:`FLEET_KEYS`):
a sink that names a series after the host that sent it renames the series' own to
``exported_KEY`` (:func:`relabelled`, Prometheus' convention), so an application can never
claim another host. A label with an empty value is no label (as in Prometheus).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple

#: longest series name
MAX_NAME = 255
#: labels of one series at most (the agent's ``otlp.max_labels`` defaults to 32)
MAX_LABELS = 64
#: longest label key, and value
MAX_KEY, MAX_VALUE = 100, 255
#: what ``kind`` may say
KINDS = ("gauge", "counter")
#: label keys that are the fleet's: a sink's own label of the name wins, the series' is renamed
FLEET_KEYS = frozenset({"host", "instance", "uuid", "site"})
#: what a series' label named like one of the fleet's becomes: ``exported_`` KEY
EXPORTED = "exported_"


class Entry(NamedTuple):
    """One well-formed entry: ``labels`` as (key, value) pairs sorted by key, empty values
    left out; ``counter`` for ``kind: counter``."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    counter: bool


def entries(series, counts: Counter) -> list[Entry]:
    """The well-formed entries of a STATS's ``series`` (None: none); the others counted in
    ``counts`` as ``series_bad``."""
    if series is None:
        return []
    if not isinstance(series, list):
        counts["series_bad"] += 1
        return []
    taken = []
    for item in series:
        entry = entry_of(item)
        if entry is None:
            counts["series_bad"] += 1
        else:
            taken.append(entry)
    return taken


def entry_of(item) -> Entry | None:
    """``item`` as an :class:`Entry`, or None if it is not one (the module's rules)."""
    if not isinstance(item, dict):
        return None
    name, labels, value = item.get("name"), item.get("labels"), item.get("value")
    kind = item.get("kind")
    kind = "gauge" if kind is None else kind
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or kind not in KINDS:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value):
        return None
    if labels is None:
        return Entry(name, (), value, kind == "counter")
    if not isinstance(labels, dict) or len(labels) > MAX_LABELS:
        return None
    for key, text in labels.items():
        if not (isinstance(key, str) and isinstance(text, str) and 0 < len(key) <= MAX_KEY
                and len(text) <= MAX_VALUE):
            return None
    pairs = tuple(sorted((k, v) for k, v in labels.items() if v))
    return Entry(name, pairs, value, kind == "counter")


def relabelled(pairs: tuple[tuple[str, str], ...], key_of, reserved=FLEET_KEYS
               ) -> tuple[tuple[str, str], ...]:
    """An entry's labels with each key as a sink writes it: ``key_of(key)``, then renamed
    ``exported_KEY`` when ``reserved`` holds it. Keys that become the same have their values
    joined with ``;`` in the order of the keys as sent (Prometheus' OTLP translation does
    so). Sorted by the new key; values as sent, the sink's to sanitise."""
    merged: dict[str, str] = {}
    for key, value in pairs:
        new = key_of(key)
        if new in reserved:
            new = EXPORTED + new
        merged[new] = f"{merged[new]};{value}" if new in merged else value
    return tuple(sorted(merged.items()))
