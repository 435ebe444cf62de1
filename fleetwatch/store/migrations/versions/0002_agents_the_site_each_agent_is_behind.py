"""agents.site: the site router each agent is behind, which the console's lists filter and
group by (issue 33). Nullable, no rows rewritten: the registry fills it from each agent's
next HELLO or REGISTER (a site router says its agents' HELLOs again on every new uplink);
until then an agent behind a site is listed with no site, as one attached centrally.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 06:35:57.504221
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ALTER TABLE ... ADD COLUMN on SQLite too: the table is not recreated
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("site", sa.String(length=255), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("not undone: an older fleetwatch works on this schema and "
                              "leaves the column alone")
