"""SQLAlchemy 2 typed models of the release history.

The schema is owned by the Alembic migrations in ``migrations/``; a test runs
Alembic's autogenerate comparison to prove these models and the migrations agree.
Rows that must never change after they are written (releases, audit entries,
decided gate results) are guarded in :mod:`bot.adapters.store.guards`.

One module per family of tables: :mod:`.base`, :mod:`.deployments`, :mod:`.watches`, :mod:`.records`,
:mod:`.governance`, :mod:`.capacity`. Importing this package registers every table on ``Base.metadata``.
"""

from bot.adapters.store.models.base import NAMING, Base, UTCDateTime
from bot.adapters.store.models.capacity import CapacityReview, TrafficMixRow
from bot.adapters.store.models.deployments import Deployment, DeploymentLease, Endpoint, GateResult, ManifestRevision, Release
from bot.adapters.store.models.governance import LicenceReviewRecord, SecurityExceptionRecord
from bot.adapters.store.models.records import AuditEntry, Event, SlackDelivery, SlackPost, SlackWork
from bot.adapters.store.models.watches import Drill, Incident, MetricCursor, MetricSample, ReadinessCheck, Reservation

__all__ = [
    "NAMING",
    "AuditEntry",
    "Base",
    "CapacityReview",
    "Deployment",
    "DeploymentLease",
    "Drill",
    "Endpoint",
    "Event",
    "GateResult",
    "Incident",
    "LicenceReviewRecord",
    "ManifestRevision",
    "MetricCursor",
    "MetricSample",
    "ReadinessCheck",
    "Release",
    "Reservation",
    "SecurityExceptionRecord",
    "SlackDelivery",
    "SlackPost",
    "SlackWork",
    "TrafficMixRow",
    "UTCDateTime",
]
