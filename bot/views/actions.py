"""What a button asks for, and the ticket it carries.

The action ids are part of the neutral model, not of Slack: a :class:`Button`
names the action it triggers, the commands build those buttons, and every
front end that shows them dispatches on the same names (the Slack listeners in
``bot/app.py``, the local shell). Slack-only ids (a modal's callback id) stay in
:mod:`bot.adapters.slack.blocks`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

APPROVE = "gate_approve"
REJECT = "gate_reject"
RECHECK = "gate_recheck"
ACCEPT_LIMITS = "traffic_accept_limits"
# "Next" under a paged answer; its value is the command text of the next page (e.g. ``history kimi-prod 50 --page 2``),
# run as the person who clicks, so it shows nothing they could not ask for by typing it.
NEXT_PAGE = "page_next"
# A button that runs one command for the clicker (parsed and authorised like typed text), e.g. ``rollback kimi``
# under a pair's ramp message: the one-click fast path back.
RUN_COMMAND = "command_run"
APPROVE_ABOVE_LIMITS = "traffic_approve_above_limits"  # opens a reason form; the approval records the override
# A traffic gate whose proposal is below what the endpoint admits: accept the proposal, then approve, in one press.
ACCEPT_AND_APPROVE = "traffic_accept_and_approve"
# "Show all N checks" under a gate report whose passing checks are counted, not listed: the full list, to the clicker.
SHOW_CHECKS = "gate_show_checks"


@dataclass(frozen=True)
class GateTicket:
    """What a gate button carries: the decision is bound to the report and release the clicker saw."""

    deployment_id: int
    gate: str
    report_hash: str
    release_hash: str

    def encode(self) -> str:
        return json.dumps({"d": self.deployment_id, "g": self.gate, "r": self.report_hash, "h": self.release_hash},
                          separators=(",", ":"))

    @classmethod
    def decode(cls, value: str) -> GateTicket:
        data = json.loads(value)
        return cls(int(data["d"]), str(data["g"]), str(data["r"]), str(data["h"]))

# A metrics-watch incident's buttons; the value is the incident's id.
INCIDENT_ACK = "incident_acknowledge"
INCIDENT_SILENCE = "incident_silence"  # opens a form: how long, and why
INCIDENT_ROLLBACK = "incident_rollback"  # to the release the live one replaced; the rollback rules apply

# The form a command typed without its reason and expiry opens (``/kimi exception add …``); its submission's callback.
COMMAND_FORM = "command_form"
