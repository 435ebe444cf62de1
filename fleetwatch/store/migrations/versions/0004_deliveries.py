"""deliveries: one row per attempt to send an alert, with the service's answer (issue 34,
proof of delivery); channels: each alert channel working or failing, since when, why (issue
34, channels that report their own failure): new tables, no rows rewritten.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("outbox_id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=True),
        sa.Column("check_name", sa.String(length=255), nullable=True),
        sa.Column("channel", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("grouped", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("latency", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(length=8), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=True),
        sa.Column("message_id", sa.String(length=255), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"))
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_deliveries_event", ["event_id"], unique=False)
        batch_op.create_index("ix_deliveries_started", ["started"], unique=False)

    op.create_table(
        "channels",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_ok", sa.Float(), nullable=True),
        sa.Column("last_attempt", sa.Float(), nullable=True),
        sa.Column("last_status", sa.String(length=32), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("fallback", sa.String(length=64), nullable=True),
        sa.Column("configured", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"))


def downgrade() -> None:
    raise NotImplementedError("not undone: an older fleetwatch works on this schema and "
                              "leaves the table alone")
