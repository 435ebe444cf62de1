"""Typed back-end sinks: an explicit registry of sink types, imported lazily.

Each sink type is a class named by ``module:Class`` in the core's table of sink types
(:mod:`fleetwatch.sinktypes`); :func:`load_sink` imports it only
when a process asks for it, so ``fleetwatch agent`` never pays for SQLAlchemy. A sink whose
optional dependency is not installed fails with :class:`MissingDependency` naming the extra
to install, never by vanishing silently.
"""

from __future__ import annotations

from fleetwatch import sinktypes
from fleetwatch.optional import optional_import

#: sink type -> "module:Class", from the table of sink types (:mod:`fleetwatch.sinktypes`)
SINKS = {t.name: t.implementation for t in sinktypes.TYPES}


class UnknownSink(LookupError):
    """A sink type not in :data:`SINKS`."""

    def __init__(self, name: str):
        super().__init__(f"unknown sink type {name!r} (known: {', '.join(sorted(SINKS))})")
        self.name = name


def load_sink(name: str) -> type:
    """The sink class registered for ``name``."""
    try:
        spec = SINKS[name]
    except KeyError:
        raise UnknownSink(name) from None
    module_name, _, class_name = spec.partition(":")
    module = optional_import(module_name, f"the {name} sink")
    return getattr(module, class_name)

