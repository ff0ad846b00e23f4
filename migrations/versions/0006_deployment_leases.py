"""deployment_leases: one replica drives an endpoint's in-flight work at a time, with a heartbeat

Revision ID: 0006
Revises: 0005
Create Date: 2027-01-21 10:00:00.000000

A new table only (no batch copy of an existing one): the row of an endpoint names the replica
driving its deployment and when its lease lapses unless renewed; any replica takes a lapsed one over.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('deployment_leases',
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=True),
    sa.Column('holder', sa.String(length=200), nullable=False),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_deployment_leases_endpoint_id_endpoints'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('endpoint_id', name=op.f('pk_deployment_leases'))
    )
    op.create_index(op.f('ix_deployment_leases_expires_at'), 'deployment_leases', ['expires_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_deployment_leases_expires_at'), table_name='deployment_leases')
    op.drop_table('deployment_leases')
