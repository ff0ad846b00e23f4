"""deployments.rollback_offered: a stored fact instead of a phrase searched in the reason text

Revision ID: 0002
Revises: 0001
Create Date: 2027-01-12 10:00:00.000000

Deployments that failed before this revision said so only in ``state_reason``
("…; rollback offered"); those rows are marked from that text once, here, so
history reads the same before and after the upgrade.

Both directions change the table in place on SQLite too (a plain-string server
default, and SQLite's own DROP COLUMN, 3.35 or later): a batch copy would drop
and rebuild ``deployments``, which the foreign keys of gate results and events
refuse while they hold rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.add_column(sa.Column('rollback_offered', sa.Boolean(), server_default='0', nullable=False))

    deployments = sa.table(
        'deployments',
        sa.column('state', sa.String()),
        sa.column('state_reason', sa.Text()),
        sa.column('rollback_offered', sa.Boolean()),
    )
    op.execute(
        deployments.update()
        .where(deployments.c.state == 'failed', deployments.c.state_reason.like('%rollback offered%'))
        .values(rollback_offered=True)
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('ALTER TABLE deployments DROP COLUMN rollback_offered')
    else:
        op.drop_column('deployments', 'rollback_offered')
