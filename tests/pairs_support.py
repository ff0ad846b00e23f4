"""The blue/green pair world the pair tests share (``tests/services/test_pairs*.py``): a sandbox of two Kimi K3
stand-ins behind one service route, read as a user of the service sees it.

:class:`PairWorld` reads where users are, what each side runs and pages, the route's weights and writes, and the
ramp's one thread message; it deploys to the service and brings the pair to "users on one side, the other kept warm"
(:meth:`PairWorld.keep_a_side_warm`) for a test that needs a side to roll back to. :func:`models_seen` asks the
gateway which side answers.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from slack_sdk import WebClient

from bot.adapters.cluster.rest import object_path
from bot.adapters.slack.notifier import SlackNotifier
from bot.domain.alert_rules import rule_object_name
from bot.sandbox.slack_stub import SlackStub
from bot.sandbox.stack import BLUE, DEPLOYER, GREEN, NAMESPACE, SERVICE, Sandbox
from bot.sandbox.users import COHORT_USER, USER
from bot.services.access import Identity
from bot.services.deployments import get_deployment, request_deploy
from bot.services.engine import Engine
from bot.services.pairs import service_status
from bot.services.reservations import endpoints_with_tested_release
from tests.world_support import SandboxWorld

HTTP = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=16))


@dataclass
class PairWorld(SandboxWorld):
    sandbox: Sandbox
    engine: Engine
    slack: SlackStub

    def ramp_message(self, deployment_id: int) -> Any:
        """The one ramp message in the deployment's thread, after the outbox is delivered to the Slack stub."""
        notifier = SlackNotifier(WebClient(token="xoxb-t", base_url=self.slack.api_url), self.ctx.uow, self.ctx.clock)
        notifier.deliver_pending()
        with self.ctx.uow() as uow:
            dep = uow.deployments.get(deployment_id)
            channel, root = dep.slack_channel, dep.slack_thread_ts
        found = [m for m in self.slack.thread(channel, root) if m.text.startswith(":bar_chart:")]
        assert len(found) == 1, [m.text for m in found]
        return found[0]

    def ramp_plots(self, deployment_id: int) -> list[Any]:
        """The PNGs uploaded into the deployment's thread for its ramp (after ``ramp_message`` delivered them)."""
        with self.ctx.uow() as uow:
            dep = uow.deployments.get(deployment_id)
            channel, root = dep.slack_channel, dep.slack_thread_ts
        return [u for _, u in self.slack.files_in(channel, root) if u.filename.startswith("ramp-")]

    def server(self, side: str) -> Any:
        return self.sandbox.side_server(side)

    def users_at(self, side: str) -> int:
        seen = self.server(side).users()
        return int(seen[USER] + seen[COHORT_USER])

    def admission(self, side: str) -> str:
        with self.ctx.uow() as uow:
            return str(uow.endpoints.get(side).admission)

    def live_release(self, side: str) -> str | None:
        status = {s.endpoint: s for s in service_status(self.ctx, SERVICE).sides}
        return status[side].release

    def weights(self) -> dict[str, int | None]:
        return {s.endpoint: s.weight for s in service_status(self.ctx, SERVICE).sides}

    def _patches(self, kind: str, name: str) -> int:
        path = object_path(kind, name, NAMESPACE)
        return sum(1 for r in self.sandbox.stand_ins["kube"].requests()
                   if r.method == "PATCH" and r.url.path == path and "dryRun" not in r.params)

    def route_writes(self) -> int:
        """Writes of the service's HTTPRoute the emulator received (server-side apply is a PATCH)."""
        return self._patches("HTTPRoute", SERVICE)

    def workload_writes(self) -> int:
        """Applies of either side's model workload (the InferenceEndpointConfig)."""
        return sum(self._patches("InferenceEndpointConfig", side) for side in (BLUE, GREEN))

    def admissions_since(self, side: str, audit_id: int) -> list[str]:
        """The admissions recorded for ``side`` after audit row ``audit_id``, oldest first."""
        with self.ctx.uow() as uow:
            rows = uow.audit.list(subject=f"endpoint:{side}", limit=200)
            return [str((r.details or {})["to"]) for r in sorted(rows, key=lambda r: r.id)
                    if r.action == "endpoint.admission" and r.id > audit_id]

    def audit_mark(self) -> int:
        with self.ctx.uow() as uow:
            return int(uow.audit.latest_id())

    def deploy(self, release: str, *, until: str = "live") -> Any:
        return self.approve(request_deploy(self.ctx, release, SERVICE, Identity(DEPLOYER)).id, until=until)

    def tested(self) -> set[str]:
        """The sides the reservation watch counts as tested replacements (a release that passed its gates runs)."""
        with self.ctx.uow() as uow:
            return endpoints_with_tested_release(uow, self.ctx.settings.endpoints)

    def users_on(self) -> str:
        return next(s.endpoint for s in service_status(self.ctx, SERVICE).sides if s.users)

    def idle(self) -> str:
        """The side users are not on (where the next deploy to the service goes)."""
        return GREEN if self.users_on() == BLUE else BLUE

    def other_release(self) -> str:
        """The shipped release the users' side does not run (what the next deploy to the service brings)."""
        older, newer = self.releases
        return newer if self.live_release(self.users_on()) == older else older

    def keep_a_side_warm(self) -> None:
        """Users on one side and the other kept warm, as a finished deploy to the service leaves them: both run a
        release that passed its gates, not the same one. If not so (the first deploy left the other side empty, or a
        deploy to it failed or expired), one more deploy to the service makes it so."""
        users, idle = self.users_on(), self.idle()
        if self.tested() != {BLUE, GREEN} or self.live_release(idle) in (None, self.live_release(users)):
            self.deploy(self.other_release())

    def to_the_traffic_gate(self) -> tuple[int, str, str]:
        """A deploy to the service, approved up to its traffic gate (waiting): its id, the users' side, the idle one."""
        users, idle = self.users_on(), self.idle()
        dep = request_deploy(self.ctx, self.other_release(), SERVICE, Identity(DEPLOYER)).id
        view = self.approve(dep, until="traffic_gate")
        self.decide(get_deployment(self.ctx, view.id))
        return dep, users, idle

    def service_pages(self) -> set[tuple[str, str]]:
        """Whom the service's own PrometheusRule in the cluster pages: (endpoint, release) of its alerts."""
        rule = self.sandbox.stand_ins["kube"].rest().get(object_path("PrometheusRule", rule_object_name(SERVICE),
                                                                      NAMESPACE))
        assert rule is not None, "no PrometheusRule of the service in the cluster"
        return {(r["labels"]["endpoint"], r["labels"]["release"]) for g in rule["spec"]["groups"] for r in g["rules"]
                if "alert" in r}

    def rules_applied(self, side: str) -> list[str]:
        """The releases the rules were applied for outside a deployment (a service rollback), oldest first."""
        with self.ctx.uow() as uow:
            return [d["release"] for _, _, _, d in uow.audit.actions(f"endpoint:{side}", "alert_rules.applied")
                    if d["rule"] == rule_object_name(SERVICE)]


def models_seen(url: str, n: int, headers: dict[str, str] | None = None) -> Counter[str]:
    """Which side's server answered each of ``n`` cheap requests through the gateway (10 at a time)."""
    def one(_: int) -> str:
        answer = HTTP.get(f"{url}/v1/models", headers=headers or {})
        answer.raise_for_status()
        return str(answer.headers.get("x-kimi-upstream") or answer.json()["data"][0]["id"])

    with ThreadPoolExecutor(10) as pool:
        return Counter(pool.map(one, range(n)))
