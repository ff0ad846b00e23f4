"""The audit log's repository: rows are added and read, never changed; and who acted on a deployment.

Every state change and refusal is one row (:class:`~bot.adapters.store.models.AuditEntry`). Besides the reads by
subject, :meth:`AuditRepository.actors` answers who acted on each of a page of deployments: the people whose ids a
message may mention where a stored reason names them (:func:`bot.domain.chat_text.stored_reason`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import func, select

from bot.adapters.store.models import AuditEntry
from bot.adapters.store.repository import Repository


class AuditRepository(Repository):
    def record(
        self,
        *,
        at: dt.datetime,
        actor: str,
        action: str,
        subject: str,
        details: dict[str, Any] | None = None,
        correlation_id: str | None = None,
    ) -> AuditEntry:
        entry = AuditEntry(
            at=at, actor=actor, action=action, subject=subject, details=details or {}, correlation_id=correlation_id
        )
        return self._add(entry)

    def actions(self, subject: str, action: str) -> list[tuple[str, str, dt.datetime, dict[str, Any]]]:
        """Every ``action`` row about ``subject``, newest first, as ``(action, actor, at, details)``."""
        rows = self.session.scalars(
            select(AuditEntry).where(AuditEntry.subject == subject, AuditEntry.action == action).order_by(AuditEntry.id.desc())
        ).all()
        return [(a.action, a.actor, a.at, a.details or {}) for a in rows]

    def newest(self, subject: str, actions: Collection[str]) -> Sequence[AuditEntry]:
        """The rows about ``subject`` whose action is one of ``actions``, newest first."""
        return self.session.scalars(
            select(AuditEntry).where(AuditEntry.subject == subject, AuditEntry.action.in_(list(actions)))
            .order_by(AuditEntry.id.desc())
        ).all()

    def list(self, subject: str | None = None, limit: int = 100) -> Sequence[AuditEntry]:
        stmt = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
        if subject is not None:
            stmt = stmt.where(AuditEntry.subject == subject)
        return self.session.scalars(stmt).all()

    def latest_id(self) -> int:
        return int(self.session.scalar(select(func.max(AuditEntry.id))) or 0)

    def actors(self, deployment_ids: Sequence[int]) -> dict[int, frozenset[str]]:
        """Who acted on each deployment, in one query: the actors of its audit rows (asked, moved or ended it,
        decided a gate, approved a ramp step, revised its limits…), but not of a refusal, which is no act."""
        subjects = {f"deployment:{i}": i for i in deployment_ids}
        found: dict[int, set[str]] = {i: set() for i in deployment_ids}
        if subjects:
            rows = self.session.execute(
                select(AuditEntry.subject, AuditEntry.actor).distinct()
                .where(AuditEntry.subject.in_(list(subjects)), AuditEntry.action.not_like("%refused"))).all()
            for subject, actor in rows:
                found[subjects[subject]].add(actor)
        return {i: frozenset(actors) for i, actors in found.items()}

