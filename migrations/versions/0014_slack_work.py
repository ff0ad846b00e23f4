"""slack_work: what a Slack request leaves to do after its acknowledgement, for the worker process

Revision ID: 0014
Revises: 0013
Create Date: 2027-02-21 10:00:00.000000

The process that answers Slack records each request's follow-up here (one small insert) and a worker process
beside it takes the row under a lease, runs it and deletes it; a row whose worker died is taken again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('slack_work',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('function', sa.String(length=64), nullable=False),
    sa.Column('request', sa.JSON(), nullable=False),
    sa.Column('holder', sa.String(length=128), nullable=True),
    sa.Column('lease_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_slack_work')),
    )


def downgrade() -> None:
    op.drop_table('slack_work')
