"""query indexes and gate_results.status: the reads behind status, history, gates and jobs stay cheap at 100k deployments

Revision ID: 0009
Revises: 0008
Create Date: 2027-02-01 10:00:00.000000

Five indexes the hot queries need (an endpoint's live deployment, deployments in flight, undecided gates,
an endpoint's newest probes, one subject's audit rows), and a gate result's overall status as a column so
lists read it without decoding the whole report. Existing rows get their status from their stored report
(the worst status of its checks), in SQL on either database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

# The worst status of a report's checks, most severe first (bot.domain.checks.STATUS_ORDER); no checks is a pass.
_SEVERITY = ('error', 'fail', 'warn')


def _backfill_status() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == 'postgresql':
        has = ("EXISTS (SELECT 1 FROM json_array_elements(COALESCE(report::json -> 'checks', '[]'::json)) AS c "
               "WHERE c ->> 'status' = '{s}')")
    else:
        has = "EXISTS (SELECT 1 FROM json_each(report, '$.checks') WHERE json_extract(value, '$.status') = '{s}')"
    cases = ' '.join(f"WHEN {has.format(s=s)} THEN '{s}'" for s in _SEVERITY)
    op.execute(f"UPDATE gate_results SET status = CASE {cases} ELSE 'pass' END WHERE status IS NULL")


def upgrade() -> None:
    op.add_column('gate_results', sa.Column('status', sa.String(length=8), nullable=True))
    _backfill_status()
    op.create_index('ix_deployments_endpoint_id_state', 'deployments', ['endpoint_id', 'state'], unique=False)
    op.create_index('ix_deployments_in_flight', 'deployments', ['in_flight'], unique=False)
    op.create_index('ix_gate_results_undecided', 'gate_results', ['deployment_id'], unique=False,
                    sqlite_where=sa.text('decision IS NULL'), postgresql_where=sa.text('decision IS NULL'))
    op.create_index('ix_readiness_checks_endpoint_id_at_id', 'readiness_checks', ['endpoint_id', 'at', 'id'], unique=False)
    op.create_index('ix_audit_log_subject_id', 'audit_log', ['subject', 'id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_audit_log_subject_id', table_name='audit_log')
    op.drop_index('ix_readiness_checks_endpoint_id_at_id', table_name='readiness_checks')
    op.drop_index('ix_gate_results_undecided', table_name='gate_results',
                  sqlite_where=sa.text('decision IS NULL'), postgresql_where=sa.text('decision IS NULL'))
    op.drop_index('ix_deployments_in_flight', table_name='deployments')
    op.drop_index('ix_deployments_endpoint_id_state', table_name='deployments')
    with op.batch_alter_table('gate_results') as batch:
        batch.drop_column('status')
