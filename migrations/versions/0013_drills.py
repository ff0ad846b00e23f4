"""drills: availability drills against live endpoints and what each one measured

Revision ID: 0013
Revises: 0012
Create Date: 2027-02-20 10:00:00.000000

One row per drill (``pod-deletion``, ``model-load-failure``, ``artifact-outage``, ``reservation-expiry``,
``bad-release``, ``node-loss``): who asked and who approved, whether users' impact was accepted, when the
fault was injected, detected, lifted and recovered, the alerts that fired and the verdict. At most one drill
waits or runs per endpoint (``active`` is true then and NULL afterwards, under a unique constraint).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('drills',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('active', sa.Boolean(), nullable=True),
    sa.Column('requested_by', sa.String(length=128), nullable=False),
    sa.Column('requested_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('accept_user_impact', sa.Boolean(), nullable=False),
    sa.Column('decided_by', sa.String(length=128), nullable=True),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('detected_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('lifted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('recovered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('alerts', sa.JSON(), nullable=False),
    sa.Column('passed', sa.Boolean(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('details', sa.JSON(), nullable=False),
    sa.CheckConstraint("state IN ('waiting', 'running', 'passed', 'failed', 'rejected')", name=op.f('ck_drills_state')),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_drills_endpoint_id_endpoints'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_drills')),
    sa.UniqueConstraint('endpoint_id', 'active', name=op.f('uq_drills_endpoint_id_active'))
    )
    op.create_index('ix_drills_endpoint_id_id', 'drills', ['endpoint_id', 'id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_drills_endpoint_id_id', table_name='drills')
    op.drop_table('drills')
