"""own_uncertain: kimi-ops's own requests that broke mid-way, kept apart from those answered in full

Revision ID: 0007
Revises: 0006
Create Date: 2027-01-23 10:00:00.000000

The closed-door check subtracted every request kimi-ops sent from the candidate's finished counter, so users
could hide in the bot's own rejected or broken requests. ``deployments.own_requests`` now counts only answered
requests; ``own_uncertain`` the ones the counter may or may not count. An added column with a default: SQLite
takes it without a batch copy.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('deployments', sa.Column('own_uncertain', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    # A batch copy would rebuild ``deployments`` under the rows that reference it; SQLite drops a column in place.
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('ALTER TABLE deployments DROP COLUMN own_uncertain')
    else:
        op.drop_column('deployments', 'own_uncertain')
