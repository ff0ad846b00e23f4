"""The rollout watch's lines carry the cluster's words (pod events, conditions) into the deployment's thread.

Kubernetes writes those words, and an image name, a webhook or an operator can put Slack's markup in them: each
line reaches Slack as typed (escaped as Slack's "Escaping text" asks), never as a channel-wide notification or a
link, and a terminal following the deployment shows the characters themselves.
"""

from __future__ import annotations

from typing import Any

from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.rollout import RolloutOutcome, RolloutProgress
from bot.services.progress import progress_since
from bot.views.commands import for_terminal
from tests.services.test_workflow import deploy_to_live
from tests.workflow_support import ROLES, FakeCluster, endpoint_config, fake_ports, release_data

SAID = 'Pod/kimi-0: Failed to pull image "registry/<!channel>": see <https://evil.example|the runbook>'


class EventfulCluster(FakeCluster):
    """A rollout whose pod event holds markup, then completes."""

    def watch(self, endpoint: Any, manifest: Any, *, timeout_seconds: float, on_progress: Any, stop: Any = None,
              since: Any = None) -> RolloutOutcome:
        on_progress(RolloutProgress(SAID, state="DeploymentInProgress"))
        return super().watch(endpoint, manifest, timeout_seconds=timeout_seconds, on_progress=on_progress, stop=stop,
                             since=since)


def test_a_pod_events_markup_reaches_the_thread_escaped_and_the_terminal_as_typed(make_ctx: Any) -> None:
    from bot.services.engine import Engine
    from bot.services.releases import register_release

    ctx = make_ctx(endpoints=[endpoint_config()], roles=ROLES, ports=fake_ports(cluster=EventfulCluster()))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    view = deploy_to_live(ctx, Engine(ctx, readiness_pause=0))
    with ctx.uow() as uow:
        lines = [row.payload["message"] for row in uow.events.for_deployment(view.id)
                 if row.kind == RolloutProgressEvent.KIND and "Failed to pull" in row.payload["message"]]
    assert lines == ['Pod/kimi-0: Failed to pull image "registry/&lt;!channel&gt;": see '
                     '&lt;https://evil.example|the runbook&gt;']
    assert SAID in [for_terminal(line.text) for line in progress_since(ctx, view.id, 0)]
