"""A real Alertmanager routing to a running Slack app (the bench), for the tests of pages that arrive by webhook.

One endpoint watched by Prometheus (``slo.alerting: prometheus``), live with ``rel-b`` (its deployment followed in the
thread :data:`DEPLOYMENT_THREAD`), whose silences go to the Alertmanager started here; the app's webhook takes
``token``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.adapters.alertmanager import HttpAlertmanager
from tests.jobs_support import make_live
from tests.promtool_support import Alertmanager, free_port
from tests.slack_support import CHANNEL, start_bench, stop_bench
from tests.workflow_support import ROLES, endpoint_config, fake_ports
from tests.world_support import wait_until

DEPLOYMENT_THREAD = "1733380000.000100"  # the live deployment's thread (its root message's ts)


@contextmanager
def routed_alertmanager(make_ctx: Callable[..., Any], tmp_path: Path, token: str) -> Iterator[tuple[Any, Alertmanager]]:
    """The bench (the app serving HTTP) and an Alertmanager whose receiver is the app's webhook; both stopped after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL, slo={"alerting": "prometheus"})], roles=ROLES,
                   ports=replace(fake_ports(), silences=HttpAlertmanager(url)), alertmanager_url=url,
                   alertmanager_webhook_token=token)
    live = make_live(ctx, "kimi-prod", "rel-b")
    with ctx.uow() as uow:  # the thread its deployment was followed in, as the notifier records it
        dep = uow.deployments.get(live)
        dep.slack_channel, dep.slack_thread_ts = CHANNEL, DEPLOYMENT_THREAD
        uow.commit()
    bench = start_bench(ctx)
    manager = Alertmanager(tmp_path, f"{bench.http.url}/alertmanager/webhook", token, port=port)
    try:
        wait_until("Alertmanager ready", manager.ready, timeout=30)
        yield bench, manager
    finally:
        manager.stop()
        stop_bench(bench)
