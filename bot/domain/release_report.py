"""The evaluation report a release names, read and set beside the model gate's fresh run.

A release tuple carries ``evaluation_report``: where the evaluation made when
the release was built lives (an ``s3://`` JSON document). The model gate reads
it and shows its pass rate next to the run it just made on the endpoint, so an
approver sees both; it does not block (the fresh run is what the gate judges),
but a named report that cannot be read or understood is a warning.

Understood shapes: kimi-ops's own model-gate report (``attachments.evaluation``),
``{"summary": {"cases": N, "passed": P}}``, ``{"cases": N, "passed": P}``,
``{"pass_rate": R}`` and ``{"cases": [{"passed": bool}, …]}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.domain.checks import Check

MAX_REPORT_BYTES = 4 * 1024 * 1024
NAME = "model.release_report"


@dataclass(frozen=True)
class PassRate:
    passed: int | None
    cases: int | None
    rate: float

    def text(self) -> str:
        counts = f"{self.passed}/{self.cases} cases passed, " if self.passed is not None and self.cases else ""
        return f"{counts}{self.rate:.0%}"


def _counts(data: Any) -> PassRate | None:
    if not isinstance(data, dict):
        return None
    cases, passed = data.get("cases"), data.get("passed")
    if isinstance(cases, list):
        flags = [bool(c["passed"]) for c in cases if isinstance(c, dict) and isinstance(c.get("passed"), bool)]
        if flags:
            return PassRate(sum(flags), len(flags), sum(flags) / len(flags))
    if isinstance(cases, int) and isinstance(passed, int) and not isinstance(passed, bool) and cases > 0:
        return PassRate(passed, cases, passed / cases)
    rate = data.get("pass_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 <= rate <= 1:
        return PassRate(None, None, float(rate))
    return None


def pass_rate_of(document: bytes) -> PassRate | None:
    """The pass rate a report states, or ``None`` when it is not JSON of an understood shape."""
    try:
        data = json.loads(document)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    evaluation = (data.get("attachments") or {}).get("evaluation") if isinstance(data.get("attachments"), dict) else None
    for candidate in (evaluation, (evaluation or {}).get("summary") if isinstance(evaluation, dict) else None,
                      data.get("summary"), data):
        found = _counts(candidate)
        if found is not None:
            return found
    return None


def release_report_check(uri: str | None, document: bytes | None, problem: str | None, fresh: PassRate | None) -> Check:
    """The release's own evaluation beside this run: shown, never blocking; unreadable or absent warns."""
    now = f"; this run: {fresh.text()}" if fresh is not None else ""
    if not uri:
        return Check.warned(NAME, f"the release names no evaluation report to compare with{now}")
    if problem is not None or document is None:
        return Check.warned(NAME, f"the release's evaluation report {uri} could not be read ({problem or 'not found'}){now}")
    stated = pass_rate_of(document)
    if stated is None:
        return Check.warned(NAME, f"the release's evaluation report {uri} states no pass rate kimi-ops understands{now}")
    return Check.passed(NAME, f"release's evaluation report ({uri}): {stated.text()}{now}",
                        report=uri, report_pass_rate=stated.rate)
