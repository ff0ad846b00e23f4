"""endpoints.cold_start: each endpoint's last rollout's cold start, kept as a fact instead of searched for

Revision ID: 0017
Revises: 0016
Create Date: 2027-02-22 10:00:00.000000

``/kimi status`` and the App Home show each endpoint's last cold start. It was found by walking the endpoint's
``deployment.state`` events backwards to the newest that carried one: with years of events and an endpoint whose
rollouts recorded none, that walk read every state event of the endpoint on every render (issue 36). The readiness
step now writes the cold start on the endpoint's row in the same transaction as its event; this migration copies
each endpoint's newest one from the events.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # In place on SQLite too (as 0002): a batch copy would drop and rebuild ``endpoints``, which the foreign keys
    # of deployments refuse while they hold rows.
    with op.batch_alter_table('endpoints', recreate='never') as batch:
        batch.add_column(sa.Column('cold_start', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('cold_start_at', sa.DateTime(timezone=True), nullable=True))
    if op.get_bind().dialect.name == 'postgresql':
        op.execute("""
            UPDATE endpoints SET cold_start = newest.payload -> 'cold_start', cold_start_at = newest.at
            FROM (SELECT DISTINCT ON (endpoint_name) endpoint_name, payload, at FROM events
                  WHERE kind = 'deployment.state' AND payload ->> 'cold_start' IS NOT NULL
                  ORDER BY endpoint_name, id DESC) AS newest
            WHERE newest.endpoint_name = endpoints.name
        """)
    else:
        newest = ("FROM events WHERE events.endpoint_name = endpoints.name AND kind = 'deployment.state' "
                  "AND json_extract(payload, '$.cold_start') IS NOT NULL ORDER BY id DESC LIMIT 1")
        op.execute(f"UPDATE endpoints SET cold_start = (SELECT json_extract(payload, '$.cold_start') {newest}), "
                   f"cold_start_at = (SELECT at {newest})")


def downgrade() -> None:
    for column in ('cold_start_at', 'cold_start'):
        if op.get_bind().dialect.name == 'sqlite':
            op.execute(f'ALTER TABLE endpoints DROP COLUMN {column}')
        else:
            op.drop_column('endpoints', column)
