"""How accepted request limits reach the cluster: through the procedure, never over admitted users.

A new concurrency limit restarts the model pod (EKS: a new ``--max-num-seqs``; HyperPod: a new
``worker.requestLimits`` the operator rolls out), so it is applied the way a release is. Accepting
(:func:`bot.services.traffic_gate.accept_proposed_limits`) decides how from where the measured deployment stands
(:func:`plan_limits`):

* **users closed out** (the deployment is past its apply and still at its gates): applied at once, as a new
  manifest revision; nobody is admitted to the candidate yet, and its ramp first watches that revision's rollout
  and runs the readiness suite again (:mod:`bot.services.engine.revised`);
* **ramping on a single node** (users admitted step by step): the new revision is stored, not applied, and the
  ramp carries it out itself: close (everyone to the fallback) → drain → apply → rollout → readiness, then the ramp
  starts again from its first step. Each part is recorded in the audit (:data:`LIMITS_CLOSED` …) as it is done,
  so a takeover continues where the last replica stopped (:func:`limits_step`);
* **live on a single node**: a restore of the same release with the new limits is created (kind ``rollback``
  caused by the live deployment): close → drain → apply → readiness → evaluation → reopen. The accepting command
  drives it at once, like ``/kimi rollback``; the takeover round only picks it up after a crash;
* **a side of a pair**: applied at once when its side is idle (every user on the other side); while users are on
  it (live, or ramping with the other side taking the rest) they are kept for the next deployment onto it
  (``/kimi status`` says "accepted, not applied").
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from bot.adapters.store.models import Deployment, Endpoint, ManifestRevision
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.limits import limits_words
from bot.domain.rollout import RenderedManifest
from bot.domain.states import USERS_CLOSED_OUT, State, is_past_apply
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.releases import manifest_from_row
from bot.services.transitions import KIMI_OPS, create_deployment

log = logger_for(__name__)

REVISED = "manifest.revised"
LIMITS_CLOSED, LIMITS_DRAINED, LIMITS_APPLIED, LIMITS_READY = (
    "limits.users_closed", "limits.drained", "limits.applied", "limits.ready")
"""The audit actions of a ramping deployment's limits procedure (subject ``deployment:N``, details ``revision``)."""

_LEFT_AFTER = {LIMITS_CLOSED: "drain", LIMITS_DRAINED: "apply", LIMITS_APPLIED: "ready"}
RAMP_AGAIN = "close → drain → apply → readiness → the ramp again from its first step"


@dataclass(frozen=True)
class LimitsPlan:
    """What accepting does: ``apply`` now, ``ramp`` (the ramp carries them out), ``restore``, or ``keep`` for later."""

    how: str
    why: str


def plan_limits(dep: Deployment, row: Endpoint, endpoint: EndpointSettings) -> LimitsPlan:
    """Where ``dep`` stands decides how its accepted limits are applied (see the module docstring)."""
    state = State(dep.state)
    running = state == State.LIVE or is_past_apply(dep.kind, dep.state)
    if not running or dep.applied_manifest is None:
        return LimitsPlan("keep", "the next manifest rendered for it uses them")
    if state in USERS_CLOSED_OUT:
        return LimitsPlan("apply", "users are closed out of it")
    if endpoint.pair is not None:
        if state == State.RAMPING:  # its users move onto it step by step: never idle until the other side's next deploy
            return LimitsPlan("keep", f"{endpoint.name} is ramping: users are on both sides of {endpoint.pair.service}, "
                                      "so the next deployment onto this side carries them")
        if row.admission == "closed":
            return LimitsPlan("apply", f"its side is idle (every user is on {endpoint.pair.partner})")
        return LimitsPlan("keep", f"users are on this side of {endpoint.pair.service}: the next deployment onto it carries "
                                  "them")
    if state == State.RAMPING:
        return LimitsPlan("ramp", RAMP_AGAIN)
    return LimitsPlan("restore", "close → drain → apply → readiness → evaluation → reopen")


