"""capacity: production's traffic mix (from vLLM's histograms or a redacted trace) and capacity reviews

Revision ID: 0018
Revises: 0017
Create Date: 2027-03-01 10:00:00.000000

Lengths and shares only: no request text is ever stored in either table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('traffic_mixes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('mix', sa.JSON(), nullable=False),
    sa.Column('baseline', sa.JSON(), nullable=True),
    sa.Column('sha256', sa.String(length=64), nullable=True),
    sa.Column('registered_by', sa.String(length=128), nullable=True),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_traffic_mixes_endpoint_id_endpoints'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_traffic_mixes')),
    )
    op.create_index('ix_traffic_mixes_endpoint_id_source_id', 'traffic_mixes', ['endpoint_id', 'source', 'id'],
                    unique=False)
    op.create_table('capacity_reviews',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=True),
    sa.Column('release', sa.String(length=128), nullable=True),
    sa.Column('max_model_len', sa.Integer(), nullable=False),
    sa.Column('knee', sa.Integer(), nullable=True),
    sa.Column('workload', sa.JSON(), nullable=False),
    sa.Column('production_mix', sa.JSON(), nullable=True),
    sa.Column('proposal', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_capacity_reviews_endpoint_id_endpoints'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_capacity_reviews')),
    )
    op.create_index('ix_capacity_reviews_endpoint_id_id', 'capacity_reviews', ['endpoint_id', 'id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_capacity_reviews_endpoint_id_id', table_name='capacity_reviews')
    op.drop_table('capacity_reviews')
    op.drop_index('ix_traffic_mixes_endpoint_id_source_id', table_name='traffic_mixes')
    op.drop_table('traffic_mixes')
