"""``kimi-ops sandbox --prometheus``: a real Prometheus scrapes the model server with kimi-ops's rules, a real
Alertmanager pages into the console's Slack, and with kimi-ops stopped the rule still fires in Prometheus."""

from __future__ import annotations

import datetime as dt
import secrets

from bot.cli.shell import Shell
from bot.sandbox.prometheus import beside, free_port, sandbox_overrides
from bot.sandbox.stack import CHANNEL, DEPLOYER, ENDPOINT, Sandbox
from tests.promtool_support import tool
from tests.slack_support import blocks_text
from tests.world_support import wait_until


def test_a_burn_goes_from_rule_to_slack_and_keeps_firing_without_kimi_ops(tmp_path) -> None:
    tool("prometheus"), tool("alertmanager")  # skipped outside CI without them, failed in CI
    port, token = free_port(), secrets.token_hex(16)
    settings, endpoint = sandbox_overrides(port, token)
    with Sandbox(tmp_path / "sandbox", settings_overrides=settings, endpoint_overrides=endpoint) as sandbox:
        console = Shell(sandbox.ctx, user=DEPLOYER, channel=CHANNEL)
        prometheus, http = beside(sandbox.ctx, console.app, tmp_path / "prometheus", alertmanager_port=port, token=token)
        stopped = False
        try:
            server = sandbox.stand_ins["openai"]

            def burning() -> list[dict[str, str]]:
                server.simulate(requests=100, errors=50, ttft=0.2, e2e=4.0)  # half the answers 5xx, every moment
                return [a for a in prometheus.firing() if a.get("kimi_ops_kind") == "burn-page:errors"]

            # Polled every half second: each look is also a moment of burning traffic for Prometheus to scrape.
            [alert] = wait_until("the burn-rate page firing in Prometheus", burning, timeout=90, poll=0.5)
            assert alert["endpoint"] == ENDPOINT and alert["severity"] == "page"
            page = wait_until("the page in the console's channel", lambda: [
                m for m in console.stub.messages if m.channel == CHANNEL and "burn-page:errors" in blocks_text(m.blocks)
                and m.thread_ts is None], timeout=60)
            assert len(page) == 1 and "Silence" in blocks_text(page[0].blocks) + str(page[0].blocks)
            http.stop()
            console.close()  # kimi-ops is gone: Prometheus pages on
            stopped = True
            for _ in range(2):  # two rounds of Prometheus's own, each after a moment of burning traffic
                looked_at = dt.datetime.now(dt.UTC)
                server.simulate(requests=100, errors=50, ttft=0.2, e2e=4.0)
                wait_until("Prometheus evaluating its rules with kimi-ops stopped",
                           lambda at=looked_at: prometheus.evaluated_since(at), timeout=60, poll=0.2)
            assert [a for a in prometheus.firing()
                    if a["endpoint"] == ENDPOINT and a.get("kimi_ops_kind") == "burn-page:errors"]
        finally:
            prometheus.stop()
            if not stopped:
                http.stop()
                console.close()
