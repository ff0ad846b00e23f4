"""Governance records in the artifact gate: licence reviews and security exceptions, their rules, who may record
them (CLI and Slack), and what changing an endpoint's exposure does to a review."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from bot.config import EndpointSettings
from bot.domain import artifact_checks as rules
from bot.domain.governance import ArtifactPolicy, LicenceReview, SecurityException, licence_review_check
from bot.services.access import Identity
from bot.services.deployments import request_deploy
from bot.services.errors import Forbidden, NotFound, Refused
from bot.services.governance import (
    ExceptionRequest,
    ReviewRequest,
    artifact_policy,
    list_exceptions,
    record_exception,
    record_licence_review,
)
from bot.services.releases import register_release
from tests.conftest import START
from tests.slack_support import blocks_text, start_bench, stop_bench
from tests.workflow_support import APPROVER_1, REQUESTER, ROLES, endpoint_config, release_data

VERSION = "kimi-k3-license-2026-07-27"
LATER = START + dt.timedelta(days=90)


def review(**changes: object) -> LicenceReview:
    base = LicenceReview(
        id=7, endpoint="kimi-prod", licence_version=VERSION, reviewer="U0APPROVER1", reviewed_at=START,
        classification="internal", third_party_exposure=False, maas_revenue_over_threshold=False, separate_agreement=None,
        attribution="none: internal use", expires_at=LATER,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def policy(*reviews: LicenceReview, **changes: object) -> ArtifactPolicy:
    base = ArtifactPolicy(endpoint="kimi-prod", exposure="internal", requester="U0DEPLOYER", licence_reviews=reviews,
                          now=START + dt.timedelta(days=1))
    return replace(base, **changes)  # type: ignore[arg-type]


# --- the rules (pure) ------------------------------------------------------------------------------------------


def test_a_current_review_for_the_endpoints_exposure_and_licence_passes() -> None:
    check = licence_review_check(policy(review()), VERSION)
    assert check.status == "pass" and "review #7 by U0APPROVER1" in check.reason and "attribution: none" in check.reason


@pytest.mark.parametrize(("reviews", "changes", "words"), [
    ((), {}, "no licence review is recorded for endpoint kimi-prod"),
    ((review(licence_version="kimi-k3-license-2026-01-01"),), {}, "cover kimi-k3-license-2026-01-01, not"),
    ((review(),), {"exposure": "maas"}, "the exposure changed, so the licence needs a new review"),
    ((review(expires_at=START),), {}, "expired"),
    ((review(reviewer="U0DEPLOYER"),), {}, "who requested this deployment"),
    ((review(classification="maas", third_party_exposure=True, maas_revenue_over_threshold=True),), {"exposure": "maas"},
     "without a separate agreement with Moonshot"),
    ((review(),), {"endpoint": None}, "a licence review is per endpoint"),
])
def test_a_review_that_does_not_hold_fails_the_gate(reviews: tuple, changes: dict, words: str) -> None:
    check = licence_review_check(policy(*reviews, **changes), VERSION)
    assert check.status == "fail" and words in check.reason


def exception(kind: str = "trust-remote-code", **changes: object) -> SecurityException:
    base = SecurityException(id="SEC-EXC-2026-0142", kind=kind, scope="release", target="rel-a", reviewer="U0APPROVER1",
                             reason="repo code reviewed", expires_at=LATER, recorded_at=START)
    return replace(base, **changes)  # type: ignore[arg-type]


ARGS = ["/opt/ml/model", "--trust-remote-code", "--tensor-parallel-size", "8"]


@pytest.mark.parametrize(("records", "named", "status", "words"), [
    ((exception(),), "SEC-EXC-2026-0142", "pass", "allowed by security exception SEC-EXC-2026-0142 (U0APPROVER1"),
    ((), "SEC-EXC-2026-0142", "fail", "is not recorded"),
    ((exception(expires_at=START),), "SEC-EXC-2026-0142", "fail", "expired"),
    ((exception("unscanned-image"),), "SEC-EXC-2026-0142", "fail", "is for unscanned-image"),
    ((exception(target="rel-b"),), "SEC-EXC-2026-0142", "fail", "covers release rel-b"),
    ((exception(scope="endpoint", target="kimi-prod"),), "SEC-EXC-2026-0142", "pass", "allowed by"),
    ((exception(),), None, "fail", "record a security exception"),
])
def test_trust_remote_code_needs_a_current_recorded_exception(records: tuple, named: str | None, status: str,
                                                                words: str) -> None:
    check = rules.check_trust_remote_code(ARGS, named, policy(exceptions=records), "rel-a")
    assert check.status == status and words in check.reason


def test_a_tensor_parallel_size_other_than_eight_needs_an_exception() -> None:
    args = ["/opt/ml/model", "--tensor-parallel-size", "4"]
    assert rules.check_tensor_parallel(args, 8, policy(), "rel-a").status == "fail"
    allowed = rules.check_tensor_parallel(args, 8, policy(exceptions=(exception("tensor-parallel"),)), "rel-a")
    assert allowed.status == "pass" and "instead of 8: allowed by security exception" in allowed.reason


# --- recording them ----------------------------------------------------------------------------------------------


def request(**changes: object) -> ReviewRequest:
    base = ReviewRequest(endpoint="kimi-prod", licence_version=VERSION, classification="internal",
                         third_party_exposure=False, maas_revenue_over_threshold=False, attribution="none: internal use",
                         expires_at=LATER)
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture()
def world(make_ctx):
    ctx = make_ctx(endpoints=[endpoint_config()], roles=ROLES)
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    return ctx


def test_an_approver_records_a_review_the_gate_then_reads_and_an_exposure_change_invalidates(world, make_ctx) -> None:
    stored = record_licence_review(world, APPROVER_1, request())
    with world.uow() as uow:
        audit = uow.audit.actions("endpoint:kimi-prod", "licence.reviewed")
    assert [(actor, details["review"]) for _, actor, _, details in audit] == [("U0APPROVER1", stored.id)]
    endpoint = world.settings.endpoint("kimi-prod")
    assert licence_review_check(artifact_policy(world, endpoint, "U0DEPLOYER"), VERSION).status == "pass"
    # The operator turns the endpoint into a third-party product: the internal review no longer holds.
    exposed = EndpointSettings.model_validate({**endpoint.model_dump(), "exposure": "third-party"})
    check = licence_review_check(artifact_policy(world, exposed, "U0DEPLOYER"), VERSION)
    assert check.status == "fail" and "exposure changed" in check.reason


@pytest.mark.parametrize(("who", "changes", "error", "words"), [
    (REQUESTER, {}, Forbidden, "approver role"),
    (APPROVER_1, {"classification": "public"}, Refused, "classification must be one of"),
    (APPROVER_1, {"third_party_exposure": True}, Refused, "third-party exposure must be"),
    (APPROVER_1, {"classification": "maas", "third_party_exposure": True}, Refused, "configured with exposure internal"),
    (APPROVER_1, {"maas_revenue_over_threshold": True}, Refused, "separate agreement"),
    (APPROVER_1, {"expires_at": START - dt.timedelta(days=1)}, Refused, "not in the future"),
    (APPROVER_1, {"attribution": "  "}, Refused, "attribution obligations"),
    (APPROVER_1, {"endpoint": "nowhere"}, NotFound, "no endpoint named nowhere"),
])
def test_a_review_that_cannot_hold_is_refused_and_nothing_is_stored(world, who, changes, error, words) -> None:
    with pytest.raises(error) as refused:
        record_licence_review(world, who, request(**changes))
    assert words in str(refused.value)
    with world.uow() as uow:
        assert uow.governance.reviews() == []


def test_the_requester_of_an_in_flight_deployment_cannot_record_what_unblocks_it(world) -> None:
    admin = Identity("U0ADMIN")  # admins are approvers and deployers too
    dep = request_deploy(world, "rel-a", "kimi-prod", admin)
    with pytest.raises(Refused, match=f"you requested deployment #{dep.id} on kimi-prod"):
        record_licence_review(world, admin, request())
    with pytest.raises(Refused, match=f"you requested deployment #{dep.id}"):
        record_exception(world, admin, ExceptionRequest(id="SEC-1", kind="trust-remote-code", scope="release",
                                                        target="rel-a", reason="x", expires_at=LATER))
    with world.uow() as uow:
        assert uow.governance.exceptions() == [] and uow.governance.reviews() == []
    assert record_licence_review(world, APPROVER_1, request()).reviewer == "U0APPROVER1"


def test_exceptions_are_recorded_once_and_listed_until_they_expire(world) -> None:
    ask = ExceptionRequest(id="SEC-EXC-2026-0142", kind="trust-remote-code", scope="release", target="rel-a",
                           reason="repo code reviewed at the pinned commit", expires_at=LATER)
    stored = record_exception(world, APPROVER_1, ask)
    assert stored.reviewer == "U0APPROVER1"
    with pytest.raises(Refused, match="already recorded"):
        record_exception(world, APPROVER_1, replace(ask, reason="again"))
    with pytest.raises(Refused, match="the kind must be one of"):
        record_exception(world, APPROVER_1, replace(ask, id="X-2", kind="root-access"))
    with pytest.raises(NotFound, match="no release named rel-z"):
        record_exception(world, APPROVER_1, replace(ask, id="X-3", target="rel-z"))
    assert [e.id for e in list_exceptions(world, REQUESTER)] == ["SEC-EXC-2026-0142"]
    world.clock.advance(dt.timedelta(days=91))
    assert list_exceptions(world, REQUESTER) == []
    assert [e.id for e in list_exceptions(world, REQUESTER, include_expired=True)] == ["SEC-EXC-2026-0142"]


def test_slack_records_a_licence_review_and_lists_exceptions(world) -> None:
    bench = start_bench(world)
    try:
        text = (f"licence review kimi-prod version={VERSION} class=internal third-party=no maas-over-20m=no "
                f"\"attribution=none: internal use\" expires={LATER:%Y-%m-%d}")
        assert bench.slash("U0DEPLOYER", text).status_code == 200
        assert "approver role" in bench.replies_to("requester")[0].text
        assert bench.slash("U0APPROVER1", text).status_code == 200
        assert "Licence review #1 recorded for *kimi-prod*" in bench.replies_to("requester", 2)[-1].text
        record_exception(world, APPROVER_1, ExceptionRequest(
            id="SEC-EXC-2026-0142", kind="trust-remote-code", scope="endpoint", target="kimi-prod",
            reason="repo code reviewed", expires_at=LATER))
        assert bench.slash("U0DEPLOYER", "exceptions").status_code == 200
        listed = blocks_text(bench.replies_to("requester", 3)[-1].blocks)
        assert "SEC-EXC-2026-0142" in listed and "trust-remote-code" in listed and "endpoint kimi-prod" in listed
    finally:
        stop_bench(bench)


def test_cli_records_and_lists_reviews_and_exceptions(world, db_url, tmp_path, monkeypatch) -> None:
    import json

    from typer.testing import CliRunner

    from bot.cli import output
    from bot.cli.main import app

    monkeypatch.setenv("KIMI_DATABASE_URL", db_url)
    monkeypatch.setenv("KIMI_DATA_DIR", str(tmp_path / "cli"))
    monkeypatch.setenv("KIMI_ENDPOINTS", json.dumps([endpoint_config()]))
    monkeypatch.setenv("KIMI_ROLES", json.dumps(ROLES))
    monkeypatch.setattr(output.stdout, "width", 250)  # the tables unwrapped, whenever the console was made
    runner = CliRunner()
    base = ["licence", "review", "kimi-prod", "--licence-version", VERSION, "--classification", "internal",
            "--no-third-party", "--maas-under-20m", "--attribution", "none: internal use"]
    # The CLI's clock is the real one: expiries are relative to today.
    expires = f"{dt.datetime.now(dt.UTC) + dt.timedelta(days=30):%Y-%m-%d}"
    refused = runner.invoke(app, [*base, "--expires", expires, "--as", "U0DEPLOYER"])
    assert refused.exit_code != 0 and "approver role" in refused.output
    bad_date = runner.invoke(app, [*base, "--expires", "next week", "--as", "U0APPROVER1"])
    assert bad_date.exit_code != 0 and "is not a date; write YYYY-MM-DD" in bad_date.output
    ok = runner.invoke(app, [*base, "--expires", expires, "--as", "U0APPROVER1"])
    assert ok.exit_code == 0, ok.output
    assert "licence review #1 recorded for kimi-prod" in ok.output
    added = runner.invoke(app, ["exception", "add", "SEC-EXC-2026-0142", "--kind", "trust-remote-code", "--release",
                                "rel-a", "--reason", "reviewed", "--expires", expires, "--as", "U0APPROVER1"])
    assert added.exit_code == 0, added.output
    listed = runner.invoke(app, ["exception", "list", "--as", "U0DEPLOYER"])
    assert "SEC-EXC-2026-0142" in listed.output and "release rel-a" in listed.output
    assert "U0APPROVER1" in runner.invoke(app, ["licence", "list", "--as", "U0DEPLOYER"]).output
