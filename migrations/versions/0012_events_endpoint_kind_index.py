"""events(endpoint_name, kind, id): each endpoint's newest event of a kind, read for a whole fleet in one query

Revision ID: 0012
Revises: 0010
Create Date: 2027-02-20 10:00:00.000000

``/kimi status`` shows each endpoint's last cold start, carried by the newest ``deployment.state`` event of
the endpoint that has one; with this index that is one short backwards walk per endpoint inside one query.
"""

from __future__ import annotations

from alembic import op

revision = '0012'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_events_endpoint_name_kind_id', 'events', ['endpoint_name', 'kind', 'id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_events_endpoint_name_kind_id', table_name='events')
