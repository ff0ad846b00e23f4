"""Manifest revisions: every manifest a deployment applied, so accepted limits re-applied to a running release keep history

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-22 10:00:00.000000

* ``manifest_revisions``: one row per manifest a deployment applied (its first render, then each re-render with
  limits accepted at the traffic gate), with the hash it replaced; ``deployments.applied_manifest`` keeps the newest.

A new table only: ``deployments`` is not touched, so SQLite needs no batch copy.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('manifest_revisions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('deployment_id', sa.Integer(), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('previous_sha256', sa.String(length=64), nullable=True),
    sa.Column('manifest', sa.Text(), nullable=False),
    sa.Column('limits', sa.JSON(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['deployment_id'], ['deployments.id'], name=op.f('fk_manifest_revisions_deployment_id_deployments')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_manifest_revisions')),
    sa.UniqueConstraint('deployment_id', 'revision', name=op.f('uq_manifest_revisions_deployment_id_revision'))
    )
    op.create_index(op.f('ix_manifest_revisions_deployment_id'), 'manifest_revisions', ['deployment_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_manifest_revisions_deployment_id'), table_name='manifest_revisions')
    op.drop_table('manifest_revisions')
