"""Admission: what the route in front of an endpoint lets through to Kimi K3 (pure values).

Four states, in increasing order of exposure:

* ``closed`` — no user request reaches Kimi K3. Every request goes to the
  fallback model when one is configured; without one the gateway answers
  itself. The route keeps the model Service as its only backend with weight 0:
  the Gateway API says a zero weight forwards no traffic, and its conformance
  test ``HTTPRouteAllBackendsWeightZero`` requires a 500 for a rule whose
  backends all weigh 0 while ``ResolvedRefs`` stays true. (A rule without
  ``backendRefs`` is the other way to say it, but the specification's pages
  disagree on 404 versus 500 for it, and the route would lose the reference
  to the Service it fronts.)
* ``internal`` — only requests carrying the cohort header reach Kimi K3;
  the others are treated as ``closed``.
* a share, ``1%`` … ``99%`` — that share of ordinary requests reaches Kimi K3,
  the rest the fallback (a share needs a fallback to send the rest to); the
  cohort always reaches Kimi K3.
* ``open`` — every request reaches Kimi K3.

:func:`parse_admission` reads ``closed``, ``internal``, ``25%`` (or ``25``) and
``open``; ``str()`` writes the same words back. Admissions order by exposure:
``closed < internal < 1% < … < 99% < open``.

:class:`RouteStatus` is what a cluster's route says now: the state written in
its annotation, the state its rules and weights actually give, and each
parent Gateway's ``Accepted`` / ``ResolvedRefs`` conditions.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field


class AdmissionState(enum.StrEnum):
    CLOSED = "closed"
    INTERNAL = "internal"
    SHARE = "share"
    OPEN = "open"


class AdmissionError(ValueError):
    """Text that is no admission; the message says what is accepted."""


@functools.total_ordering
@dataclass(frozen=True)
class Admission:
    """One admission state; ``percent`` is the share of ordinary requests sent to Kimi K3."""

    state: AdmissionState
    percent: int = 0

    def __post_init__(self) -> None:
        expected = {AdmissionState.CLOSED: 0, AdmissionState.INTERNAL: 0, AdmissionState.OPEN: 100}
        if self.state in expected and self.percent != expected[self.state]:
            raise AdmissionError(f"{self.state} admits {expected[self.state]}% of ordinary traffic, not {self.percent}%")
        if self.state is AdmissionState.SHARE and not 1 <= self.percent <= 99:
            raise AdmissionError(f"a share is 1% to 99% of ordinary traffic, not {self.percent}%; "
                                 "use closed, internal or open for the ends")

    @classmethod
    def closed(cls) -> Admission:
        return cls(AdmissionState.CLOSED)

    @classmethod
    def internal(cls) -> Admission:
        return cls(AdmissionState.INTERNAL)

    @classmethod
    def share(cls, percent: int) -> Admission:
        return cls(AdmissionState.SHARE, percent)

    @classmethod
    def open(cls) -> Admission:
        return cls(AdmissionState.OPEN, 100)

    @property
    def cohort_admitted(self) -> bool:
        """Whether requests with the cohort header reach Kimi K3."""
        return self.state is not AdmissionState.CLOSED

    def percent_for(self, *, cohort: bool) -> int:
        """The share (0-100) of one class of requests that reaches Kimi K3."""
        if cohort:
            return 100 if self.cohort_admitted else 0
        return self.percent

    @property
    def needs_fallback(self) -> bool:
        """A share splits ordinary traffic: the part not sent to Kimi K3 must go somewhere that answers."""
        return self.state is AdmissionState.SHARE

    @property
    def _rank(self) -> int:
        return -1 if self.state is AdmissionState.CLOSED else self.percent

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Admission):
            return NotImplemented
        return self._rank < other._rank

    def __str__(self) -> str:
        return f"{self.percent}%" if self.state is AdmissionState.SHARE else str(self.state)


def parse_admission(text: str) -> Admission:
    """``closed``, ``internal``, ``25%`` (or ``25``), ``open``; anything else raises :class:`AdmissionError`."""
    word = text.strip().lower()
    for state in (AdmissionState.CLOSED, AdmissionState.INTERNAL, AdmissionState.OPEN):
        if word == state.value:
            return {AdmissionState.CLOSED: Admission.closed, AdmissionState.INTERNAL: Admission.internal,
                    AdmissionState.OPEN: Admission.open}[state]()
    number = word.removesuffix("%").strip()
    if number.isdigit():
        percent = int(number)
        if percent == 100:
            return Admission.open()
        if 1 <= percent <= 99:
            return Admission.share(percent)
    raise AdmissionError(f"admission {text!r} is not one of closed, internal, a share from 1% to 99%, or open")


@dataclass(frozen=True)
class ParentCondition:
    """One condition a Gateway controller wrote for the route (``Accepted``, ``ResolvedRefs``…)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None


@dataclass(frozen=True)
class ParentStatus:
    """What one parent Gateway's controller says about the route."""

    gateway: str  # namespace/name[/section]
    controller: str
    conditions: tuple[ParentCondition, ...] = ()

    def condition(self, type_: str) -> ParentCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def holds(self, type_: str, generation: int | None) -> bool | None:
        """True/False when the condition is written for ``generation`` (or later); None when absent or stale."""
        found = self.condition(type_)
        if found is None:
            return None
        if generation is not None and found.observed_generation is not None and found.observed_generation < generation:
            return None
        return found.status == "True"


@dataclass(frozen=True)
class RouteStatus:
    """The route as the cluster has it now."""

    name: str
    namespace: str
    annotated: Admission | None  # the state kimi-ops wrote in the annotation; None when absent or unreadable
    effective: Admission | None  # the state the rules and weights give; None when they fit no state
    reason: str | None = None
    changed_at: str | None = None
    generation: int | None = None
    parents: tuple[ParentStatus, ...] = ()
    problems: tuple[str, ...] = field(default=())

    @property
    def consistent(self) -> bool:
        """The annotation and the rules say the same state."""
        return self.annotated is not None and self.annotated == self.effective

    @property
    def accepted(self) -> bool:
        """Every parent accepted this generation of the route and resolved its backends (and there is a parent)."""
        return bool(self.parents) and all(
            p.holds("Accepted", self.generation) is True and p.holds("ResolvedRefs", self.generation) is True
            for p in self.parents)

    @property
    def summary(self) -> str:
        state = str(self.effective) if self.effective is not None else "unknown"
        parts = [f"route {self.namespace}/{self.name}: {state}"]
        if self.annotated is not None and self.annotated != self.effective:
            parts.append(f"annotation says {self.annotated}")
        for parent in self.parents:
            accepted = parent.holds("Accepted", self.generation)
            refs = parent.holds("ResolvedRefs", self.generation)
            word = {True: "accepted", False: "refused", None: "not yet seen"}[accepted]
            if accepted and refs is False:
                word = "accepted, backends unresolved"
            parts.append(f"{parent.gateway} {word}")
        if not self.parents:
            parts.append("no gateway has reported on it yet")
        return "; ".join(parts + list(self.problems))
