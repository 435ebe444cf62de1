"""Alembic's environment for the state database: always run by :func:`upgrade` (or
``python -m fleetwatch.store.migrations``) on a connection handed over in the configuration's
``attributes``, in the caller's transaction; never from an ini file, never offline."""

from __future__ import annotations

from alembic import context

from fleetwatch.store.schema import metadata

if context.is_offline_mode():
    raise RuntimeError("the state database's migrations run on a connection (no --sql)")

context.configure(connection=context.config.attributes["connection"],
                  target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
