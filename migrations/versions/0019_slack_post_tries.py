"""slack_posts.try_id: which try holds a post's claim, so taking a dead try's claim over is one compare-and-set

Revision ID: 0019
Revises: 0018
Create Date: 2027-03-08 10:00:00.000000

A claim without a ts is taken over only from the try that made it (or took it last): two replicas reaching an
expired claim at once cannot both post. Rows claimed before this revision have none; the first take-over names one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('slack_posts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('try_id', sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('slack_posts', schema=None) as batch_op:
        batch_op.drop_column('try_id')
