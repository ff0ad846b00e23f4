"""A production endpoint has a door kimi-ops controls: a route, or an application layer that acknowledges admission.

* a prod endpoint with neither does not start (one line naming the fix);
* an application layer that does not write back the generation it enforces in
  time fails the step closed and pages;
* a non-prod endpoint with neither says, on every gate and in status, that users
  are not kept off the candidate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.config import ConfigError, EndpointSettings, load_settings
from bot.domain.admission import Admission
from bot.services.admission import STUCK, AdmissionFailed, apply_admission
from bot.services.engine import Engine
from bot.services.releases import register_release
from bot.services.status import users_get_words
from tests.workflow_support import (
    REQUESTER,
    ROLES,
    FakeCluster,
    endpoint_config,
    fake_ports,
    release_data,
)


def test_a_prod_endpoint_without_a_route_or_application_layer_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(data_dir=tmp_path, endpoints=[{"name": "kimi-prod", "kind": "eks", "environment": "prod"}])
    assert str(refused.value) == (
        "KIMI_CONFIG: endpoint kimi-prod (prod) has no door kimi-ops controls: add a route: block (gateway, fallback), "
        "or declare door.application_layer (the layer that enforces admission and acknowledges each change); "
        "see deploy/kimi-ops.example.yaml")
    assert "\n" not in str(refused.value)
    # Either door starts; off prod neither is required.
    load_settings(data_dir=tmp_path, endpoints=[
        {"name": "kimi-a", "kind": "eks", "route": {"gateway": {"name": "gw"}}},
        {"name": "kimi-b", "kind": "eks", "door": {"application_layer": {"namespace": "apps", "pod_labels": {"app": "x"}}}},
        {"name": "kimi-c", "kind": "eks", "environment": "staging"},
    ])


class SilentLayer(FakeCluster):
    """An application layer that stopped acknowledging (crashed, lost its watch)."""

    def admission_enforced(self, endpoint: EndpointSettings) -> int | None:
        return None


def test_an_unacknowledged_admission_change_fails_closed_and_pages(make_ctx: Any) -> None:
    layer = {"namespace": "apps", "pod_labels": {"app": "kimi-app"}, "acknowledge_seconds": 0.3}
    cluster = SilentLayer()
    ctx = make_ctx(endpoints=[endpoint_config(door={"application_layer": layer})], roles=ROLES,
                   ports=fake_ports(cluster=cluster), oncall_group="S0ONCALL")
    endpoint = ctx.settings.endpoint("kimi-prod")
    from bot.bootstrap import sync_endpoints

    sync_endpoints(ctx)
    with pytest.raises(AdmissionFailed) as failed:
        apply_admission(ctx, endpoint, Admission.open(), "reopened after deploy #1")
    assert str(failed.value).startswith(
        "the application layer (pods app=kimi-app in apps) did not acknowledge kimi-prod's admission open (generation 1) "
        "within 0 s; it enforces nothing")
    assert cluster.admission == [True, False]  # asked to open, then closed again: it fails closed
    with ctx.uow() as uow:
        row = uow.endpoints.get("kimi-prod")
        incident = uow.incidents.open_for(row.id, STUCK)
        assert incident is not None and "did not acknowledge" in incident.reason
        pages = uow.events.undelivered()
        stuck = [e for e in pages if "did not acknowledge" in str(e.payload.get("text", ""))]
        assert stuck and str(stuck[0].payload["text"]).startswith("<!subteam^S0ONCALL>")


def test_an_acknowledged_change_is_what_users_get(make_ctx: Any) -> None:
    ctx = make_ctx(endpoints=[endpoint_config()], roles=ROLES, ports=fake_ports())
    words = apply_admission(ctx, ctx.settings.endpoint("kimi-prod"), Admission.closed(), "closed for deploy #1")
    assert words == "the application layer turns users away (admission ConfigMap closed; no route is configured)"


def test_off_prod_without_either_door_every_gate_and_status_say_users_are_not_kept_off(make_ctx: Any) -> None:
    ctx = make_ctx(endpoints=[endpoint_config("kimi-dev", environment="dev", door={})], roles=ROLES,
                   ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "test")
    engine = Engine(ctx)
    from bot.services.deployments import request_deploy

    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-dev", REQUESTER).id)
    assert view.state == "artifact_gate"
    with ctx.uow() as uow:
        report = uow.gates.latest(view.id, "artifact")
        assert report is not None
        unguarded = [c for c in report.report["checks"] if c["name"] == "door.none"]
    assert unguarded and unguarded[0]["status"] == "warn"
    assert unguarded[0]["reason"].startswith("users are not kept off the candidate: kimi-dev has no route")
    assert users_get_words(ctx.settings.endpoint("kimi-dev"), "closed") == (
        "users are not kept off the candidate: kimi-dev has no route and no application layer")
