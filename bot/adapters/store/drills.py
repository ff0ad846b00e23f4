"""Availability drills (``drills``, migration 0013): one row per drill, newest first when listed."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from bot.adapters.store.models import Drill
from bot.adapters.store.repository import Repository, write_lock_on_sqlite


class DrillRepository(Repository):
    def add(self, drill: Drill) -> Drill:
        return self._add(drill)

    def get(self, drill_id: int) -> Drill | None:
        return self.session.get(Drill, drill_id)

    def get_for_update(self, drill_id: int) -> Drill | None:
        write_lock_on_sqlite(self.session, Drill, Drill.id == drill_id)
        return self.session.scalar(select(Drill).where(Drill.id == drill_id).with_for_update())

    def active_for(self, endpoint_id: int) -> Drill | None:
        """The drill waiting for its approver or running on the endpoint, if any."""
        return self.session.scalar(select(Drill).where(Drill.endpoint_id == endpoint_id, Drill.active.is_(True)))

    def for_endpoint(self, endpoint_id: int, limit: int = 10) -> Sequence[Drill]:
        return self.session.scalars(select(Drill).where(Drill.endpoint_id == endpoint_id)
                                    .order_by(Drill.id.desc()).limit(limit)).all()

    def last_passed(self, endpoint_id: int) -> Drill | None:
        return self.session.scalar(select(Drill).where(Drill.endpoint_id == endpoint_id, Drill.passed.is_(True))
                                   .order_by(Drill.ended_at.desc(), Drill.id.desc()).limit(1))
