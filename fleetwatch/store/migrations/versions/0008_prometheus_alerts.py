"""prometheus_alerts: the alerts Prometheus (or vmalert) posts to the console as to an
Alertmanager (issue 36): a new table, no rows rewritten.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prometheus_alerts",
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("starts_at", sa.Float(), nullable=False),
        sa.Column("ends_at", sa.Float(), nullable=False),
        sa.Column("timeout", sa.Boolean(), nullable=False),
        sa.Column("generator_url", sa.Text(), nullable=False),
        sa.Column("received", sa.Float(), nullable=False),
        sa.Column("updated", sa.Float(), nullable=False),
        sa.Column("sender", sa.String(length=255), nullable=False),
        sa.Column("uuid", sa.String(length=64), nullable=True),
        sa.Column("plugin", sa.String(length=255), nullable=True),
        sa.Column("refused", sa.String(length=255), nullable=True),
        sa.Column("judged", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("fingerprint"))
    op.create_index("ix_prometheus_alerts_ends_at", "prometheus_alerts", ["ends_at"])


def downgrade() -> None:
    raise NotImplementedError("not undone: an older fleetwatch works on this schema and "
                              "leaves the table alone")
