"""Step lines carry outside words into the deployment's thread: the rollout watch's the cluster's (pod events,
conditions), a failed readiness the endpoint's answer.

Kubernetes and the endpoint write those words, and an image name, a webhook or a proxy can put Slack's markup in them: each
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


def test_a_failed_readiness_says_the_endpoints_words_escaped(make_ctx: Any) -> None:
    from bot.services.deployments import request_deploy
    from bot.services.engine import Engine
    from bot.services.releases import register_release
    from tests.services.test_workflow import approve
    from tests.workflow_support import ADMIN, APPROVER_1, REQUESTER, FakeEndpoint

    answered = 'HTTP 503: <!here> upstream said <https://evil.example|retry>'
    ctx = make_ctx(endpoints=[endpoint_config()], roles=ROLES,
                   ports=fake_ports(endpoint=FakeEndpoint(ok=False, error=answered)))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    engine = Engine(ctx, readiness_pause=0)
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    for who in (APPROVER_1, ADMIN):  # the artifact and infrastructure gates; then the readiness fails
        view = approve(ctx, engine, view.id, who)
    assert view.state == "failed", view.state_reason
    with ctx.uow() as uow:
        lines = [row.payload["message"] for row in uow.events.for_deployment(view.id)
                 if row.kind == RolloutProgressEvent.KIND and row.payload["message"].startswith("readiness completion")]
    assert lines and all("&lt;!here&gt;" in line and "<!here>" not in line for line in lines)
