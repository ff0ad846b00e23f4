"""The route in front of an endpoint, without a cluster: admission words, settings, rendering, validation, read-back.

Every rendered HTTPRoute is checked against the Gateway API v1 CRD schema shipped
in ``bot/data`` (the same check the adapter runs before an apply); the reference
examples of ``tests/fixtures/gateway-api`` pass it, and a broken route is refused
with the schema path of each error.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.adapters.cluster import InvalidManifest, RouteNotConfigured
from bot.adapters.cluster.route import render_route, route_errors
from bot.adapters.cluster.route_names import ADMISSION_ANNOTATION, CHANGED_AT_ANNOTATION, REASON_ANNOTATION
from bot.adapters.cluster.route_read import read_route_status
from bot.config import ConfigError, EndpointSettings, load_settings
from bot.domain.admission import Admission, AdmissionError, parse_admission
from bot.route_config import RouteSettings

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "gateway-api"
STATES = ["closed", "internal", "1%", "25%", "99%", "open"]
AT = "2026-12-01T09:00:00+00:00"


def endpoint(fallback: bool = True, **route: Any) -> EndpointSettings:
    # A fixed cohort value keeps these rendering tests about rules and weights (tokens: tests/adapters/test_cohort.py).
    block: dict[str, Any] = {"gateway": {"name": "public", "namespace": "gateways", "section_name": "https"},
                             "hostnames": ["kimi.example.com"],
                             "cohort_header": {"name": "x-kimi-cohort", "value": "internal"}, **route}
    if fallback:
        block["fallback"] = {"name": "kimi-fallback", "port": 8000}
    return EndpointSettings(name="kimi-prod", namespace="model-serving", route=RouteSettings.model_validate(block))


def split(rule: dict[str, Any]) -> dict[str, int]:
    return {ref["name"]: ref["weight"] for ref in rule["backendRefs"]}


# -- admission words ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", STATES)
def test_admission_words_read_back_as_written(text: str) -> None:
    assert str(parse_admission(text)) == text


def test_admission_reads_bare_numbers_and_the_ends_of_the_scale() -> None:
    assert parse_admission(" 25 ") == Admission.share(25)
    assert parse_admission("100%") == Admission.open()
    assert parse_admission("Internal") == Admission.internal()


@pytest.mark.parametrize("text", ["0%", "0", "101%", "half", "-5%", "", "25.5%"])
def test_text_that_is_no_admission_is_refused_with_the_accepted_words(text: str) -> None:
    with pytest.raises(AdmissionError, match="closed, internal, a share from 1% to 99%, or open"):
        parse_admission(text)


def test_admissions_order_by_exposure() -> None:
    words = ["open", "40%", "closed", "internal", "2%"]
    assert [str(a) for a in sorted(parse_admission(w) for w in words)] == ["closed", "internal", "2%", "40%", "open"]
    assert Admission.closed() < Admission.internal() < Admission.share(1) < Admission.open()


def test_a_share_outside_1_to_99_cannot_be_built() -> None:
    with pytest.raises(AdmissionError):
        Admission.share(100)


def test_the_cohort_reaches_kimi_unless_closed() -> None:
    assert [a.percent_for(cohort=True) for a in map(parse_admission, STATES)] == [0, 100, 100, 100, 100, 100]
    assert [a.percent_for(cohort=False) for a in map(parse_admission, STATES)] == [0, 0, 1, 25, 99, 100]


# -- settings -------------------------------------------------------------------------------------------------


def test_the_model_backend_defaults_to_the_service_the_eks_renderer_creates() -> None:
    ep = endpoint()
    assert ep.route is not None
    assert (ep.route.model_backend(ep.name).name, ep.route.model_backend(ep.name).port) == ("kimi-prod", 8000)
    assert (ep.route.cohort_header.name, ep.route.cohort_header.source) == ("x-kimi-cohort", "static")


@pytest.mark.parametrize(("route", "words"), [
    ({"gateway": {"name": "Public"}}, "gateway.name"),
    ({"gateway": {"name": "gw"}, "hostnames": ["10.0.0.1:443"]}, "hostname"),
    ({"gateway": {"name": "gw"}, "hostnames": ["Kimi.Example.com"]}, "hostname"),
    ({"gateway": {"name": "gw"}, "cohort_header": {"name": "x cohort", "value": "internal"}}, "cohort_header.name"),
    ({"gateway": {"name": "gw"}, "fallback": {"name": "kimi-prod"}}, "the model Service itself"),
    ({"gateway": {"name": "gw"}, "fallback": {"name": "small", "port": 70000}}, "fallback.port"),
    ({"gateway": {"name": "gw"}, "weights": {"model": 1}}, "route.weights"),
    ({}, "route.gateway"),
])
def test_a_bad_route_block_is_refused_in_one_line_naming_the_setting(route: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(config=None, endpoints=[{"name": "kimi-prod", "route": route}])
    message = str(caught.value)
    assert "\n" not in message
    assert words in message


# -- rendering ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("fallback", [True, False])
def test_every_state_renders_a_route_the_crd_schema_accepts(state: str, fallback: bool) -> None:
    admission = parse_admission(state)
    ep = endpoint(fallback=fallback)
    if admission.needs_fallback and not fallback:
        with pytest.raises(InvalidManifest, match=r"needs route\.fallback"):
            render_route(ep, admission, "step", AT)
        return
    route = render_route(ep, admission, "step", AT)

    assert route_errors(route) == []
    assert (route["apiVersion"], route["kind"]) == ("gateway.networking.k8s.io/v1", "HTTPRoute")
    assert (route["metadata"]["name"], route["metadata"]["namespace"]) == ("kimi-prod", "model-serving")
    assert route["metadata"]["annotations"] == {ADMISSION_ANNOTATION: state, REASON_ANNOTATION: "step",
                                                CHANGED_AT_ANNOTATION: AT}
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public",
                                            "namespace": "gateways", "sectionName": "https"}]
    *needs_kimi, cohort, ordinary = route["spec"]["rules"]
    assert len(needs_kimi) == (2 if fallback else 0)  # requests that need Kimi K3 get rules of their own
    assert cohort["matches"][0]["headers"] == [{"type": "Exact", "name": "x-kimi-cohort", "value": "internal"}]
    assert "headers" not in ordinary["matches"][0]
    to_kimi = admission.percent_for(cohort=False)
    cohort_to_kimi = admission.percent_for(cohort=True)
    expected_cohort = {"kimi-prod": cohort_to_kimi, **({"kimi-fallback": 100 - cohort_to_kimi} if fallback else {})}
    expected_ordinary = {"kimi-prod": to_kimi, **({"kimi-fallback": 100 - to_kimi} if fallback else {})}
    assert split(cohort) == expected_cohort
    assert split(ordinary) == expected_ordinary
    status = read_route_status(route, ep)
    assert status.annotated == status.effective == admission
    assert status.problems == ()


def test_closed_without_fallback_keeps_the_model_at_weight_zero_so_a_gateway_answers_500() -> None:
    route = render_route(endpoint(fallback=False), Admission.closed(), "rollback #7", AT)
    assert [split(rule) for rule in route["spec"]["rules"]] == [{"kimi-prod": 0}, {"kimi-prod": 0}]


def test_an_endpoint_without_route_settings_has_no_route() -> None:
    with pytest.raises(RouteNotConfigured, match="has no route in its settings"):
        render_route(EndpointSettings(name="kimi-prod"), Admission.open(), "x", AT)


def test_a_multi_line_reason_becomes_one_annotation_line() -> None:
    route = render_route(endpoint(), Admission.internal(), "traffic gate\n  internal cohort", AT)
    assert route["metadata"]["annotations"][REASON_ANNOTATION] == "traffic gate internal cohort"


# -- validation against the CRD -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_gateway_api_reference_routes_pass_the_shipped_schema(path: Path) -> None:
    routes = [doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc.get("kind") == "HTTPRoute"]
    assert routes
    for route in routes:
        assert route_errors(route) == []


def test_a_broken_route_is_refused_with_the_schema_path_of_each_error() -> None:
    route = render_route(endpoint(), Admission.share(25), "x", AT)
    broken = copy.deepcopy(route)
    broken["spec"]["rules"][3]["backendRefs"][0]["weight"] = -1
    broken["spec"]["rules"][2]["matches"][0]["headers"][0]["type"] = "Prefix"
    broken["spec"]["rules"][3]["backendRefs"][1]["colour"] = "blue"
    del broken["spec"]["rules"][3]["backendRefs"][1]["port"]
    broken["spec"]["hostnames"] = ["Kimi.Example.com"]

    errors = route_errors(broken)

    joined = "\n".join(errors)
    assert "HTTPRoute/kimi-prod spec.rules[3].backendRefs[0].weight: -1 is less than the minimum of 0" in joined
    assert "HTTPRoute/kimi-prod spec.rules[2].matches[0].headers[0].type: 'Prefix' is not one of" in joined
    assert "HTTPRoute/kimi-prod spec.rules[3].backendRefs[1]: Additional properties are not allowed ('colour'" in joined
    assert "HTTPRoute/kimi-prod spec.rules[3].backendRefs[1]: Must have port for Service reference" in joined
    assert "HTTPRoute/kimi-prod spec.hostnames[0]: 'Kimi.Example.com' does not match" in joined


def test_seventeen_backends_break_the_crd_limit() -> None:
    route = render_route(endpoint(), Admission.open(), "x", AT)
    route["spec"]["rules"][1]["backendRefs"] = [{"name": f"s{i}", "port": 80} for i in range(17)]
    # jsonschema's "… is too long" follows the (shortened) list itself; the path is what the user needs.
    assert [e.split(":", 1)[0] for e in route_errors(route)] == ["HTTPRoute/kimi-prod spec.rules[1].backendRefs"]


# -- reading back what a cluster holds ------------------------------------------------------------------------


def test_hand_edited_weights_win_over_the_annotation_and_the_difference_is_said() -> None:
    ep = endpoint()
    route = render_route(ep, Admission.share(10), "x", AT)
    route["spec"]["rules"][-1]["backendRefs"][0]["weight"] = 3  # someone ran kubectl edit: 3 of 93 ≈ 3 %
    route["spec"]["rules"][-1]["backendRefs"][1]["weight"] = 90

    status = read_route_status(route, ep)

    assert status.annotated == Admission.share(10)
    assert status.effective == Admission.share(3)
    assert not status.consistent
    assert "the annotation says 10% but the rules give 3%" in status.problems


def test_rules_that_fit_no_state_read_as_unknown_with_the_reason() -> None:
    ep = endpoint()
    route = render_route(ep, Admission.internal(), "x", AT)
    route["spec"]["rules"][-2]["backendRefs"][0]["weight"] = 50  # cohort half to Kimi, others none
    route["spec"]["rules"][-2]["backendRefs"][1]["weight"] = 50

    status = read_route_status(route, ep)

    assert status.effective is None
    assert any("50% of the cohort and 0% of other requests" in p for p in status.problems)


def test_a_route_sending_traffic_to_an_unknown_service_is_no_known_state() -> None:
    ep = endpoint()
    route = render_route(ep, Admission.open(), "x", AT)
    route["spec"]["rules"][-1]["backendRefs"].append({"name": "shadow", "port": 80, "weight": 5})

    status = read_route_status(route, ep)

    assert status.effective is None
    assert any("Service shadow:80, which is neither the model nor the fallback" in p for p in status.problems)


def test_parent_conditions_of_an_older_generation_do_not_count_as_accepted() -> None:
    ep = endpoint()
    route = render_route(ep, Admission.open(), "x", AT)
    route["metadata"]["generation"] = 4
    route["status"] = {"parents": [{
        "parentRef": {"name": "public", "namespace": "gateways", "sectionName": "https"},
        "controllerName": "example.com/gateway",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "observedGeneration": 3},
                       {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "observedGeneration": 3}]}]}

    stale = read_route_status(route, ep)
    assert not stale.accepted
    assert "gateways/public/https not yet seen" in stale.summary

    for condition in route["status"]["parents"][0]["conditions"]:
        condition["observedGeneration"] = 4
    assert read_route_status(route, ep).accepted
