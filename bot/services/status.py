"""The status service's cluster side: what runs and what users get, read from the cluster, beside kimi-ops's record.

``/kimi status``, the App Home and ``kimi-ops status`` must not repeat the
database's belief. For each endpoint this module sets the record — the manifest
of the deployment kimi-ops says runs (read with the same reader as the cluster,
``Cluster.read_manifest``), the admission it set, the limits accepted at a
traffic gate — beside ``Cluster.observe``: the release, hash, image and limits
of the applied objects, and the route's admission, said in words by
:func:`bot.services.admission.users_get`. Every difference is a drift line
(:func:`bot.domain.drift.compare`).

A status page must answer even when the API server does not: every endpoint is
observed at once on a small pool, and whatever has not answered within
``OBSERVE_BUDGET_SECONDS`` is unknown (``cluster: unknown``), never agreement
and never a hang.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

from bot.adapters.store.models import Deployment, Endpoint
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.admission import AdmissionError, parse_admission
from bot.domain.drift import ClusterTruth, Observed, Recorded, compare
from bot.domain.rollout import RenderedManifest
from bot.domain.states import is_past_apply
from bot.logs import logger_for
from bot.services import ports
from bot.services.admission import users_get
from bot.services.context import Context
from bot.services.transitions import path_kind

log = logger_for(__name__)

# The whole page waits at most this long for the cluster (the adapter's own connect timeout is 3 s).
OBSERVE_BUDGET_SECONDS = 4.0
OBSERVE_WORKERS = 8


# ---------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class RecordSnapshot:
    """The deployments a status page needs, read once for all its endpoints (a few queries, not a few per endpoint)."""

    live: Mapping[int, Deployment]  # endpoint id → its live deployment
    holders: Mapping[int, Deployment]  # endpoint id → the deployment in flight on it
    causes: Mapping[int, Deployment]  # deployment id → an ended deploy a restore in flight undoes

    @classmethod
    def read(cls, uow: SqlUnitOfWork, endpoint_ids: Sequence[int], *, manifests: bool = True) -> RecordSnapshot:
        # One query for both (the caller read the endpoints' rows, so they are not read again).
        live, holders = uow.deployments.live_and_in_flight(list(endpoint_ids), manifests=manifests)
        causes = uow.deployments.by_ids([d.cause_id for d in holders.values() if d.cause_id is not None],
                                        listed=True, manifests=manifests)
        return cls(live=live, holders=holders, causes=causes)


def running_deployment(snapshot: RecordSnapshot, endpoint_id: int) -> Deployment | None:
    """The deployment whose manifest kimi-ops says the cluster carries now.

    A deployment in flight past its apply (the candidate, or a rollback's target) carries it; a restore that
    has not applied yet leaves the ended candidate that caused it on the cluster; otherwise the live one.
    """
    holder = snapshot.holders.get(endpoint_id)
    if holder is not None and holder.applied_manifest and is_past_apply(path_kind(holder), holder.state):
        return holder
    if holder is not None and holder.cause_id is not None:
        cause = snapshot.causes.get(holder.cause_id)
        if cause is not None and cause.applied_manifest:
            return cause
    return snapshot.live.get(endpoint_id)


def _manifest_facts(cluster: ports.Cluster | None, spec: EndpointSettings, dep: Deployment) -> Observed | None:
    if cluster is None or not dep.applied_manifest:
        return None
    try:
        return cluster.read_manifest(spec, RenderedManifest.from_text(dep.applied_manifest))
    except Exception:  # an unreadable stored manifest: the record says less, status still answers
        log.warning("stored manifest of deployment #%s unreadable for status", dep.id, exc_info=True)
        return None


def record_of(ctx: Context, snapshot: RecordSnapshot, row: Endpoint, spec: EndpointSettings) -> tuple[Recorded, int | None]:
    """What kimi-ops says runs on ``row`` and the admission it set, with the deployment it comes from."""
    dep = running_deployment(snapshot, row.id)
    if dep is None:
        return Recorded(release=None, release_hash=None, image=None, limits=None, admission=row.admission), None
    facts = _manifest_facts(ctx.ports.cluster, spec, dep)
    image = facts.image if facts is not None else dep.release.image
    return Recorded(release=dep.release.name, release_hash=dep.release.tuple_hash, image=image,
                    limits=facts.limits if facts is not None else None, admission=row.admission), dep.id


# ---------------------------------------------------------------------------- the cluster


def _observe_one(cluster: ports.Cluster, spec: EndpointSettings) -> Observed | None:
    try:
        return cluster.observe(spec)
    except Exception:  # the port promises not to raise; a status page must not depend on that
        log.warning("observing %s raised", spec.name, exc_info=True)
        return None


def observe_all(ctx: Context, specs: Sequence[EndpointSettings],
                budget_seconds: float = OBSERVE_BUDGET_SECONDS) -> dict[str, Observed | None]:
    """Each endpoint's observation, all at once; None for any the cluster did not answer within the budget."""
    cluster = ctx.ports.cluster
    if cluster is None or not specs:
        return {s.name: None for s in specs}
    pool = ThreadPoolExecutor(max_workers=min(OBSERVE_WORKERS, len(specs)), thread_name_prefix="observe")
    try:
        futures: dict[str, Future[Observed | None]] = {s.name: pool.submit(_observe_one, cluster, s) for s in specs}
        done, late = wait(futures.values(), timeout=budget_seconds)
    finally:
        # Late reads finish in the background and are dropped; nobody waits for them.
        pool.shutdown(wait=False, cancel_futures=True)
    if late:
        log.warning("%d endpoint(s) not observed within %.0f s: shown as unknown", len(late), budget_seconds)
    return {name: future.result() if future in done else None for name, future in futures.items()}


def _as_observed_by_status(spec: EndpointSettings, observed: Observed) -> Observed:
    # Without a route the application layer reads the admission ConfigMap, and a missing one means open.
    if spec.route is None and observed.admission is None:
        return replace(observed, admission="open")
    return observed


def users_get_words(spec: EndpointSettings, admission: str | None) -> str:
    """What an ordinary request reaches under the admission the cluster's route has, in words."""
    if admission is None:
        return "no route to Kimi K3 exists in the cluster"
    try:
        return users_get(spec, parse_admission(admission))
    except AdmissionError:
        return "unknown: the route's rules and weights fit no admission kimi-ops sets (edited by hand?)"


def _same(left: Mapping[str, Any] | None, right: Mapping[str, Any] | None) -> bool:
    keys = ("max_concurrent_requests", "max_queue_size")
    return left is not None and right is not None and all(left.get(k) == right.get(k) for k in keys)


def _not_applied(accepted: dict[str, Any] | None, applied: Mapping[str, Any] | None, known: bool) -> dict[str, Any] | None:
    """Accepted limits that are not what runs; None when they run, or when what runs cannot be known."""
    if accepted is None or _same(accepted, applied):
        return None
    if applied is None and not known:
        return None  # neither the cluster nor a readable record says what runs: claim nothing
    return accepted


def truth_of(spec: EndpointSettings, recorded: Recorded, deployment_id: int | None, observed: Observed | None) -> ClusterTruth:
    """The record and the observation of one endpoint, their drift, and accepted limits that do not run."""
    accepted = spec.accepted_request_limits.model_dump(mode="json") if spec.accepted_request_limits else None
    if observed is None:
        return ClusterTruth(recorded=recorded, observed=None, deployment_id=deployment_id,
                            accepted_limits=_not_applied(accepted, recorded.limits, False))
    observed = _as_observed_by_status(spec, observed)
    return ClusterTruth(recorded=recorded, observed=observed, deployment_id=deployment_id,
                        users_get=users_get_words(spec, observed.admission),
                        accepted_limits=_not_applied(accepted, observed.limits, True),
                        drift=tuple(compare(recorded, observed)))


def cluster_truths(ctx: Context, records: Mapping[str, tuple[EndpointSettings, Recorded, int | None]],
                   budget_seconds: float = OBSERVE_BUDGET_SECONDS) -> dict[str, ClusterTruth]:
    """Observe every endpoint of ``records`` (name → settings, record, deployment) and set each beside its record."""
    observed = observe_all(ctx, [spec for spec, _, _ in records.values()], budget_seconds)
    return {name: truth_of(spec, recorded, dep_id, observed.get(name)) for name, (spec, recorded, dep_id) in records.items()}

