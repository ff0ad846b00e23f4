"""The Context every service receives: settings, the unit of work, the clock and one typed adapter per port.

The composition root (:mod:`bot.bootstrap`) builds it once per process; tests
and the sandbox build it through the same :func:`bot.bootstrap.build_context`
with the real adapters aimed at local stand-ins. A port left ``None`` means this
process has no access to that part of the world (no AWS credentials, no
cluster); a service that needs it asks :func:`require`, which says so in one
sentence the user can act on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TypeVar

from bot.adapters.clock import Clock
from bot.adapters.store import UnitOfWorkFactory
from bot.config import Settings
from bot.services.errors import NotConfigured
from bot.services.ports import (
    AlertSilences,
    ArtifactVerifier,
    Cluster,
    Directory,
    EndpointClient,
    Evaluator,
    GpuTelemetry,
    LoadGenerator,
    ObjectiveCheck,
    ReservationSource,
)

P = TypeVar("P")


@dataclass(frozen=True)
class Ports:
    """One adapter per port of :mod:`bot.services.ports`; ``None`` where this process has none."""

    artifacts: ArtifactVerifier | None = None
    cluster: Cluster | None = None
    endpoint: EndpointClient | None = None
    reservations: ReservationSource | None = None
    evaluator: Evaluator | None = None
    loadgen: LoadGenerator | None = None
    directory: Directory | None = None
    objectives: ObjectiveCheck | None = None  # None: the ramp's own window objectives (services/objectives.py)
    gpus: GpuTelemetry | None = None  # DCGM exporters, read by the metrics watch where an endpoint names one
    silences: AlertSilences | None = None  # Alertmanager, for endpoints Prometheus watches (KIMI_ALERTMANAGER_URL)

    def over(self, base: Ports) -> Ports:
        """These ports, with ``base``'s filling every one not set here (given adapters win over defaults)."""
        return Ports(**{f.name: getattr(self, f.name) if getattr(self, f.name) is not None else getattr(base, f.name)
                        for f in fields(self)})


@dataclass(frozen=True)
class Context:
    """Everything a service needs; immutable, shared by every thread of the process."""

    settings: Settings
    uow: UnitOfWorkFactory
    clock: Clock
    ports: Ports = field(default_factory=Ports)

    def close(self) -> None:
        """Release the database pool and the kept-alive connections of the endpoint client and the DCGM reader."""
        self.uow.engine.dispose()
        for port in (self.ports.endpoint, self.ports.gpus):
            # A port built on first use and never used has no client to close: building one just to close it is waste.
            if port is None or not getattr(port, "built", True):
                continue
            closer = getattr(port, "close", None)
            if callable(closer):
                closer()


def require(port: P | None, what: str, purpose: str = "for this process") -> P:
    """``port`` itself, or :class:`NotConfigured` saying ``no <what> is configured <purpose>``."""
    if port is None:
        raise NotConfigured(f"no {what} is configured {purpose}")
    return port
