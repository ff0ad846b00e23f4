"""Repositories: every query the services need, so that no SQL lives outside this package.

Repositories add and read; they never commit. The unit of work commits.
There are deliberately no update or delete methods for releases or audit entries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import cast

from sqlalchemy import Table, func, inspect, select, true, union_all, update
from sqlalchemy.orm import aliased, defer, lazyload, selectinload, undefer
from sqlalchemy.orm.interfaces import LoaderOption

from bot.adapters.store import outbox, outbox_writes
from bot.adapters.store.models import (
    Deployment,
    Endpoint,
    Event,
    GateResult,
    Incident,
    ManifestRevision,
    ReadinessCheck,
    Release,
    Reservation,
)
from bot.adapters.store.repository import Conflict as Conflict  # re-exported: services catch it from here
from bot.adapters.store.repository import Repository, write_lock_on_sqlite
from bot.domain.events import OutboxEvent


class EndpointRepository(Repository):
    def get(self, name: str) -> Endpoint | None:
        return self.session.scalar(select(Endpoint).where(Endpoint.name == name))

    def get_for_update(self, name: str) -> Endpoint | None:
        write_lock_on_sqlite(self.session, Endpoint, Endpoint.name == name)
        return self.session.scalar(select(Endpoint).where(Endpoint.name == name).with_for_update())

    def list(self) -> Sequence[Endpoint]:
        return self.session.scalars(select(Endpoint).order_by(Endpoint.name)).all()

    def add(self, endpoint: Endpoint) -> Endpoint:
        return self._add(endpoint)


class ReleaseRepository(Repository):
    def get(self, name: str) -> Release | None:
        return self.session.scalar(select(Release).where(Release.name == name))

    def get_by_id(self, release_id: int) -> Release | None:
        return self.session.get(Release, release_id)

    def by_tuple_hash(self, tuple_hash: str) -> Sequence[Release]:
        return self.session.scalars(select(Release).where(Release.tuple_hash == tuple_hash)).all()

    def list(self, limit: int | None = None) -> Sequence[Release]:
        stmt = select(Release).order_by(Release.registered_at.desc(), Release.id.desc())
        if limit:
            stmt = stmt.limit(limit)
        return self.session.scalars(stmt).all()

    def add(self, release: Release) -> Release:
        return self._add(release)


def _listing(manifests: bool = False, *, endpoints: bool = True) -> tuple[LoaderOption, ...]:
    """What lists of deployments (history, in flight, status) read: never a release's object list, and the applied
    manifest only when asked (``manifests``); they are the bulk of a row. A caller that reads one anyway gets it
    then, in a query of its own. Without ``endpoints`` the caller has the endpoints' rows in its session already:
    each deployment's endpoint is then found there, with no query and no second decoding of 500 settings."""
    # Selected once per list, not joined to every row: a list names few endpoints and releases, and a joined
    # row decodes its endpoint's settings and its release's JSON again for every deployment.
    related = (selectinload(Deployment.endpoint) if endpoints else lazyload(Deployment.endpoint),
               selectinload(Deployment.release).defer(Release.objects),
               selectinload(Deployment.replaces_release).defer(Release.objects))
    return related if manifests else (defer(Deployment.applied_manifest), *related)


