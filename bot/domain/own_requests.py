"""kimi-ops's own requests to a candidate, counted the way the model server's finished-request counter counts them.

While users are closed out, the candidate's finished-request counter (vLLM's
``request_success_total``) must not grow beyond what kimi-ops itself sent it:
readiness, the model gate's evaluation cases, the traffic gate's sweep. Counting
every request *sent* as kimi-ops's own would let users hide in kimi-ops's own
failures: a sweep past the knee has many requests rejected before the engine
took them, which the counter never sees. So each request is classed by what the
counter does with it: answered in full (always counted), refused before the
engine took it (a 4xx, a 429 or 503 overflow: never counted), or broken after the
server took it (a 5xx, a cut stream, a timeout: vLLM counts an abort as finished,
so it may or may not be counted). Only growth beyond the answered ones *and* the
uncertain ones is surely users; growth inside the uncertain band is unproven.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.domain.evaluation import Answer
from bot.domain.ramp import counter_delta
from bot.domain.readiness import MetricsSnapshot

Counted = Literal["answered", "never", "uncertain"]
_REFUSED_BEFORE_ENGINE = frozenset({429, 503})


def counted(http_status: int | None, complete: bool) -> Counted:
    """How the model's finished counter treats one request: ``complete`` is an answer that reached its end."""
    if complete and http_status == 200:
        return "answered"
    if http_status is not None and (http_status in _REFUSED_BEFORE_ENGINE or 400 <= http_status < 500):
        return "never"
    return "uncertain"


@dataclass(frozen=True)
class OwnRequests:
    """kimi-ops's own requests to one candidate: those the counter surely counts, and those it may."""

    answered: int = 0
    uncertain: int = 0

    def __add__(self, other: OwnRequests) -> OwnRequests:
        return OwnRequests(self.answered + other.answered, self.uncertain + other.uncertain)

    def plus(self, kind: Counted) -> OwnRequests:
        if kind == "answered":
            return OwnRequests(self.answered + 1, self.uncertain)
        if kind == "uncertain":
            return OwnRequests(self.answered, self.uncertain + 1)
        return self

    def as_dict(self) -> dict[str, int]:
        return {"answered": self.answered, "uncertain": self.uncertain}


def own_requests_of(answers: Iterable[Answer]) -> OwnRequests:
    """The evaluation's answers as the finished counter sees them (an answer with an error did not reach its end)."""
    own = OwnRequests()
    for answer in answers:
        own = own.plus(counted(answer.http_status, complete=answer.error is None))
    return own


class OwnLedger(Protocol):
    """Where a gate's run keeps its own requests as they happen: each one before it is sent, then once it settled.

    A request sent and not yet settled counts as ``uncertain``: if the process running it dies, whoever resumes
    the deployment still counts it (the server finishes an abandoned request as an abort).
    """

    def sent(self) -> None: ...

    def settled(self, kind: Counted) -> None: ...


@dataclass(frozen=True)
class Reach:
    """The candidate's finished requests since users were closed out, set against kimi-ops's own."""

    finished: float
    own: OwnRequests

    @property
    def beyond_answered(self) -> float:
        """Finished requests that no answered request of kimi-ops's accounts for."""
        return max(0.0, self.finished - self.own.answered)

    @property
    def users(self) -> float:
        """Finished requests that not even kimi-ops's broken requests could account for: surely users."""
        return max(0.0, self.beyond_answered - self.own.uncertain)

    @property
    def proven_closed(self) -> bool:
        return self.beyond_answered == 0


def reach_since(before: MetricsSnapshot | None, after: MetricsSnapshot | None, own: OwnRequests) -> Reach | None:
    """What the candidate finished between two scrapes; ``None`` when its counter is not exposed."""
    if before is None or after is None or after.requests_finished is None:
        return None
    return Reach(finished=counter_delta(before.requests_finished, after.requests_finished), own=own)
