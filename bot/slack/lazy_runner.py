"""Bolt's listener runner without its deep copy of every request handed to a lazy listener.

Before it starts a lazy listener, Bolt deep-copies the whole request, the context's Web API client, logger
and retry handlers included: a third of what an acknowledgement costs here, on the thread that should be
answering the next request. Our lazy functions only read their request, so they get a new request over the
same body (parsed again, as Bolt's copy is) with a shallow copy of the context: the same client (the SDK's
``WebClient`` is safe across threads) and the same values, which nothing mutates.

In the answering process of ``kimi-ops serve`` the runner carries a :class:`bot.slack.work.FollowupQueue`:
a lazy listener is then spooled for the worker process instead of started here, except those that need the
request's trigger at once (:data:`bot.slack.work.IMMEDIATE`, or an acknowledgement that set ``RUN_HERE``),
which claim the request across replicas first (the spooled ones are claimed by the worker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from slack_bolt import App, BoltContext, BoltRequest
from slack_bolt.listener.thread_runner import ThreadListenerRunner
from slack_bolt.util.utils import get_name_for_callable

from bot.logs import logger_for
from bot.slack.middleware.unreadable import read_as_form

if TYPE_CHECKING:
    from bot.slack.work import FollowupQueue

log = logger_for(__name__)

# Bolt's own per-thread plumbing, which it never copies either; the runner sets what the lazy thread needs.
_NOT_SHARED = frozenset(BoltContext.non_copyable_standard_property_names)


class SharedRequestRunner(ThreadListenerRunner):
    queue: FollowupQueue | None = None  # set in the answering process of ``kimi-ops serve``: lazy work goes to the worker

    def _start_lazy_function(self, lazy_func: Callable[..., None], request: BoltRequest) -> None:
        from bot.slack.work import IMMEDIATE, RUN_HERE

        name = get_name_for_callable(lazy_func)
        if self.queue is not None:
            if name not in IMMEDIATE and not request.context.get(RUN_HERE):
                try:
                    self.queue.record(name, request)
                    return
                except Exception:  # the spool cannot be written: the person still gets an answer, from this process
                    log.warning("could not hand %s to the worker; running it here", name, exc_info=True)
            # Run here, so claimed here first (the worker claims what it runs): once across replicas, as ever.
            if not self.queue.claim_here(request):
                log.info("acknowledged and dropped a Slack request another delivery already took on")
                return
        super()._start_lazy_function(lazy_func, request)

    def _build_lazy_request(self, request: BoltRequest, lazy_func_name: str) -> BoltRequest:
        body = request.raw_body if request.mode == "http" else request.body
        context = BoltContext({k: v for k, v in request.context.items() if k not in _NOT_SHARED})
        lazy = read_as_form(BoltRequest(body=body, query=request.query, headers=request.headers, context=context,
                                        mode=request.mode))
        lazy.lazy_only = True
        lazy.lazy_function_name = lazy_func_name
        lazy.context["listener_runner"] = self
        if request.context.get_thread_context is not None:
            lazy.context["get_thread_context"] = request.context.get_thread_context
        if request.context.save_thread_context is not None:
            lazy.context["save_thread_context"] = request.context.save_thread_context
        return lazy


def share_lazy_requests(app: App, queue: FollowupQueue | None = None) -> None:
    """Replace ``app``'s listener runner by a :class:`SharedRequestRunner` with the same settings (and ``queue``)."""
    runner: ThreadListenerRunner = app.listener_runner
    shared = app._listener_runner = SharedRequestRunner(
        logger=runner.logger,
        process_before_response=runner.process_before_response,
        listener_error_handler=runner.listener_error_handler,
        listener_start_handler=runner.listener_start_handler,
        listener_completion_handler=runner.listener_completion_handler,
        listener_executor=runner.listener_executor,
        lazy_listener_runner=runner.lazy_listener_runner,
    )
    shared.queue = queue