class DeploymentRepository(Repository):
    def get(self, deployment_id: int) -> Deployment | None:
        return self.session.get(Deployment, deployment_id)

    def get_for_update(self, deployment_id: int) -> Deployment | None:
        write_lock_on_sqlite(self.session, Deployment, Deployment.id == deployment_id)
        return self.session.scalar(select(Deployment).where(Deployment.id == deployment_id).with_for_update(of=Deployment))

    def count_own(self, deployment_id: int, answered: int, uncertain: int) -> None:
        """Add to kimi-ops's own requests to the candidate in one statement (gate runs count from several threads)."""
        table = cast(Table, Deployment.__table__)  # not the ORM's bulk update: half the CPU, nothing to synchronise
        self.session.execute(update(table).where(table.c.id == deployment_id).values(
            own_requests=func.coalesce(table.c.own_requests, 0) + answered,
            own_uncertain=func.coalesce(table.c.own_uncertain, 0) + uncertain))

    def in_flight(self, endpoint_id: int) -> Deployment | None:
        return self.session.scalar(
            select(Deployment).where(Deployment.endpoint_id == endpoint_id, Deployment.in_flight.is_(True))
        )

    def all_in_flight(self, *, listed: bool = False, manifests: bool = False) -> Sequence[Deployment]:
        """Every deployment in flight, oldest first; ``listed`` leaves out what lists never show (see ``_listing``)."""
        stmt = select(Deployment).where(Deployment.in_flight.is_(True)).order_by(Deployment.id)
        return self.session.scalars(stmt.options(*_listing(manifests)) if listed else stmt).all()

    def for_endpoint(self, endpoint_id: int, limit: int | None = None, *, listed: bool = False) -> Sequence[Deployment]:
        stmt = select(Deployment).where(Deployment.endpoint_id == endpoint_id).order_by(Deployment.id.desc())
        if limit:
            stmt = stmt.limit(limit)
        return self.session.scalars(stmt.options(*_listing()) if listed else stmt).all()

    def by_ids(self, ids: Sequence[int], *, listed: bool = False, manifests: bool = False) -> dict[int, Deployment]:
        if not ids:
            return {}
        stmt = select(Deployment).where(Deployment.id.in_(list(ids)))
        return {d.id: d for d in self.session.scalars(stmt.options(*_listing(manifests)) if listed else stmt)}

    def live(self, endpoint_id: int) -> Deployment | None:
        """The endpoint's live deployment (the newest, should a crash ever have left two)."""
        return self.session.scalar(
            select(Deployment)
            .where(Deployment.endpoint_id == endpoint_id, Deployment.state == "live")
            .order_by(Deployment.id.desc())
            .limit(1)
        )

    def live_by_endpoint(self, endpoint_ids: Sequence[int], *, manifests: bool = False) -> dict[int, Deployment]:
        """The live deployment of each of ``endpoint_ids`` that has one, in one query (see ``_listing``).

        Callers read the endpoints' rows first (that is where their ids come from), so each deployment's endpoint
        comes from the session, not from a second read of every endpoint.
        """
        if not endpoint_ids:
            return {}
        rows = self.session.scalars(
            select(Deployment)
            .where(Deployment.endpoint_id.in_(list(endpoint_ids)), Deployment.state == "live")
            .options(*_listing(manifests, endpoints=False))
        ).all()
        # Sorted here: an ORDER BY id makes SQLite walk the whole table in id order instead of the index.
        return {d.endpoint_id: d for d in sorted(rows, key=lambda d: d.id)}  # the newest wins

    def live_and_in_flight(self, endpoint_ids: Sequence[int], *,
                           manifests: bool = False) -> tuple[dict[int, Deployment], dict[int, Deployment]]:
        """Each endpoint's live deployment and the one in flight on it, in one statement (``_listing``): the ids
        of each kind found by its own index, then the rows. The caller read the endpoints' rows, so each
        deployment's endpoint comes from the session."""
        if not endpoint_ids:
            return {}, {}
        ids = list(endpoint_ids)
        live = select(Deployment.id).where(Deployment.endpoint_id.in_(ids), Deployment.state == "live")
        flying = select(Deployment.id).where(Deployment.in_flight.is_(True), Deployment.endpoint_id.in_(ids))
        rows = self.session.scalars(
            select(Deployment).where(Deployment.id.in_(union_all(live, flying)))
            .options(*_listing(manifests, endpoints=False))
        ).all()
        ordered = sorted(rows, key=lambda d: d.id)  # the newest wins, should a crash ever have left two
        return ({d.endpoint_id: d for d in ordered if d.state == "live"},
                {d.endpoint_id: d for d in ordered if d.in_flight})

    def in_states(self, endpoint_id: int, states: Sequence[str]) -> Sequence[Deployment]:
        return self.session.scalars(
            select(Deployment)
            .where(Deployment.endpoint_id == endpoint_id, Deployment.state.in_(list(states)))
            .order_by(Deployment.id.desc())
        ).all()

    def add(self, deployment: Deployment) -> Deployment:
        return self._add(deployment)


