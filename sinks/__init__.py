"""Typed back-end sinks: an explicit registry of sink types, imported lazily.

Each sink type is a class named here by ``module:Class``; :func:`load_sink` imports it only
when a process asks for it, so ``fleetwatch agent`` never pays for SQLAlchemy. A sink whose
optional dependency is not installed fails with :class:`MissingDependency` naming the extra
to install, never by vanishing silently.
"""

from __future__ import annotations

import importlib

#: sink type -> "module:Class". Add a type here; nothing is discovered.
SINKS = {
    "registry": "sinks.registry:RegistrySink",
    "alerting": "sinks.alerting:AlertingSink",
    "graphite": "sinks.graphite:GraphiteSink",
    "history": "sinks.history.sink:HistorySink",
}

#: optional module -> the extra that installs it
EXTRAS = {"sqlalchemy": "sinks", "graphyte": "graphite", "pyspark": "history"}

#: exit status for a missing optional dependency (EX_UNAVAILABLE, sysexits.h)
EX_UNAVAILABLE = 69


class UnknownSink(LookupError):
    """A sink type not in :data:`SINKS`."""

    def __init__(self, name: str):
        super().__init__(f"unknown sink type {name!r} (known: {', '.join(sorted(SINKS))})")
        self.name = name


class MissingDependency(ImportError):
    """An optional dependency is not installed; ``str()`` says which extra to install."""

    def __init__(self, module: str, what: str):
        extra = EXTRAS.get(module, "all")
        super().__init__(f"{what} needs the Python package {module!r}: "
                         f"pip install 'fleetwatch[{extra}]'")
        self.module = module


def optional_import(module: str, what: str):
    """Import ``module``; a missing optional dependency becomes :class:`MissingDependency`."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top in EXTRAS:
            raise MissingDependency(top, what) from None
        raise


def load_sink(name: str) -> type:
    """The sink class registered for ``name``."""
    try:
        spec = SINKS[name]
    except KeyError:
        raise UnknownSink(name) from None
    module_name, _, class_name = spec.partition(":")
    module = optional_import(module_name, f"the {name} sink")
    return getattr(module, class_name)


def state_db():
    """The :mod:`sinks.db` module, for operator commands that read the state database."""
    return optional_import("sinks.db", "reading the state database")
