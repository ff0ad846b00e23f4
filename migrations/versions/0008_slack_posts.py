"""slack_posts: each Slack message the notifier posts, claimed before the call and its ts recorded after

Revision ID: 0008
Revises: 0007
Create Date: 2027-01-24 10:00:00.000000

The outbox recorded a post only in the transaction that delivered its event: when that transaction failed
after Slack took the message (a decided gate's guard, a lost database connection, a replica stopped
mid-call), the record was lost and every replica posted the message again on every pass. A new table only:
the claim and the message's ts are each committed on their own, so no retry posts a message twice.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('slack_posts',
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('channel', sa.String(length=64), nullable=False),
    sa.Column('ts', sa.String(length=64), nullable=True),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('posted_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_slack_posts'))
    )


def downgrade() -> None:
    op.drop_table('slack_posts')
