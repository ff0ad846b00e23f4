"""Immutability guards: what the store API refuses to change once written.

Releases and audit entries are append-only; a gate result, once decided, is frozen.
The guard runs in ``before_flush`` so no code path through the ORM can slip past it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, inspect
from sqlalchemy.orm import Session

from bot.adapters.store.models import AuditEntry, GateResult, Release


class ImmutableRowError(Exception):
    """Raised when code tries to change or delete a row that is append-only."""


def _changed(obj: Any) -> list[str]:
    state = inspect(obj)
    return [attr.key for attr in state.attrs if attr.history.has_changes()]


@event.listens_for(Session, "before_flush")
def _refuse_mutation(session: Session, flush_context: Any, instances: Any) -> None:
    for obj in session.deleted:
        if isinstance(obj, (Release, AuditEntry, GateResult)):
            raise ImmutableRowError(f"{type(obj).__name__} rows cannot be deleted")
    for obj in session.dirty:
        if isinstance(obj, (Release, AuditEntry)):
            changed = _changed(obj)
            if changed:
                raise ImmutableRowError(f"{type(obj).__name__} rows are immutable (tried to change {', '.join(changed)})")
        elif isinstance(obj, GateResult):
            history = inspect(obj).attrs.decision.history
            previously = history.deleted[0] if history.deleted else (history.unchanged[0] if history.unchanged else None)
            if previously is not None and [c for c in _changed(obj) if not _first_posting(obj, c)]:
                raise ImmutableRowError("a decided gate result cannot be changed")


# Where the gate's message was posted is delivery bookkeeping, not the decision: a report decided by kimi-ops
# itself (a rollback's evaluation, rollback_approvals 0) is decided before the notifier posts it.
_POSTING = frozenset({"slack_channel", "slack_ts"})


def _first_posting(obj: Any, column: str) -> bool:
    if column not in _POSTING:
        return False
    history = getattr(inspect(obj).attrs, column).history
    return not history.unchanged and all(old is None for old in history.deleted)
