"""slos, slo_state, slo_buckets: the SLOs the alerting sinks' configs declare, each one's
burn-rate alert state (and each host's), and the events of their SLIs summed per span
(issue 35, SLOs): new tables, no rows rewritten.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slos",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("objective", sa.Float(), nullable=False),
        sa.Column("window_seconds", sa.Float(), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.Column("sli", sa.String(length=8), nullable=False),
        sa.Column("patterns", sa.JSON(), nullable=False),
        sa.Column("hosts", sa.JSON(), nullable=False),
        sa.Column("per_host", sa.Boolean(), nullable=False),
        sa.Column("downtime", sa.String(length=8), nullable=False),
        sa.Column("configured", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"))

    op.create_table(
        "slo_state",
        sa.Column("slo", sa.String(length=64), nullable=False),
        sa.Column("uuid", sa.String(length=64), nullable=False),
        sa.Column("level", sa.String(length=8), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("told", sa.String(length=8), nullable=False),
        sa.Column("told_at", sa.Float(), nullable=True),
        sa.Column("burn", sa.JSON(), nullable=True),
        sa.Column("updated", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("slo", "uuid"))

    op.create_table(
        "slo_buckets",
        sa.Column("slo", sa.String(length=64), nullable=False),
        sa.Column("uuid", sa.String(length=64), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("good", sa.Float(), nullable=False),
        sa.Column("bad", sa.Float(), nullable=False),
        sa.Column("excluded", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("slo", "uuid", "width", "start"))
    with op.batch_alter_table("slo_buckets", schema=None) as batch_op:
        batch_op.create_index("ix_slo_buckets_span", ["slo", "width", "start"], unique=False)


def downgrade() -> None:
    raise NotImplementedError("not undone: an older fleetwatch works on this schema and "
                              "leaves the tables alone")
