"""Follow-up work handed from the process that answers Slack to the worker process, through the database.

The answering process of ``kimi-ops serve`` records each request's job here inside its acknowledgement
(:class:`bot.adapters.store.work.JobRecorder`: the request's claim across replicas and the job, one statement); while the database
does not answer, the job waits in the replica's spool (:mod:`bot.adapters.store.spool`) and its worker moves it
here later with :func:`accept`. The local shell and the tests' inline app have nothing to hand over.
A worker takes one (:func:`take`) under a
lease of ``lease`` seconds, renews the leases of what it still runs (:func:`renew`) and removes it when done
(:func:`finish`); if the worker dies, the lease lapses and the next worker to look takes the work again. Work
is therefore run at least once and never by two workers at a time; what it calls is safe to repeat (a gate
decision carries its ticket, so a repeated approval is refused as already decided).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.services.context import Context


@dataclass(frozen=True)
class Followup:
    id: int
    function: str
    request: dict[str, Any]
    attempts: int


def accept(ctx: Context, key: str, runs: Sequence[tuple[str, dict[str, Any]]], *, claimed: bool = False) -> bool:
    """Claim request ``key`` for this replica and record its ``runs`` (function, request) in one transaction.

    ``False`` (nothing recorded) when another delivery of the request was claimed first, on any replica: a copy
    to drop. ``claimed``: this replica already holds the claim (it ran part of the request at once), so only
    the runs are recorded. Claim and record commit together, so a worker that dies after this commit leaves
    work the next one finds in ``slack_work``, and its second ``accept`` of the same spooled runs is refused.
    """
    with ctx.uow() as uow:
        if not claimed and not uow.deliveries.claim(key, ctx.clock.now()):
            return False
        for function, request in runs:
            uow.work.add(function, request, ctx.clock.now())
        uow.commit()
    return True


def take(ctx: Context, holder: str, lease: float) -> Followup | None:
    now = ctx.clock.now()
    with ctx.uow() as uow:
        found = uow.work.take(holder, now, now + dt.timedelta(seconds=lease))
        uow.commit()
    return Followup(*found) if found is not None else None


def renew(ctx: Context, holder: str, ids: Sequence[int], lease: float) -> None:
    with ctx.uow() as uow:
        uow.work.renew(holder, ids, ctx.clock.now() + dt.timedelta(seconds=lease))
        uow.commit()


def finish(ctx: Context, holder: str, work_id: int) -> bool:
    with ctx.uow() as uow:
        done = uow.work.finish(work_id, holder)
        uow.commit()
    return done


def waiting(ctx: Context) -> int:
    with ctx.uow() as uow:
        return uow.work.waiting()
