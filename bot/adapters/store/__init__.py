"""The release-history store: SQLAlchemy models, repositories and the unit of work."""

from bot.adapters.store.engine import make_engine
from bot.adapters.store.uow import SqlUnitOfWork, UnitOfWorkFactory

__all__ = ["SqlUnitOfWork", "UnitOfWorkFactory", "make_engine"]
