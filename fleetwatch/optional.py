"""Optional dependencies: a package an extra installs, imported only when needed.

A process that needs a package it was installed without (``pip install fleetwatch`` has no
SQLAlchemy) fails with :class:`MissingDependency`, whose text names the extra to install,
and exits :data:`os.EX_UNAVAILABLE`; it never vanishes silently or falls back.
"""

from __future__ import annotations

import importlib

#: optional module -> the extra that installs it
EXTRAS = {"sqlalchemy": "sinks", "croniter": "sinks", "graphyte": "graphite",
          # the state database's migrations (fleetwatch/store/migrations; Mako: Alembic's templates)
          "alembic": "sinks", "mako": "sinks",
          "pyspark": "history", "fastapi": "web", "uvicorn": "web", "argon2": "web",
          "prometheus_client": "prometheus",
          # the remote_write sink's snappy (its protobuf: `google`, below, in `all` too)
          "cramjam": "remote_write",
          # the Spark Connect client (history.remote)
          "grpc": "connect", "grpc_status": "connect", "google": "connect", "pandas": "connect",
          "pyarrow": "connect", "zstandard": "connect",
          # fleetwatch history notebook
          "jupyterlab": "notebook", "nbclient": "notebook", "ipykernel": "notebook"}

#: exit status when something a command needs is unavailable: an optional dependency, the
#: state database, an agent, systemd (EX_UNAVAILABLE, sysexits.h)


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
