"""Pure comparison of what the database says runs with what the cluster and the route say.

Status must tell the truth: the database records what kimi-ops did, the
cluster is what runs. Each field that differs is one :class:`Drift` a person
reads in ``/kimi status``; no observation (the cluster did not answer) is
never taken as agreement — it is reported as unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Recorded:
    """What the database says: the release and limits kimi-ops applied last and the admission it set."""

    release: str | None
    release_hash: str | None
    image: str | None
    limits: dict[str, Any] | None
    admission: str | None


@dataclass(frozen=True)
class Observed:
    """What the cluster says: the applied objects' release annotations, image and limits, and the route's state.

    ``None`` in a field means the cluster has nothing there (no object, no
    annotation). ``limits`` uses :class:`bot.config.RequestLimits`' keys
    (``max_concurrent_requests``, ``max_queue_size``, ``overflow_status_code``),
    only those the cluster holds. ``admission`` is the state the route's rules
    and weights give (``unknown`` when they fit none). ``route_accepted`` is
    True when every parent Gateway accepted the route's current generation and
    resolved its backends, False when one refused either, None while none has
    reported on this generation. ``route`` is the route's one-line summary and
    ``workload`` names the object read (``InferenceEndpointConfig/kimi-prod``)
    when there is one.
    """

    release: str | None
    release_hash: str | None
    image: str | None
    limits: dict[str, Any] | None
    admission: str | None
    route_accepted: bool | None = None
    route: str | None = None
    workload: str | None = None


@dataclass(frozen=True)
class Drift:
    field: str
    recorded: str
    observed: str

    @property
    def words(self) -> str:
        return f"{self.field}: kimi-ops recorded {self.recorded}, the cluster has {self.observed}"


def _show(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
    return str(value)


def compare(recorded: Recorded, observed: Observed | None) -> list[Drift]:
    """Every field where the cluster differs from the record (an unreadable cluster is one drift: unknown)."""
    if observed is None:
        return [Drift("cluster", "a release", "no answer (could not be read)")]
    found: list[Drift] = []
    pairs: list[tuple[str, object, object]] = [
        ("release", recorded.release_hash, observed.release_hash),
        ("image", recorded.image, observed.image),
        ("request limits", recorded.limits, observed.limits),
        ("admission", recorded.admission, observed.admission),
    ]
    for name, mine, theirs in pairs:
        if mine is None and theirs is None:
            continue
        if name == "release" and mine != theirs:
            found.append(Drift(name, _show(recorded.release), _show(observed.release)))
        elif name != "release" and mine != theirs:
            found.append(Drift(name, _show(mine), _show(theirs)))
    if observed.route_accepted is False:
        found.append(Drift("route", "accepted by its gateway", "not accepted"))
    return found


@dataclass(frozen=True)
class ClusterTruth:
    """What status shows from the cluster beside kimi-ops's record of one endpoint.

    ``observed`` None means the cluster could not be read (unknown, never agreement). ``recorded`` is
    the manifest kimi-ops says runs (of deployment ``deployment_id``) and the admission it set.
    ``users_get`` says, in words, what an ordinary request reaches under the admission the route has
    now. ``accepted_limits`` are limits accepted at a traffic gate that are not what runs (None when
    they are, or none were accepted). ``drift`` lists every difference between record and cluster.
    ``on_fallback`` says, while a failover holds the endpoint's users (a pair's: the service's) on the fallback,
    since when and why.
    """

    recorded: Recorded
    observed: Observed | None
    deployment_id: int | None = None
    users_get: str | None = None
    accepted_limits: dict[str, Any] | None = None
    drift: tuple[Drift, ...] = ()
    on_fallback: str | None = None

    @property
    def known(self) -> bool:
        return self.observed is not None

    @property
    def applied_limits(self) -> dict[str, Any] | None:
        """The limits the cluster runs with; kimi-ops's record of them while the cluster cannot be read."""
        return self.observed.limits if self.observed is not None else self.recorded.limits
