"""state_releases: the fleetwatch release that brought the database to each revision, so
that an older release names it when it finds a revision it does not know (issue 38): a new
table, no rows rewritten.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "state_releases",
        sa.Column("revision", sa.String(length=32), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("migrated", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("revision"))


def downgrade() -> None:
    raise NotImplementedError("not undone: an older fleetwatch works on this schema and "
                              "leaves the table alone")
