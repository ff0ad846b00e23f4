"""slack_deliveries: the Slack requests already taken on, shared by every replica

Revision ID: 0003
Revises: 0002
Create Date: 2027-01-20 10:00:00.000000

Replaces the per-process replay guard: a replica inserts a request's key
before handling it and the primary key lets one insert win, so the same
request delivered to two replicas (or retried after it was handled) runs once.
Rows live only while Slack may still redeliver (minutes); the services purge them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('slack_deliveries',
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_slack_deliveries'))
    )
    with op.batch_alter_table('slack_deliveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_slack_deliveries_received_at'), ['received_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('slack_deliveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_slack_deliveries_received_at'))

    op.drop_table('slack_deliveries')
