"""rules: the rules on series the alerting sinks' configs declare, for the console (issue
35): a new table, no rows rewritten.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rules",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("expr", sa.Text(), nullable=False),
        sa.Column("hosts", sa.JSON(), nullable=False),
        sa.Column("warning", sa.String(length=255), nullable=False),
        sa.Column("critical", sa.String(length=255), nullable=False),
        sa.Column("hold", sa.Float(), nullable=False),
        sa.Column("keep_firing", sa.Float(), nullable=False),
        sa.Column("stale_after", sa.Float(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("sink", sa.String(length=255), nullable=False),
        sa.Column("configured", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"))


def downgrade() -> None:
    raise NotImplementedError("not undone: an older fleetwatch works on this schema and "
                              "leaves the table alone")