class ApplyRefused(Exception):
    """The accepted limits could not be applied to the running release; ``why`` is the audit's word."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


def revise_limits(ctx: Context, uow: SqlUnitOfWork, dep: Deployment, endpoint: EndpointSettings, *, actor: str,
                  now: dt.datetime, apply: bool) -> tuple[RenderedManifest, int]:
    """Re-render ``dep``'s release with ``endpoint``'s (newly accepted) limits and store it as its next revision.

    With ``apply`` the cluster takes it now (users are closed out, or it is a pair's idle side); without, the
    revision waits for the ramp to apply it behind a closed route (audit ``manifest.revised`` says which).
    Runs inside the caller's transaction, which holds the endpoint's row lock, so two acceptances cannot
    interleave. Raises :class:`ApplyRefused` before anything is stored when the manifest cannot be made or applied.
    """
    name = endpoint.name
    cluster = ctx.ports.cluster
    if cluster is None:
        raise ApplyRefused(f"no cluster access is configured for this process, and accepting applies the limits to the "
                           f"running release of {name}; accept from the bot or a CLI with cluster access", "no_cluster")
    holder = uow.deployments.in_flight(dep.endpoint_id)
    if holder is not None and holder.id != dep.id:
        raise ApplyRefused(f"deployment #{holder.id} is in flight on {name} and owns what the cluster runs; accept once it "
                           "has ended", "busy")
    try:
        manifest = cluster.render(manifest_from_row(dep.release), endpoint, dep.release.tuple_hash)
    except Exception as exc:
        raise ApplyRefused(f"the manifest of {dep.release.name} with these limits could not be rendered ({exc}); "
                           "nothing changed", "render_failed") from exc
    changed: bool | None = None
    if apply:
        try:
            result = cluster.apply(endpoint, manifest)
        except Exception as exc:
            log.warning("applying accepted limits to deployment #%s failed", dep.id, exc_info=True)
            raise ApplyRefused(f"the cluster did not take {dep.release.name} with these limits ({exc}); nothing changed",
                               "apply_failed") from exc
        if result.conflicts:
            raise ApplyRefused(f"the cluster refused the new limits: fields are owned by another manager "
                               f"({'; '.join(result.conflicts[:3])}); nothing changed", "apply_conflict")
        changed = result.changed
    revisions = list(uow.manifests.for_deployment(dep.id))
    if not revisions and dep.applied_manifest is not None and dep.manifest_hash is not None:
        # The deployment's first manifest predates revisions: keep it as revision 1 so no applied bytes are lost.
        uow.manifests.add(ManifestRevision(deployment_id=dep.id, revision=1, sha256=dep.manifest_hash, previous_sha256=None,
                                           manifest=dep.applied_manifest, limits=None, reason="rendered for the deployment",
                                           actor="kimi-ops", at=dep.updated_at))
        revisions = list(uow.manifests.for_deployment(dep.id))
    number = (revisions[-1].revision if revisions else 0) + 1
    limits = endpoint.effective_request_limits.model_dump(mode="json")
    reason = f"request limits accepted: {limits_words(limits)}"
    uow.manifests.add(ManifestRevision(deployment_id=dep.id, revision=number, sha256=manifest.sha256,
                                       previous_sha256=dep.manifest_hash, manifest=manifest.text, limits=limits,
                                       reason=reason, actor=actor, at=now))
    uow.audit.record(at=now, actor=actor, action=REVISED, subject=f"deployment:{dep.id}",
                     details={"revision": number, "old_sha256": dep.manifest_hash, "new_sha256": manifest.sha256,
                              "limits": limits, "changed": changed, "reason": reason, "applied": apply})
    # Stored before the ramp applies it, as every manifest is: a resumed apply re-applies exactly these bytes.
    dep.applied_manifest, dep.manifest_hash = manifest.text, manifest.sha256
    return manifest, number


def limits_step(uow: SqlUnitOfWork, deployment_id: int) -> tuple[str, int] | None:
    """What is left of the limits procedure of a deployment's newest revision, and that revision's number.

    ``close``, ``drain``, ``apply`` (a revision accepted while ramping, part by part) or ``ready`` (its rollout
    and readiness, also for a revision applied at the traffic gate); ``None`` when nothing is left. Read from
    the audit, newest first: a part recorded for an older revision never counts for a newer one.
    """
    wanted = {REVISED, LIMITS_CLOSED, LIMITS_DRAINED, LIMITS_APPLIED, LIMITS_READY, f"deployment.{State.MODEL_GATE.value}"}
    done: set[str] = set()
    for entry in uow.audit.newest(f"deployment:{deployment_id}", wanted):
        details = entry.details or {}
        if entry.action == f"deployment.{State.MODEL_GATE.value}":
            return None  # readiness passed after the last revision
        if entry.action != REVISED:
            done.add(f"{entry.action}:{details.get('revision')}")
            continue
        number = int(details.get("revision") or 0)
        if f"{LIMITS_READY}:{number}" in done:
            return None
        left = next((_LEFT_AFTER[a] for a in (LIMITS_APPLIED, LIMITS_DRAINED, LIMITS_CLOSED) if f"{a}:{number}" in done),
                    None)
        if left is not None:
            return left, number
        return ("ready" if details.get("applied", True) else "close"), number
    return None


def start_limits_restore(ctx: Context, uow: SqlUnitOfWork, dep: Deployment, row: Endpoint,
                         endpoint: EndpointSettings, actor: str) -> Deployment:
    """A restore of ``dep``'s release carrying the new limits (in the caller's transaction, which locks the row)."""
    cluster = ctx.ports.cluster
    if cluster is None:
        raise RuntimeError("no cluster access to render the manifest with the new limits")
    manifest = cluster.render(manifest_from_row(dep.release), endpoint, dep.release.tuple_hash)
    restore = create_deployment(ctx, uow, row, dep.release_id, "rollback", KIMI_OPS, dep.release_id,
                                rollback_of=dep.id, cause_id=dep.id)
    restore.applied_manifest, restore.manifest_hash = manifest.text, manifest.sha256
    uow.audit.record(at=ctx.clock.now(), actor=actor, action="limits.restore_started", subject=f"deployment:{restore.id}",
                     details={"of": dep.id, "sha256": manifest.sha256})
    return restore
