"""Alembic environment and versions; run them with ``kimi-ops db upgrade``."""
