"""side-door security exceptions: a production endpoint reached by something besides its route

Revision ID: 0015
Revises: 0014
Create Date: 2027-02-22 10:00:00.000000

The infrastructure gate's ``cluster.doors`` check lets a production endpoint keep a declared SageMaker endpoint and
its load balancer only under a recorded ``side-door`` exception; the kind joins the table's check constraint.
"""

from __future__ import annotations

from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

BEFORE = "kind IN ('trust-remote-code', 'unscanned-image', 'payload-capture', 'tensor-parallel')"
AFTER = "kind IN ('trust-remote-code', 'unscanned-image', 'payload-capture', 'tensor-parallel', 'side-door')"


def _kinds(condition: str) -> None:
    with op.batch_alter_table('security_exceptions') as batch:
        batch.drop_constraint(op.f('ck_security_exceptions_kind'), type_='check')
        batch.create_check_constraint(op.f('ck_security_exceptions_kind'), condition)


def upgrade() -> None:
    _kinds(AFTER)


def downgrade() -> None:
    op.execute("DELETE FROM security_exceptions WHERE kind = 'side-door'")
    _kinds(BEFORE)
