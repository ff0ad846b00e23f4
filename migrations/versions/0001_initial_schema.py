"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-12-03 01:04:17.259625
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('audit_log',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('subject', sa.String(length=256), nullable=False),
    sa.Column('details', sa.JSON(), nullable=False),
    sa.Column('correlation_id', sa.String(length=64), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_log'))
    )
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_log_at'), ['at'], unique=False)

    op.create_table('endpoints',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('environment', sa.String(length=32), nullable=False),
    sa.Column('namespace', sa.String(length=63), nullable=False),
    sa.Column('url', sa.String(length=512), nullable=False),
    sa.Column('admission_open', sa.Boolean(), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("kind IN ('hyperpod', 'eks')", name=op.f('ck_endpoints_kind')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_endpoints')),
    sa.UniqueConstraint('name', name=op.f('uq_endpoints_name'))
    )
    op.create_table('releases',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('model_repo', sa.String(length=256), nullable=False),
    sa.Column('model_commit', sa.String(length=40), nullable=False),
    sa.Column('weights_prefix', sa.String(length=1024), nullable=False),
    sa.Column('objects', sa.JSON(), nullable=False),
    sa.Column('image', sa.String(length=512), nullable=False),
    sa.Column('serving_args', sa.JSON(), nullable=False),
    sa.Column('serving_env', sa.JSON(), nullable=False),
    sa.Column('licence_version', sa.String(length=128), nullable=False),
    sa.Column('licence_uri', sa.String(length=1024), nullable=True),
    sa.Column('licence_sha256', sa.String(length=64), nullable=False),
    sa.Column('evaluation_report', sa.String(length=1024), nullable=True),
    sa.Column('trust_remote_code_exception', sa.String(length=256), nullable=True),
    sa.Column('tuple_hash', sa.String(length=64), nullable=False),
    sa.Column('registered_by', sa.String(length=128), nullable=False),
    sa.Column('registered_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_releases')),
    sa.UniqueConstraint('name', name=op.f('uq_releases_name'))
    )
    with op.batch_alter_table('releases', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_releases_tuple_hash'), ['tuple_hash'], unique=False)

    op.create_table('reservations',
    sa.Column('id', sa.String(length=256), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('instance_type', sa.String(length=64), nullable=False),
    sa.Column('availability_zone', sa.String(length=32), nullable=True),
    sa.Column('instance_count', sa.Integer(), nullable=False),
    sa.Column('start_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('end_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('endpoint_name', sa.String(length=63), nullable=True),
    sa.Column('alerts_sent', sa.JSON(), nullable=False),
    sa.Column('first_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('gone_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("kind IN ('capacity-block', 'training-plan')", name=op.f('ck_reservations_kind')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_reservations'))
    )
    op.create_table('deployments',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('release_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('state_reason', sa.Text(), nullable=True),
    sa.Column('in_flight', sa.Boolean(), nullable=True),
    sa.Column('requested_by', sa.String(length=128), nullable=False),
    sa.Column('replaces_release_id', sa.Integer(), nullable=True),
    sa.Column('rollback_of_id', sa.Integer(), nullable=True),
    sa.Column('applied_manifest', sa.Text(), nullable=True),
    sa.Column('manifest_hash', sa.String(length=64), nullable=True),
    sa.Column('slack_channel', sa.String(length=32), nullable=True),
    sa.Column('slack_thread_ts', sa.String(length=32), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("kind IN ('deploy', 'rollback')", name=op.f('ck_deployments_kind')),
    sa.CheckConstraint('in_flight IS NULL OR in_flight = true', name=op.f('ck_deployments_in_flight_true_or_null')),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_deployments_endpoint_id_endpoints')),
    sa.ForeignKeyConstraint(['release_id'], ['releases.id'], name=op.f('fk_deployments_release_id_releases')),
    sa.ForeignKeyConstraint(['replaces_release_id'], ['releases.id'], name=op.f('fk_deployments_replaces_release_id_releases')),
    sa.ForeignKeyConstraint(['rollback_of_id'], ['deployments.id'], name=op.f('fk_deployments_rollback_of_id_deployments')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_deployments')),
    sa.UniqueConstraint('endpoint_id', 'in_flight', name=op.f('uq_deployments_endpoint_id_in_flight'))
    )
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_deployments_endpoint_id'), ['endpoint_id'], unique=False)

    op.create_table('incidents',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('open', sa.Boolean(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('opened_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('closed_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_incidents_endpoint_id_endpoints')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_incidents')),
    sa.UniqueConstraint('endpoint_id', 'kind', 'open', name=op.f('uq_incidents_endpoint_id_kind_open'))
    )
    op.create_table('readiness_checks',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ok', sa.Boolean(), nullable=False),
    sa.Column('http_status', sa.Integer(), nullable=True),
    sa.Column('ttft_ms', sa.Float(), nullable=True),
    sa.Column('total_ms', sa.Float(), nullable=True),
    sa.Column('failure_kind', sa.String(length=32), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], name=op.f('fk_readiness_checks_endpoint_id_endpoints')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_readiness_checks'))
    )
    with op.batch_alter_table('readiness_checks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_readiness_checks_endpoint_id'), ['endpoint_id'], unique=False)

    op.create_table('events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=True),
    sa.Column('endpoint_name', sa.String(length=63), nullable=True),
    sa.Column('payload', sa.JSON(), nullable=False),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['deployment_id'], ['deployments.id'], name=op.f('fk_events_deployment_id_deployments')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_events'))
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_events_delivered_at'), ['delivered_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_events_deployment_id'), ['deployment_id'], unique=False)

    op.create_table('gate_results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=False),
    sa.Column('gate', sa.String(length=16), nullable=False),
    sa.Column('report', sa.JSON(), nullable=False),
    sa.Column('report_hash', sa.String(length=64), nullable=False),
    sa.Column('checked_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('decision', sa.String(length=16), nullable=True),
    sa.Column('decided_by', sa.String(length=128), nullable=True),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('decision_reason', sa.Text(), nullable=True),
    sa.Column('seen', sa.JSON(), nullable=True),
    sa.Column('slack_channel', sa.String(length=32), nullable=True),
    sa.Column('slack_ts', sa.String(length=32), nullable=True),
    sa.CheckConstraint("decision IS NULL OR decision IN ('approved', 'rejected')", name=op.f('ck_gate_results_decision')),
    sa.CheckConstraint("gate IN ('artifact', 'infrastructure', 'model', 'traffic')", name=op.f('ck_gate_results_gate')),
    sa.ForeignKeyConstraint(['deployment_id'], ['deployments.id'], name=op.f('fk_gate_results_deployment_id_deployments')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gate_results'))
    )
    with op.batch_alter_table('gate_results', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_gate_results_deployment_id'), ['deployment_id'], unique=False)
        batch_op.create_index('uq_gate_results_one_decision', ['deployment_id', 'gate'], unique=True, sqlite_where=sa.text('decision IS NOT NULL'), postgresql_where=sa.text('decision IS NOT NULL'))



def downgrade() -> None:
    with op.batch_alter_table('gate_results', schema=None) as batch_op:
        batch_op.drop_index('uq_gate_results_one_decision', sqlite_where=sa.text('decision IS NOT NULL'), postgresql_where=sa.text('decision IS NOT NULL'))
        batch_op.drop_index(batch_op.f('ix_gate_results_deployment_id'))

    op.drop_table('gate_results')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_events_deployment_id'))
        batch_op.drop_index(batch_op.f('ix_events_delivered_at'))

    op.drop_table('events')
    with op.batch_alter_table('readiness_checks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_readiness_checks_endpoint_id'))

    op.drop_table('readiness_checks')
    op.drop_table('incidents')
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_deployments_endpoint_id'))

    op.drop_table('deployments')
    op.drop_table('reservations')
    with op.batch_alter_table('releases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_releases_tuple_hash'))

    op.drop_table('releases')
    op.drop_table('endpoints')
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_log_at'))

    op.drop_table('audit_log')
