"""Errors a service raises for a user to read: one short sentence saying what is wrong and what to do.

Entrypoints show ``str(error)`` as is (ephemeral in Slack, stderr on the CLI) and
never a traceback. Anything else that escapes a service is a bug: entrypoints log
it with a correlation id and show only that id.
"""

from __future__ import annotations


class UserError(Exception):
    """Base class: the message is safe and useful to show to the user."""

    exit_code = 1


class NotFound(UserError):
    """The thing named does not exist."""


class NoEndpoints(NotFound):
    """No endpoint is declared at all (a listing shows nothing; an action needs one)."""


class Invalid(UserError):
    """The input is malformed in a way the command line could not see (a blank reason, say): a usage error."""

    exit_code = 2


class Refused(UserError):
    """The request is understood but not allowed in the current state."""


class Forbidden(UserError):
    """The actor lacks the role the action needs."""


class Unavailable(UserError):
    """Something kimi-ops needs (its database) cannot be reached right now; nothing changed, try again later."""


class NotConfigured(UserError):
    """This process has no adapter for what was asked (no AWS, cluster or endpoint access)."""


class ValidationFailed(UserError):
    """Input is malformed; ``problems`` lists each one with its field path."""

    exit_code = 2

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s): " + "; ".join(problems))
