"""Gates before exposure: the route's admission per endpoint, restores, endings after reopening, gate reminders

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-20 10:00:00.000000

* ``endpoints.admission``: what the route lets through now (``closed``, ``internal``, ``25%``, ``open``).
* ``deployments.cause_id``: on an automatic restore, the deployment whose ending started it.
* ``deployments.ending``: the end a deploy takes once ``reopening`` gave users back the running release.
* ``deployments.closed_baseline`` and ``own_requests``: the candidate's finished-request counter when its
  readiness passed, and the requests kimi-ops itself sent it since, so the counter proves nobody else reached it.
* ``gate_results.reminded_at``: when the approvers were reminded of a waiting gate (once, at half-time).
* States ``close_admission`` and ``reopen`` are now ``closing`` and ``reopening``.

Columns are added in place (no batch copy): SQLite would otherwise rebuild ``deployments``, which the
foreign keys of gate results and events refuse while they hold rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

RENAMED = {'close_admission': 'closing', 'reopen': 'reopening'}


def upgrade() -> None:
    op.add_column('endpoints', sa.Column('admission', sa.String(16), server_default='open', nullable=False))
    op.add_column('deployments', sa.Column('cause_id', sa.Integer(), nullable=True))
    op.add_column('deployments', sa.Column('ending', sa.String(16), nullable=True))
    op.add_column('deployments', sa.Column('own_requests', sa.Integer(), server_default='0', nullable=False))
    op.add_column('deployments', sa.Column('closed_baseline', sa.Float(), nullable=True))
    op.add_column('gate_results', sa.Column('reminded_at', sa.DateTime(timezone=True), nullable=True))
    endpoints = sa.table('endpoints', sa.column('admission', sa.String()), sa.column('admission_open', sa.Boolean()))
    op.execute(endpoints.update().where(endpoints.c.admission_open == sa.false()).values(admission='closed'))
    deployments = sa.table('deployments', sa.column('state', sa.String()))
    for old, new in RENAMED.items():
        op.execute(deployments.update().where(deployments.c.state == old).values(state=new))


def downgrade() -> None:
    deployments = sa.table('deployments', sa.column('state', sa.String()))
    for old, new in RENAMED.items():
        op.execute(deployments.update().where(deployments.c.state == new).values(state=old))
    sqlite = op.get_bind().dialect.name == 'sqlite'
    for table, column in (('gate_results', 'reminded_at'), ('deployments', 'closed_baseline'), ('deployments', 'own_requests'), ('deployments', 'ending'),
                          ('deployments', 'cause_id'), ('endpoints', 'admission')):
        if sqlite:
            op.execute(f'ALTER TABLE {table} DROP COLUMN {column}')
        else:
            op.drop_column(table, column)
