"""alert fingerprints: an incident opened from Alertmanager remembers which alert it is

Revision ID: 0016
Revises: 0015
Create Date: 2027-03-01 10:00:00.000000

``incidents.fingerprint`` holds Alertmanager's fingerprint of the alert an incident was opened for (NULL for the
built-in watch's incidents): a resolved notification closes only the incident of that very alert, and a Silence
press on it also silences the alert in Alertmanager.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('incidents') as batch:
        batch.add_column(sa.Column('fingerprint', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('incidents') as batch:
        batch.drop_column('fingerprint')
