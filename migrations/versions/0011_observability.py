"""metric_samples and metric_cursors: the metrics watch's bounded history of each live endpoint

Revision ID: 0011
Revises: 0009
Create Date: 2027-02-10 10:00:00.000000

Incidents gain severity, acknowledgement, silence and their alert message's place. ``metric_samples`` holds cumulative good/bad event counts per objective and a few gauges,
thinned to one row an hour past the recent hours and dropped past the longest budget window;
``metric_cursors`` the last raw reading of each endpoint, to take the next delta from.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('metric_samples',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('hour', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('requests', sa.Float(), nullable=False),
    sa.Column('errors', sa.Float(), nullable=False),
    sa.Column('rejects', sa.Float(), nullable=False),
    sa.Column('ttft_events', sa.Float(), nullable=False),
    sa.Column('ttft_bad', sa.Float(), nullable=False),
    sa.Column('queue_events', sa.Float(), nullable=False),
    sa.Column('queue_bad', sa.Float(), nullable=False),
    sa.Column('e2e_events', sa.Float(), nullable=False),
    sa.Column('e2e_bad', sa.Float(), nullable=False),
    sa.Column('waiting', sa.Float(), nullable=True),
    sa.Column('kv_cache_usage', sa.Float(), nullable=True),
    sa.Column('gpu_utilisation', sa.Float(), nullable=True),
    sa.Column('gpu_memory', sa.Float(), nullable=True),
    sa.Column('gpu_power', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_metric_samples_endpoint_id_endpoints'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_metric_samples'))
    )
    op.create_index('ix_metric_samples_endpoint_at', 'metric_samples', ['endpoint_id', 'at'], unique=False)
    op.create_table('metric_cursors',
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('raw', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_metric_cursors_endpoint_id_endpoints'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('endpoint_id', name=op.f('pk_metric_cursors'))
    )
    with op.batch_alter_table('incidents') as batch:
        batch.add_column(sa.Column('severity', sa.String(length=8), nullable=True))
        batch.add_column(sa.Column('acknowledged_by', sa.String(length=128), nullable=True))
        batch.add_column(sa.Column('acknowledged_at', sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('silenced_until', sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('silenced_by', sa.String(length=128), nullable=True))
        batch.add_column(sa.Column('silence_reason', sa.Text(), nullable=True))
        batch.add_column(sa.Column('slack_channel', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('slack_ts', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('incidents') as batch:
        for column in ('slack_ts', 'slack_channel', 'silence_reason', 'silenced_by', 'silenced_until', 'acknowledged_at',
                       'acknowledged_by', 'severity'):
            batch.drop_column(column)
    op.drop_table('metric_cursors')
    op.drop_index('ix_metric_samples_endpoint_at', table_name='metric_samples')
    op.drop_table('metric_samples')
