"""web_pins: the graphs each console user pinned to their dashboard (issue 33, item 4): a
new table, no rows rewritten.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_pins",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("uuid", sa.String(length=64), nullable=False),
        sa.Column("graph", sa.String(length=255), nullable=False),
        sa.Column("created", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"))
    with op.batch_alter_table("web_pins", schema=None) as batch_op:
        batch_op.create_index("ix_web_pins_user", ["user"], unique=False)


def downgrade() -> None:
    raise NotImplementedError("not undone: an older fleetwatch works on this schema and "
                              "leaves the table alone")
