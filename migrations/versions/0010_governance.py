"""licence_reviews and security_exceptions: the records the artifact gate requires

Revision ID: 0010
Revises: 0011
Create Date: 2027-02-01 10:00:00.000000

The licence was checked only by its document's SHA-256, and a security exception was any non-empty string
in the release. Two new tables: who reviewed the licence for an endpoint's exposure and licence version, what
they attested and until when; and reviewed exceptions (trust-remote-code, unscanned image, payload capture,
tensor parallel) with reviewer, reason, scope and expiry. And releases.provenance (nullable): the serving image's
base image, CUDA, driver compatibility and vLLM commit; older releases have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('licence_reviews',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('endpoint', sa.String(length=63), nullable=False),
    sa.Column('licence_version', sa.String(length=128), nullable=False),
    sa.Column('reviewer', sa.String(length=128), nullable=False),
    sa.Column('reviewed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('classification', sa.String(length=16), nullable=False),
    sa.Column('third_party_exposure', sa.Boolean(), nullable=False),
    sa.Column('maas_revenue_over_threshold', sa.Boolean(), nullable=False),
    sa.Column('separate_agreement', sa.String(length=256), nullable=True),
    sa.Column('attribution', sa.String(length=1024), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("classification IN ('internal', 'third-party', 'maas')",
                       name=op.f('ck_licence_reviews_classification')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_licence_reviews'))
    )
    op.create_index(op.f('ix_licence_reviews_endpoint'), 'licence_reviews', ['endpoint'], unique=False)
    op.create_table('security_exceptions',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.Column('target', sa.String(length=128), nullable=False),
    sa.Column('reviewer', sa.String(length=128), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('recorded_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("kind IN ('trust-remote-code', 'unscanned-image', 'payload-capture', 'tensor-parallel')",
                       name=op.f('ck_security_exceptions_kind')),
    sa.CheckConstraint("scope IN ('release', 'endpoint')", name=op.f('ck_security_exceptions_scope')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_security_exceptions'))
    )
    op.add_column('releases', sa.Column('provenance', sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column('releases', 'provenance')
    op.drop_table('security_exceptions')
    op.drop_index(op.f('ix_licence_reviews_endpoint'), table_name='licence_reviews')
    op.drop_table('licence_reviews')
