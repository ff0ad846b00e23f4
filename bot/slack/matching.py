"""Bolt's built-in listener matchers, called with the request's body directly.

Bolt calls a built-in matcher (the one ``app.action(...)``, ``app.command(...)``… make) through its keyword
injection, which builds every argument a listener could ask for (forty-odd) to hand over the one argument these
matchers take, ``body``. A click is matched against each listener registered before its own, so that injection
was a third of an acknowledgement's CPU. :func:`direct` keeps Bolt's matching function and only calls it
without the injection; any other matcher is left as it is.
"""

from __future__ import annotations

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.listener_matcher import ListenerMatcher
from slack_bolt.listener_matcher.builtins import BuiltinListenerMatcher


class BodyMatcher(BuiltinListenerMatcher):
    """A built-in matcher whose function takes ``body`` alone, called with it."""

    def matches(self, req: BoltRequest, resp: BoltResponse) -> bool:
        return bool(self.func(body=req.body))


def direct(matcher: ListenerMatcher) -> ListenerMatcher:
    """``matcher`` as a :class:`BodyMatcher` when it is a built-in one taking only ``body``; else ``matcher``."""
    if type(matcher) is not BuiltinListenerMatcher or matcher.arg_names != ["body"]:
        return matcher
    body_only = BodyMatcher(func=matcher.func)
    body_only.logger = matcher.logger
    return body_only
