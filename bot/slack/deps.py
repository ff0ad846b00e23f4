"""What the listeners share: the process's context, the Web API client, who is in which group, and where work goes.

Handed to every listener module's ``register(app, deps)``. :meth:`SlackDeps.follow`
is the one path from a listener's answer to the person, the deployment's
thread and the engine pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from slack_sdk import WebClient

from bot.adapters.slack.identity import GroupDirectory
from bot.adapters.slack.notifier import SlackNotifier
from bot.bootstrap import Root
from bot.services.access import Identity
from bot.services.context import Context
from bot.slack.answers import Tell, guard
from bot.slack.home_cache import HomeCache
from bot.slack.outbox import Outbox
from bot.slack.pools import CountingExecutor
from bot.views.parts import Reply


def person(directory: GroupDirectory, user_id: str) -> Identity:
    """The Slack user as the access rules see them: their ID and their user groups (cached by the directory)."""
    return Identity(user_id, directory.groups_of(user_id))


@dataclass(frozen=True)
class SlackDeps:
    root: Root
    client: WebClient
    directory: GroupDirectory
    notifier: SlackNotifier
    outbox: Outbox
    homes: HomeCache
    engine_pool: CountingExecutor  # the slow follow-ups (Engine.advance…), never Bolt's worker pool

    @property
    def ctx(self) -> Context:
        return self.root.ctx

    def identity(self, user_id: str) -> Identity:
        return person(self.directory, user_id)

    def follow(self, answer: Reply | None, tell: Tell, channel: str | None) -> None:
        """Post ``answer``, hand its slow follow-up to the engine pool, and send what changed to the threads."""
        if answer is None:
            self.outbox.deliver_if_written()
            return
        if answer.deployment_id is not None:
            self.notifier.remember_origin(answer.deployment_id, channel)
        tell(answer)
        self.outbox.deliver_if_written()
        follow_up = answer.then
        if follow_up is not None:
            # A rollout watch may take an hour: it must not hold a worker that answers people.
            self.engine_pool.submit(lambda: self.follow(guard(follow_up, tell), tell, channel))