class GateResultRepository(Repository):
    def get(self, row_id: int) -> GateResult | None:
        return self.session.get(GateResult, row_id)

    def latest(self, deployment_id: int, gate: str) -> GateResult | None:
        return self.session.scalar(
            select(GateResult)
            .where(GateResult.deployment_id == deployment_id, GateResult.gate == gate)
            .order_by(GateResult.id.desc())
            .limit(1)
        )

    def for_deployment(self, deployment_id: int) -> Sequence[GateResult]:
        return self.session.scalars(
            select(GateResult).where(GateResult.deployment_id == deployment_id).order_by(GateResult.id)
        ).all()

    def for_deployments(self, deployment_ids: Sequence[int]) -> dict[int, list[GateResult]]:
        """The gate results of several deployments in one query, each's oldest first.

        Reports are read only for gates not decided (a waiting gate shows its report; a list shows each other gate's
        ``status`` column), all in one more query; any other report that is read is loaded then.
        """
        found: dict[int, list[GateResult]] = {i: [] for i in deployment_ids}
        if not deployment_ids:
            return found
        rows = self.session.scalars(
            select(GateResult)
            .where(GateResult.deployment_id.in_(list(deployment_ids)))
            .order_by(GateResult.id)
            .options(defer(GateResult.report), defer(GateResult.seen))
        )
        undecided = []
        for row in rows:
            found[row.deployment_id].append(row)
            if row.decision is None and "report" in inspect(row).unloaded:
                undecided.append(row.id)
        if undecided:
            # A waiting gate's report is shown (its checks and hash bind the buttons): all of them in one query.
            self.session.scalars(select(GateResult).where(GateResult.id.in_(undecided))
                                 .options(undefer(GateResult.report))).all()
        return found

    def pending(self) -> Sequence[GateResult]:
        """Latest undecided gate result of each in-flight deployment."""
        rows = self.session.scalars(
            select(GateResult)
            .join(Deployment, Deployment.id == GateResult.deployment_id)
            .where(Deployment.in_flight.is_(True), GateResult.decision.is_(None))
            .order_by(GateResult.id)
        ).all()
        latest: dict[tuple[int, str], GateResult] = {}
        for row in rows:
            latest[(row.deployment_id, row.gate)] = row
        return list(latest.values())

    def add(self, result: GateResult) -> GateResult:
        return self._add(result)


class ReservationRepository(Repository):
    def get(self, reservation_id: str) -> Reservation | None:
        return self.session.get(Reservation, reservation_id)

    def list(self, include_gone: bool = False, for_update: bool = False) -> Sequence[Reservation]:
        """Soonest end first; ``for_update`` locks the rows so two concurrent watches cannot both send an alert."""
        stmt = select(Reservation).order_by(Reservation.end_at)
        if not include_gone:
            stmt = stmt.where(Reservation.gone_at.is_(None))
        if for_update:
            stmt = stmt.with_for_update()
        return self.session.scalars(stmt).all()

    def add(self, reservation: Reservation) -> Reservation:
        return self._add(reservation)


class ReadinessRepository(Repository):
    def add(self, check: ReadinessCheck) -> ReadinessCheck:
        return self._add(check)

    def recent(self, endpoint_id: int, limit: int = 10) -> Sequence[ReadinessCheck]:
        return self.session.scalars(
            select(ReadinessCheck)
            .where(ReadinessCheck.endpoint_id == endpoint_id)
            .order_by(ReadinessCheck.at.desc(), ReadinessCheck.id.desc())
            .limit(limit)
        ).all()

    def recent_by_endpoint(self, endpoint_ids: Sequence[int], limit: int) -> dict[int, list[ReadinessCheck]]:
        """Each endpoint's newest ``limit`` probes (newest first), in one query walking the (endpoint, at, id) index.

        PostgreSQL takes a LATERAL join; SQLite has none, and takes a correlated ``IN`` per endpoint instead.
        """
        found: dict[int, list[ReadinessCheck]] = {i: [] for i in endpoint_ids}
        if not endpoint_ids or limit <= 0:
            return found
        newest = aliased(ReadinessCheck)
        order = (newest.at.desc(), newest.id.desc())
        if self.session.get_bind().dialect.name == "postgresql":
            latest = select(newest).where(newest.endpoint_id == Endpoint.id).order_by(*order).limit(limit).lateral()
            check = aliased(ReadinessCheck, latest)
            stmt = select(check).select_from(Endpoint).join(latest, true()).where(Endpoint.id.in_(list(endpoint_ids)))
            rows = self.session.scalars(stmt).all()
        else:
            ids = select(newest.id).where(newest.endpoint_id == Endpoint.id).order_by(*order).limit(limit)
            stmt = (select(ReadinessCheck).select_from(Endpoint)
                    .join(ReadinessCheck, ReadinessCheck.id.in_(ids))
                    .where(Endpoint.id.in_(list(endpoint_ids))))
            rows = self.session.scalars(stmt).all()
        for row in sorted(rows, key=lambda r: (r.at, r.id), reverse=True):
            found[row.endpoint_id].append(row)
        return found

    def latest_id(self) -> int:
        return int(self.session.scalar(select(func.max(ReadinessCheck.id))) or 0)


