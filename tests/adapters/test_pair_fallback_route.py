"""A pair's route while the side users are on fails: everyone on the service's smaller fallback, never the other side.

The route a failover writes for a side (:meth:`EndpointSettings.on_fallback`) is validated on the HTTPRoute CRD like
every route, keeps requests that need Kimi K3 off the fallback (the gateway's 500), labels the fallback's answers
with its model, and reads back as closed from both sides: nobody is on the other side either.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.adapters.cluster.route import render_route, route_errors
from bot.adapters.cluster.route_read import read_route_status
from bot.adapters.cluster.route_rules import ModelLabels
from bot.config import EndpointSettings, ServiceSettings
from bot.config.service import with_pair_sides
from bot.domain.admission import Admission
from bot.services.admission import users_get

AT = "2026-12-01T09:00:00+00:00"
FALLBACK = {"name": "kimi-small", "port": 8000, "model_name": "kimi-small-8b"}


def sides(fallback: dict[str, Any] | None = FALLBACK) -> dict[str, EndpointSettings]:
    route: dict[str, Any] = {"gateway": {"name": "public", "namespace": "gateways"},
                             "cohort_header": {"name": "x-kimi-cohort", "value": "internal"}}
    if fallback is not None:
        route["fallback"] = fallback
    service = ServiceSettings.model_validate({"name": "kimi", "sides": ["kimi-blue", "kimi-green"], "route": route})
    endpoints = [EndpointSettings(name=n, namespace="model-serving") for n in ("kimi-blue", "kimi-green")]
    return {e.name: e for e in with_pair_sides(endpoints, [service])}


def weights(route: dict[str, Any]) -> set[tuple[str, int]]:
    return {(ref["name"], ref["weight"]) for rule in route["spec"]["rules"] for ref in rule["backendRefs"]}


def test_the_failover_route_sends_everyone_to_the_smaller_fallback_and_never_the_other_side() -> None:
    blue = sides()["kimi-blue"]
    route = render_route(blue.on_fallback(), Admission.closed(), "failover: readiness", AT,
                         labels=ModelLabels(model="kimi-k3-2026-09-01"))
    assert route_errors(route) == []
    assert {name for name, weight in weights(route) if weight > 0} == {"kimi-small"}
    assert "kimi-green" not in {name for name, _ in weights(route)}
    # Requests that need Kimi K3 have rules of their own, at weight 0: the gateway's 500, never the small model.
    needs = [r for r in route["spec"]["rules"] if any(h["name"] == "x-kimi-requires" for m in r["matches"]
                                                      for h in m.get("headers", []))]
    assert len(needs) == 2 and all(weights({"spec": {"rules": [r]}}) == {("kimi-blue", 0)} for r in needs)
    labels = {ref["name"]: ref["filters"][0]["responseHeaderModifier"]["set"][0]["value"]
              for rule in route["spec"]["rules"] for ref in rule["backendRefs"]}
    assert labels["kimi-small"] == "kimi-small-8b"
    assert users_get(blue.on_fallback(), Admission.closed()).startswith("users get the fallback model (kimi-small)")


def test_the_failover_route_reads_back_closed_from_both_sides() -> None:
    by_name = sides()
    route = render_route(by_name["kimi-blue"].on_fallback(), Admission.closed(), "failover: readiness", AT)
    for name in ("kimi-blue", "kimi-green"):
        status = read_route_status(route, by_name[name])
        assert (status.effective, status.annotated, status.problems) == (Admission.closed(), Admission.closed(), ()), name
    # The ordinary close of a side (every user on the other side) still reads as the other side open.
    ordinary = render_route(by_name["kimi-blue"], Admission.closed(), "deploy", AT,
                            labels=ModelLabels(model="a", fallback="b"))
    assert read_route_status(ordinary, by_name["kimi-green"]).effective == Admission.open()


def test_without_a_service_fallback_a_side_has_no_failover_and_a_side_cannot_be_the_fallback() -> None:
    blue = sides(None)["kimi-blue"]
    assert blue.on_fallback() == blue and not blue.smaller_fallback
    with pytest.raises(ValueError, match=r"route\.fallback kimi-green is one of its sides"):
        sides({"name": "kimi-green", "port": 8000})
