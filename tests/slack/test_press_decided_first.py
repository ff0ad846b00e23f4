"""A press that may be refused is decided before anything is shown; a slow decision tells its presser alone."""

from __future__ import annotations

import threading

from bot.slack.listeners.gate_actions import decided_first
from bot.views.parts import Reply, reply


def test_a_slow_decision_tells_the_presser_it_is_being_checked_before_the_answer() -> None:
    told: list[str] = []
    checking = threading.Event()

    def tell(answer: Reply) -> None:  # what only the presser sees
        told.append(answer.text)
        if answer.text == "Checking your approval…":
            checking.set()

    def slow_decision() -> Reply:  # the decision waits until the presser was told it is being checked
        assert checking.wait(30), "nobody was told the press is being checked"
        return reply("You approved the model gate of deployment #3.")

    answer = decided_first(slow_decision, tell, "Checking your approval…")
    assert answer is not None and answer.text.startswith("You approved")
    assert told == ["Checking your approval…"]  # the answer itself goes through the caller, after


def test_a_refusal_reaches_the_presser_alone_and_nothing_is_said_after_it() -> None:
    from bot.services.errors import Refused

    told: list[str] = []

    def refused() -> Reply:
        raise Refused("you requested deployment #3; someone else must approve its gates on kimi-prod")

    assert decided_first(refused, lambda r: told.append(r.text), "Checking…") is None
    # Only the presser's own answers ("Checking…" first, had the decision been slow), the refusal last.
    assert told[-1] == "you requested deployment #3; someone else must approve its gates on kimi-prod"
    assert set(told[:-1]) <= {"Checking…"}
