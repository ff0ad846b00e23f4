"""The unit of work: one transaction, rolled back unless explicitly committed.

Services open one with ``with uow_factory() as uow:`` and call ``uow.commit()``
once everything they change (including the audit row and the outbox event) is
in place. An exception, or leaving the block without committing, rolls back.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.adapters.store import guards  # noqa: F401  (registers the immutability guard)
from bot.adapters.store.audit import AuditRepository
from bot.adapters.store.capacity import CapacityRepository
from bot.adapters.store.deliveries import DeliveryRepository
from bot.adapters.store.drills import DrillRepository
from bot.adapters.store.governance import GovernanceRepository
from bot.adapters.store.leases import LeaseRepository
from bot.adapters.store.posts import SlackPostRepository
from bot.adapters.store.repositories import (
    DeploymentRepository,
    EndpointRepository,
    EventRepository,
    GateResultRepository,
    IncidentRepository,
    ManifestRevisionRepository,
    ReadinessRepository,
    ReleaseRepository,
    ReservationRepository,
)
from bot.adapters.store.repository import flush
from bot.adapters.store.samples import SampleRepository
from bot.adapters.store.work import WorkRepository


class SqlUnitOfWork:
    endpoints: EndpointRepository
    releases: ReleaseRepository
    deployments: DeploymentRepository
    gates: GateResultRepository
    reservations: ReservationRepository
    readiness: ReadinessRepository
    incidents: IncidentRepository
    manifests: ManifestRevisionRepository
    audit: AuditRepository
    events: EventRepository
    deliveries: DeliveryRepository
    leases: LeaseRepository
    posts: SlackPostRepository
    governance: GovernanceRepository
    samples: SampleRepository
    work: WorkRepository
    capacity: CapacityRepository

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._session_factory = session_factory
        self.session: Session | None = None

    def __enter__(self) -> SqlUnitOfWork:
        session = self._session_factory()
        self.session = session
        self.endpoints = EndpointRepository(session)
        self.releases = ReleaseRepository(session)
        self.deployments = DeploymentRepository(session)
        self.gates = GateResultRepository(session)
        self.reservations = ReservationRepository(session)
        self.readiness = ReadinessRepository(session)
        self.incidents = IncidentRepository(session)
        self.manifests = ManifestRevisionRepository(session)
        self.audit = AuditRepository(session)
        self.events = EventRepository(session)
        self.deliveries = DeliveryRepository(session)
        self.leases = LeaseRepository(session)
        self.posts = SlackPostRepository(session)
        self.governance = GovernanceRepository(session)
        self.samples = SampleRepository(session)
        self.work = WorkRepository(session)
        self.drills = DrillRepository(session)
        self.capacity = CapacityRepository(session)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.session is not None
        try:
            self.session.rollback()
        finally:
            self.session.close()
            self.session = None

    def commit(self) -> None:
        assert self.session is not None, "commit() outside a `with` block"
        self.session.commit()

    def flush(self) -> None:
        """Send pending changes now; a broken constraint raises ``Conflict``."""
        assert self.session is not None
        flush(self.session)

    def rollback(self) -> None:
        assert self.session is not None
        self.session.rollback()


class UnitOfWorkFactory:
    """Callable that opens a new :class:`SqlUnitOfWork` on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions: sessionmaker[Session] = sessionmaker(bind=engine, expire_on_commit=False)

    def __call__(self) -> SqlUnitOfWork:
        return SqlUnitOfWork(self._sessions)


UowFactory = Callable[[], SqlUnitOfWork]