class IncidentRepository(Repository):
    def open_for(self, endpoint_id: int, kind: str) -> Incident | None:
        return self.session.scalar(
            select(Incident).where(Incident.endpoint_id == endpoint_id, Incident.kind == kind, Incident.open.is_(True))
        )

    def add(self, incident: Incident) -> Incident:
        return self._add(incident)

    def get(self, incident_id: int) -> Incident | None:
        return self.session.get(Incident, incident_id)

    def get_for_update(self, incident_id: int) -> Incident | None:
        write_lock_on_sqlite(self.session, Incident, Incident.id == incident_id)
        return self.session.scalar(select(Incident).where(Incident.id == incident_id).with_for_update())

    def open_of(self, endpoint_id: int, kinds: Sequence[str]) -> Sequence[Incident]:
        return self.session.scalars(select(Incident).where(Incident.endpoint_id == endpoint_id,
                                                           Incident.kind.in_(list(kinds)), Incident.open.is_(True))).all()

    def silence_of(self, endpoint_id: int, kind: str, now: dt.datetime) -> Incident | None:
        """The latest incident of ``kind`` on the endpoint whose silence still holds at ``now``."""
        return self.session.scalar(select(Incident).where(Incident.endpoint_id == endpoint_id, Incident.kind == kind,
                                                          Incident.silenced_until > now)
                                   .order_by(Incident.silenced_until.desc()).limit(1))

    def open_by_endpoint(self, kinds: Sequence[str]) -> dict[int, list[Incident]]:
        """Every open incident of the given kinds, by endpoint id, oldest first (one query for a whole status page)."""
        found: dict[int, list[Incident]] = {}
        rows = self.session.scalars(
            select(Incident).where(Incident.kind.in_(list(kinds)), Incident.open.is_(True)).order_by(Incident.opened_at)
        ).all()
        for row in rows:
            found.setdefault(row.endpoint_id, []).append(row)
        return found


class ManifestRevisionRepository(Repository):
    def add(self, revision: ManifestRevision) -> ManifestRevision:
        return self._add(revision)

    def for_deployment(self, deployment_id: int) -> Sequence[ManifestRevision]:
        """A deployment's revisions, oldest first."""
        return self.session.scalars(
            select(ManifestRevision).where(ManifestRevision.deployment_id == deployment_id).order_by(ManifestRevision.revision)
        ).all()


class EventRepository(Repository):
    def emit(self, event: OutboxEvent, *, at: dt.datetime) -> Event:
        """Store ``event`` in the outbox, in the caller's transaction (the notifier sends it after the commit)."""
        kind, payload = outbox.to_row(event)
        row = Event(at=at, kind=kind, deployment_id=event.deployment_id, endpoint_name=event.endpoint_name, payload=payload)
        outbox_writes.note()
        return self._add(row)

    def undelivered(self, limit: int = 100) -> Sequence[Event]:
        return self.session.scalars(
            select(Event).where(Event.delivered_at.is_(None)).order_by(Event.id).limit(limit)
        ).all()

    def for_endpoint_kind(self, endpoint_id: int, kind: str, incident_id: int) -> Sequence[Event]:
        """The events of ``kind`` about one incident (its alert), by the endpoint's name."""
        name = select(Endpoint.name).where(Endpoint.id == endpoint_id).scalar_subquery()
        rows = self.session.scalars(select(Event).where(Event.kind == kind, Event.endpoint_name == name)
                                    .order_by(Event.id.desc()).limit(200)).all()
        return [r for r in rows if (r.payload or {}).get("incident_id") == incident_id]

    def for_deployment(self, deployment_id: int) -> Sequence[Event]:
        return self.session.scalars(select(Event).where(Event.deployment_id == deployment_id).order_by(Event.id)).all()
