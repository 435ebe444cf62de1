"""channels.type: each alert channel's type (slack, teams, matrix...), which `fleetwatch
channels` lists (issue 34): a new nullable column, no rows rewritten (a channel's next
declaration by an alerting sink fills it).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("channels", schema=None) as batch_op:
        batch_op.add_column(sa.Column("type", sa.String(length=16), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("not undone: an older fleetwatch works on this schema and "
                              "leaves the column alone")
