"""Automated checks and gate reports.

Every gate runs named checks; each ends ``pass``, ``warn``, ``fail`` or ``error``
(an ``error`` means the check could not be made, e.g. AWS unreachable: never a
pass). A report with any ``fail`` or ``error`` blocks approval.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["pass", "warn", "fail", "error"]
GateName = Literal["artifact", "infrastructure", "model", "traffic"]
GATES: tuple[GateName, ...] = ("artifact", "infrastructure", "model", "traffic")
STATUS_ORDER: dict[str, int] = {"pass": 0, "warn": 1, "fail": 2, "error": 3}


class Check(BaseModel):
    """One named automated check and its one-line reason."""

    model_config = ConfigDict(frozen=True)

    name: str
    status: Status
    reason: str
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def passed(cls, name: str, reason: str, **details: Any) -> Check:
        return cls(name=name, status="pass", reason=reason, details=details)

    @classmethod
    def warned(cls, name: str, reason: str, **details: Any) -> Check:
        return cls(name=name, status="warn", reason=reason, details=details)

    @classmethod
    def failed(cls, name: str, reason: str, **details: Any) -> Check:
        return cls(name=name, status="fail", reason=reason, details=details)

    @classmethod
    def errored(cls, name: str, reason: str, **details: Any) -> Check:
        return cls(name=name, status="error", reason=reason, details=details)


class GateReport(BaseModel):
    """The stored outcome of a gate's automated checks."""

    model_config = ConfigDict(frozen=True)

    gate: GateName
    checks: list[Check]
    summary: str = ""
    attachments: dict[str, Any] = Field(default_factory=dict)

    @property
    def status(self) -> Status:
        if not self.checks:
            return "pass"
        return max((c.status for c in self.checks), key=STATUS_ORDER.__getitem__)

    @property
    def blocking(self) -> list[Check]:
        """Checks that forbid approval (fail or error)."""
        return [c for c in self.checks if c.status in ("fail", "error")]

    @property
    def approvable(self) -> bool:
        return not self.blocking

    def digest(self) -> str:
        """Stable hash of the report; an approval is bound to it."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def stopped_report(gate: GateName, check: str) -> GateReport:
    """The report of a gate run stopped before its end (its deployment moved on elsewhere): an error, so even a
    caller that stored it by mistake could never approve it."""
    return GateReport(gate=gate, checks=[Check.errored(check, "the run was stopped before its end; run the checks again")])
