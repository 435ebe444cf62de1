"""Baseline: the schema of the last fleetwatch before the migrations (a92aeba), for a new
database and for one an earlier version made.

A database without ``alembic_version`` is either new or made by a fleetwatch from before
the migrations, which created the tables of the sinks that had run and added the nullable
columns newer versions declared as each owner started. The shapes it can be in, from the
history of the schema (tests/integration/test_state_upgrade.py builds each):

- 5e1aa49 (2026-11-22): agents, agent_routers, plugins, notifications;
- 258cc7b: checks, check_state, host_state, silences, suppressed, alert_events, outbox;
- f267c91: acknowledgements, check_freshness;
- 9fb0749: downtimes, downtime_suppressed, notified_problems; agents.parents,
  check_state.unreachable, host_state.unreachable;
- 1a08381: agents.ephemeral, agents.gone, host_state.gone, host_state.deregistered;
- 4596a83: web_users, web_tokens, web_audit;
- 9cefc66: checks.received_at, boot, seq; check_state.received, boot, seq;
  host_state.clock_skew;
- 0d90af4 to a92aeba: web_sessions.

No column ever changed type and no index changed, so this revision creates each missing
table (with its indexes) and adds each missing column (all nullable) and index: every
shape comes to this one with its rows. Alembic then records the revision. The tables are
frozen here as they were; a later change to fleetwatch/store/schema.py is a revision of its own.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def frozen() -> sa.MetaData:
    """The state database's tables at a92aeba."""
    m = sa.MetaData()
    sa.Table(
        'acknowledgements', m,
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('key', sa.String(length=512), nullable=False),
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('check_name', sa.String(length=255), nullable=True),
        sa.Column('status', sa.Integer(), nullable=False),
        sa.Column('sticky', sa.Boolean(), nullable=False),
        sa.Column('notify', sa.Boolean(), nullable=False),
        sa.Column('comment', sa.Text(), nullable=False),
        sa.Column('author', sa.String(length=255), nullable=False),
        sa.Column('created', sa.Float(), nullable=False),
        sa.Column('expire', sa.Float(), nullable=True),
        sa.Column('announced', sa.Float(), nullable=True),
        sa.Column('ended', sa.Float(), nullable=True),
        sa.Column('end_reason', sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.Index('ix_acknowledgements_ended', 'ended'))
    sa.Table(
        'agents', m,
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('hostname', sa.String(length=255), nullable=True),
        sa.Column('version', sa.String(length=64), nullable=True),
        sa.Column('first_seen', sa.Float(), nullable=False),
        sa.Column('last_seen', sa.Float(), nullable=False),
        sa.Column('parents', sa.JSON(none_as_null=True), nullable=True),
        sa.Column('ephemeral', sa.Boolean(), nullable=True),
        sa.Column('gone', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('uuid'))
    sa.Table(
        'alert_events', m,
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('key', sa.String(length=512), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('action', sa.String(length=16), nullable=False),
        sa.Column('severity', sa.String(length=16), nullable=False),
        sa.Column('uuid', sa.String(length=64), nullable=True),
        sa.Column('hostname', sa.String(length=255), nullable=True),
        sa.Column('check_name', sa.String(length=255), nullable=True),
        sa.Column('status', sa.Integer(), nullable=True),
        sa.Column('summary', sa.Text(), nullable=False),
        sa.Column('text', sa.Text(), nullable=False),
        sa.Column('created', sa.Float(), nullable=False),
        sa.Column('details', sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.Index('ix_alert_events_created', 'created'),
        sa.Index('ix_alert_events_key', 'key', 'action'))
    sa.Table(
        'check_freshness', m,
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('plugin', sa.String(length=255), nullable=False),
        sa.Column('heard', sa.Float(), nullable=True),
        sa.Column('stale_at', sa.Float(), nullable=True),
        sa.Column('updated', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('uuid', 'plugin'))
    sa.Table(
        'check_state', m,
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('plugin', sa.String(length=255), nullable=False),
        sa.Column('status', sa.Integer(), nullable=False),
        sa.Column('hard', sa.Boolean(), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('max_attempts', sa.Integer(), nullable=False),
        sa.Column('hard_status', sa.Integer(), nullable=False),
        sa.Column('since', sa.Float(), nullable=True),
        sa.Column('last_change', sa.Float(), nullable=True),
        sa.Column('last_result', sa.Float(), nullable=True),
        sa.Column('history', sa.String(length=32), nullable=False),
        sa.Column('percent', sa.Float(), nullable=False),
        sa.Column('flapping', sa.Boolean(), nullable=False),
        sa.Column('notified', sa.Integer(), nullable=False),
        sa.Column('last_notified', sa.Float(), nullable=True),
        sa.Column('flap_notified', sa.Boolean(), nullable=False),
        sa.Column('updated', sa.Float(), nullable=False),
        sa.Column('unreachable', sa.String(length=512), nullable=True),
        sa.Column('received', sa.Float(), nullable=True),
        sa.Column('boot', sa.String(length=64), nullable=True),
        sa.Column('seq', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('uuid', 'plugin'))
    sa.Table(
        'checks', m,
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('plugin', sa.String(length=255), nullable=False),
        sa.Column('status', sa.Integer(), nullable=False),
        sa.Column('output', sa.Text(), nullable=False),
        sa.Column('long_output', sa.Text(), nullable=False),
        sa.Column('perfdata', sa.JSON(), nullable=False),
        sa.Column('command_id', sa.String(length=64), nullable=False),
        sa.Column('slot', sa.Float(), nullable=True),
        sa.Column('started', sa.Float(), nullable=True),
        sa.Column('duration', sa.Float(), nullable=True),
        sa.Column('last_result', sa.Float(), nullable=False),
        sa.Column('router', sa.String(length=64), nullable=False),
        sa.Column('received_at', sa.Float(), nullable=True),
        sa.Column('boot', sa.String(length=64), nullable=True),
        sa.Column('seq', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('uuid', 'plugin'))
    _kept_back(m, 'downtime_suppressed', 'downtime_id')
    sa.Table(
        'downtimes', m,
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('host', sa.String(length=255), nullable=False),
        sa.Column('check_name', sa.String(length=255), nullable=True),
        sa.Column('start', sa.Float(), nullable=False),
        sa.Column('end', sa.Float(), nullable=True),
        sa.Column('every', sa.String(length=255), nullable=True),
        sa.Column('duration', sa.Float(), nullable=True),
        sa.Column('flexible', sa.Float(), nullable=True),
        sa.Column('children', sa.Boolean(), nullable=False),
        sa.Column('comment', sa.Text(), nullable=False),
        sa.Column('author', sa.String(length=255), nullable=False),
        sa.Column('created', sa.Float(), nullable=False),
        sa.Column('removed', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.Index('ix_downtimes_end', 'end'))
    sa.Table(
        'host_state', m,
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('up', sa.Boolean(), nullable=False),
        sa.Column('last_heard', sa.Float(), nullable=False),
        sa.Column('interval', sa.Float(), nullable=True),
        sa.Column('deadline', sa.Float(), nullable=False),
        sa.Column('since', sa.Float(), nullable=False),
        sa.Column('routers', sa.JSON(), nullable=False),
        sa.Column('notified', sa.Boolean(), nullable=False),
        sa.Column('pending', sa.Boolean(), nullable=False),
        sa.Column('updated', sa.Float(), nullable=False),
        sa.Column('unreachable', sa.String(length=512), nullable=True),
        sa.Column('gone', sa.Float(), nullable=True),
        sa.Column('deregistered', sa.Float(), nullable=True),
        sa.Column('clock_skew', sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint('uuid', 'name'),
        sa.Index('ix_host_state_deadline', 'deadline'),
        sa.Index('ix_host_state_pending', 'pending'))
    sa.Table(
        'notifications', m,
        sa.Column('msg_id', sa.String(length=64), nullable=False),
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('hostname', sa.String(length=255), nullable=True),
        sa.Column('severity', sa.String(length=16), nullable=False),
        sa.Column('text', sa.Text(), nullable=False),
        sa.Column('source', sa.String(length=255), nullable=True),
        sa.Column('sent_at', sa.Float(), nullable=False),
        sa.Column('received_at', sa.Float(), nullable=False),
        sa.Column('router', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('msg_id'),
        sa.Index('ix_notifications_received_at', 'received_at'))
    sa.Table(
        'notified_problems', m,
        sa.Column('key', sa.String(length=512), nullable=False),
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('check_name', sa.String(length=255), nullable=True),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('opened', sa.Float(), nullable=False),
        sa.Column('notifications', sa.Integer(), nullable=False),
        sa.Column('severity', sa.String(length=16), nullable=False),
        sa.Column('status', sa.Integer(), nullable=True),
        sa.Column('summary', sa.Text(), nullable=False),
        sa.Column('escalated', sa.JSON(), nullable=True),
        sa.Column('updated', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('key'),
        sa.Index('ix_notified_problems_opened', 'opened'))
    sa.Table(
        'silences', m,
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('host', sa.String(length=255), nullable=False),
        sa.Column('check_name', sa.String(length=255), nullable=True),
        sa.Column('created', sa.Float(), nullable=False),
        sa.Column('until', sa.Float(), nullable=False),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.Column('created_by', sa.String(length=255), nullable=False),
        sa.Column('removed', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.Index('ix_silences_until', 'until'))
    _kept_back(m, 'suppressed', 'silence_id')
    sa.Table(
        'web_audit', m,
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('ts', sa.Float(), nullable=False),
        sa.Column('who', sa.String(length=255), nullable=False),
        sa.Column('action', sa.String(length=64), nullable=False),
        sa.Column('target', sa.Text(), nullable=False),
        sa.Column('details', sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.Index('ix_web_audit_ts', 'ts'))
    sa.Table(
        'web_sessions', m,
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('user', sa.String(length=64), nullable=False),
        sa.Column('created', sa.Float(), nullable=False),
        sa.Column('expires', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('digest'),
        sa.Index('ix_web_sessions_user', 'user'))
    sa.Table(
        'web_tokens', m,
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('user', sa.String(length=64), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('label', sa.String(length=255), nullable=False),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('created', sa.Float(), nullable=False),
        sa.Column('last_used', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('digest'))
    sa.Table(
        'web_users', m,
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('password', sa.String(length=255), nullable=False),
        sa.Column('created', sa.Float(), nullable=False),
        sa.Column('created_by', sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint('name'))
    sa.Table(
        'agent_routers', m,
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('router', sa.String(length=64), nullable=False),
        sa.Column('last_seen', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['uuid'], ['agents.uuid'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('uuid', 'router'))
    sa.Table(
        'outbox', m,
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('event_id', sa.Integer(), nullable=False),
        sa.Column('key', sa.String(length=512), nullable=False),
        sa.Column('channel', sa.String(length=64), nullable=False),
        sa.Column('state', sa.String(length=8), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt', sa.Float(), nullable=False),
        sa.Column('claimed_by', sa.String(length=128), nullable=True),
        sa.Column('lease_until', sa.Float(), nullable=True),
        sa.Column('sent_at', sa.Float(), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('created', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['event_id'], ['alert_events.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.Index('ix_outbox_due', 'state', 'next_attempt'),
        sa.Index('ix_outbox_event', 'event_id'),
        sa.Index('ix_outbox_order', 'key', 'channel', 'id'))
    sa.Table(
        'plugins', m,
        sa.Column('uuid', sa.String(length=64), nullable=False),
        sa.Column('source', sa.String(length=255), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('spec', sa.JSON(), nullable=False),
        sa.Column('declared_at', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['uuid'], ['agents.uuid'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('uuid', 'source', 'name'))
    return m


def _kept_back(m: sa.MetaData, name: str, by: str) -> None:
    """``suppressed`` and ``downtime_suppressed``: alerts a silence or a downtime (``by``)
    held back."""
    sa.Table(
        name, m,
        sa.Column(by, sa.Integer(), nullable=False),
        sa.Column('key', sa.String(length=512), nullable=False),
        sa.Column('action', sa.String(length=16), nullable=False),
        sa.Column('severity', sa.String(length=16), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('uuid', sa.String(length=64), nullable=True),
        sa.Column('hostname', sa.String(length=255), nullable=True),
        sa.Column('check_name', sa.String(length=255), nullable=True),
        sa.Column('summary', sa.Text(), nullable=False),
        sa.Column('created', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(by, 'key', 'action', 'severity'))


def upgrade() -> None:
    bind = op.get_bind()
    found = sa.inspect(bind)
    tables = set(found.get_table_names())
    for table in frozen().sorted_tables:
        if table.name not in tables:
            table.create(bind, checkfirst=False)
            continue
        have = {c["name"] for c in found.get_columns(table.name)}
        for column in table.columns:
            if column.name in have:
                continue
            if not column.nullable:
                raise RuntimeError(f"{table.name}.{column.name}: a column added to an existing "
                                   f"table must be nullable or have a server default")
            op.add_column(table.name, sa.Column(column.name, column.type))
        indexes = {i["name"] for i in found.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(bind)


def downgrade() -> None:
    raise NotImplementedError("the baseline is not undone: its tables hold the fleet's state")
