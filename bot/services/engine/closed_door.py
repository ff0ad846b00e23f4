"""The closed door: proof that no user reached a candidate while users were closed out.

From the candidate's readiness on, the model server's finished-request counter must not exceed the requests
kimi-ops itself sent (readiness, evaluation cases, the sweep); an excess is users getting through. The
deployment row keeps kimi-ops's own requests (``own_requests``, ``own_uncertain``) so that any replica that
resumes the deployment counts them.
"""

from __future__ import annotations

import threading

from bot.adapters.store.models import Deployment
from bot.domain.checks import Check, GateReport
from bot.domain.own_requests import Counted, OwnRequests, Reach, reach_since
from bot.domain.readiness import MetricsSnapshot
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.engine.run import Runner, Snapshot

log = logger_for(__name__)

SENDING_GATES = ("model", "traffic")
FINISHED_COUNTER = "vllm:request_success_total"  # the gates whose runs send requests to the candidate


class StoredLedger:
    """A gate run's own requests kept on the deployment's row as they happen: each one counted as uncertain in a
    committed transaction before it is sent, then moved to answered (or dropped, when the server never took it).

    So a run killed half-way leaves every request it sent counted, and whichever replica resumes the gate sets the
    candidate's counter against all of them. ``recorded`` is what reached the row (a write the database refused is
    added when the run's report is stored instead).

    A sweep counts from many threads at once: counts that arrive while a write is under way go together in the
    next one (a group commit), and each caller returns once a committed write holds its count. The row says the
    same at every moment a request leaves, in fewer transactions.
    """

    def __init__(self, ctx: Context, deployment_id: int) -> None:
        self.ctx = ctx
        self.deployment_id = deployment_id
        self.recorded = OwnRequests()
        self._turn = threading.Condition()
        self._queued = OwnRequests(0, 0)  # counts waiting for the next write
        self._next = 1  # the number of the group the counts arriving now go into
        self._written = 0  # the last group whose write ended
        self._writing = False
        self._failed: set[int] = set()

    def sent(self) -> None:
        self._add(0, 1)

    def settled(self, kind: Counted) -> None:
        if kind == "answered":
            self._add(1, -1)
        elif kind == "never":
            self._add(0, -1)

    def _add(self, answered: int, uncertain: int) -> None:
        with self._turn:
            self._queued = OwnRequests(self._queued.answered + answered, self._queued.uncertain + uncertain)
            mine = self._next
            while self._written < mine:
                if self._writing:
                    self._turn.wait()
                    continue
                # Nobody writes: this caller writes the group (its own count and every one queued since the last).
                group, counts, self._queued = self._next, self._queued, OwnRequests(0, 0)
                self._next, self._writing = group + 1, True
                self._turn.release()
                written = False
                try:
                    written = counts == OwnRequests(0, 0) or self._write(counts)
                finally:
                    self._turn.acquire()
                    self._writing, self._written = False, group
                    if written:
                        self.recorded = self.recorded + counts
                    else:
                        self._failed.add(group)
                    self._turn.notify_all()
            if mine in self._failed:
                log.warning("deployment #%s: an own request could not be counted before it was sent",
                            self.deployment_id)

    def _write(self, counts: OwnRequests) -> bool:
        try:
            with self.ctx.uow() as uow:
                uow.deployments.count_own(self.deployment_id, counts.answered, counts.uncertain)
                uow.commit()
        except Exception:  # the requests still go; the report's count covers them when the run ends
            log.warning("deployment #%s: a write of its own requests' count failed", self.deployment_id, exc_info=True)
            return False
        return True


def ledger_for(runner: Runner, snap: Snapshot, gate: str) -> StoredLedger | None:
    """The ledger of a gate run that sends requests to the candidate, or ``None`` for a gate that sends none."""
    return StoredLedger(runner.ctx, snap.id) if gate in SENDING_GATES else None


def closed_door(runner: Runner, snap: Snapshot, report: GateReport,
                ledger: StoredLedger | None = None) -> tuple[GateReport, OwnRequests]:
    """Add to a model or traffic report the proof that no user reached the candidate.

    Returns the report and the run's requests that ``ledger`` could not keep on the row as they were sent (all of
    them without a ledger): the caller adds those when it stores the report.
    """
    sent = requests_sent(report)
    recorded = ledger.recorded if ledger is not None else OwnRequests()
    unrecorded = OwnRequests(max(0, sent.answered - recorded.answered), max(0, sent.uncertain - recorded.uncertain))
    if snap.kind != "deploy" or report.gate not in SENDING_GATES:
        return report, unrecorded
    if snap.closed_baseline is None:
        # Never left out: a proof that cannot be made is shown as unproven, with why.
        check = Check.warned("admission.closed", f"{no_baseline_why(runner, snap)}; whether users reached the candidate "
                             "is unproven")
        return report.model_copy(update={"checks": [*report.checks, check]}), unrecorded
    # Every own request any run kept on the row (a run killed half-way included), and this run's unkept ones.
    now, why = runner.metrics_or_why(snap)
    reach = None if now is None else reach_since(
        MetricsSnapshot(None, None, None, None, None, None, requests_finished=snap.closed_baseline), now,
        stored_own(runner, snap.id) + unrecorded)
    if reach is None:
        cause = (f"the model's /metrics cannot be read ({why})" if now is None
                 else f"the model's /metrics has no finished-request counter ({FINISHED_COUNTER})")
        check = Check.warned("admission.closed", f"{cause}; whether users reached the candidate is unproven")
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
    return report.model_copy(update={"checks": [*report.checks, check]}), unrecorded


def no_baseline_why(runner: Runner, snap: Snapshot) -> str:
    """Why the candidate has no finished-request count from its readiness to compare with."""
    now, why = runner.metrics_or_why(snap)
    if now is None:
        return f"the model's /metrics cannot be read ({why}), and was not when its readiness passed"
    if now.requests_finished is None:
        return f"the model's /metrics has no finished-request counter ({FINISHED_COUNTER})"
    return "the model's /metrics could not be read when its readiness passed, so there is no count to compare with"


def stored_own(runner: Runner, deployment_id: int) -> OwnRequests:
    """kimi-ops's own requests to the candidate kept on the deployment's row now."""
    with runner.ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        return OwnRequests(dep.own_requests or 0, dep.own_uncertain or 0) if dep is not None else OwnRequests()


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
