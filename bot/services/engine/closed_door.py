"""The closed door: proof that no user reached a candidate while users were closed out.

From the candidate's readiness on, the model server's finished-request counter must not exceed the requests
kimi-ops itself sent (readiness, evaluation cases, the sweep); an excess is users getting through. The
deployment row keeps kimi-ops's own requests (``own_requests``, ``own_uncertain``) so that any replica that
resumes the deployment counts them.
"""

from __future__ import annotations

from bot.adapters.store.models import Deployment
from bot.domain.checks import Check, GateReport
from bot.domain.own_requests import OwnRequests, Reach, reach_since
from bot.domain.readiness import MetricsSnapshot
from bot.services.engine.run import Runner, Snapshot


def closed_door(runner: Runner, snap: Snapshot, report: GateReport) -> tuple[GateReport, OwnRequests]:
    """Add to a model or traffic report the proof that no user reached the candidate; return it and the requests sent."""
    sent = requests_sent(report)
    if snap.kind != "deploy" or report.gate not in ("model", "traffic") or snap.closed_baseline is None:
        return report, sent
    reach = reach_now(runner, snap, snap.own + sent)
    if reach is None:
        check = Check.warned("admission.closed", "the model's request counter could not be read; "
                             "whether users reached the candidate is unproven")
    elif reach.users > 0:
        check = Check.failed("admission.closed", f"{reach.users:.0f} requests besides kimi-ops's own "
                             f"{own_words(reach.own)} reached the candidate while users were closed out; "
                             "check the route before approving")
    elif not reach.proven_closed:
        check = Check.warned("admission.closed", f"the model finished {reach.beyond_answered:.0f} requests more than "
                             f"kimi-ops's own {reach.own.answered} answered ones since its readiness; "
                             f"{reach.own.uncertain} of kimi-ops's requests broke mid-way and may account for them, "
                             "so whether users reached the candidate is unproven")
    else:
        check = Check.passed("admission.closed", f"users closed out: the model finished {reach.finished:.0f} requests "
                             f"since its readiness, none beyond kimi-ops's own {reach.own.answered} answered ones")
    return report.model_copy(update={"checks": [*report.checks, check]}), sent


def reach_now(runner: Runner, snap: Snapshot, own: OwnRequests) -> Reach | None:
    """The candidate's finished requests since its readiness passed (users closed out from there on)."""
    if snap.closed_baseline is None:
        return None
    since = MetricsSnapshot(None, None, None, None, None, None, requests_finished=snap.closed_baseline)
    return reach_since(since, runner.metrics(snap), own)


def requests_sent(report: GateReport) -> OwnRequests:
    """Requests a gate's run sent to the endpoint (evaluation cases, the sweep's), as the finished counter sees them."""
    sent = OwnRequests()
    for part, key in (("evaluation", "cases"), ("sweep", "requests")):
        attachment = report.attachments.get(part) or {}
        own = attachment.get("own_requests")
        if isinstance(own, dict):
            sent += OwnRequests(int(own.get("answered") or 0), int(own.get("uncertain") or 0))
        elif attachment:
            # A report from before requests were classed: none of them is known to have been answered.
            raw = attachment.get(key)
            sent += OwnRequests(0, len(raw) if isinstance(raw, list) else int(raw or 0))
    return sent


def add_own(dep: Deployment, sent: OwnRequests) -> None:
    """Count ``sent`` among kimi-ops's own requests to the candidate (inside the caller's transaction)."""
    dep.own_requests = (dep.own_requests or 0) + sent.answered
    dep.own_uncertain = (dep.own_uncertain or 0) + sent.uncertain


def own_words(own: OwnRequests) -> str:
    """``12 answered`` or ``12 answered and 3 broken`` for a closed-door reason."""
    return f"{own.answered} answered" + (f" and {own.uncertain} broken" if own.uncertain else "")
