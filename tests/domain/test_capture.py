"""Data capture (the endpoint's policy, its HyperPod render and the infrastructure gate's rule) and the release's own
evaluation report shown at the model gate."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from bot.adapters.cluster.render import render_objects
from bot.config import EndpointSettings
from bot.domain.capture import DataCapture, capture_check
from bot.domain.governance import ArtifactPolicy, SecurityException
from bot.domain.release_report import PassRate, pass_rate_of, release_report_check
from tests.artifact_support import example_manifest
from tests.conftest import START

PAYLOADS = {"payloads": True, "sampling_percent": 2, "max_payload_kb": 64, "kms_key_id": "alias/kimi-capture",
            "retention_days": 30, "s3_uri": "s3://acme-capture/kimi"}
EXCEPTION = SecurityException(id="SEC-CAP-1", kind="payload-capture", scope="endpoint", target="kimi-prod",
                              reviewer="U0APPROVER1", reason="support needs sampled transcripts",
                              expires_at=START + dt.timedelta(days=30), recorded_at=START)
WITH_EXCEPTION = ArtifactPolicy(endpoint="kimi-prod", exceptions=(EXCEPTION,), now=START)


def _iec(capture: dict) -> dict:
    endpoint = EndpointSettings(name="kimi-prod", data_capture=capture)
    return next(o for o in render_objects(example_manifest(), endpoint, "0" * 64) if o["kind"] == "InferenceEndpointConfig")


def test_hyperpod_renders_access_logs_only_by_default_and_the_model_pod_tier_for_payloads() -> None:
    default = _iec({})
    assert default["spec"]["dataCapture"] == {"loadBalancer": {"enabled": True}}
    assert json.loads(default["metadata"]["annotations"]["kimi-ops.io/data-capture"])["payloads"] is False
    pod = _iec(PAYLOADS)["spec"]["dataCapture"]
    assert pod["s3Uri"] == "s3://acme-capture/kimi" and pod["modelPod"]["initialSamplingPercentage"] == 2
    assert pod["modelPod"]["payloadConfig"] == {"maxPayloadSizeKB": 64} and pod["modelPod"]["kmsKeyId"] == "alias/kimi-capture"


def test_the_eks_path_states_that_it_captures_no_payloads() -> None:
    endpoint = EndpointSettings(name="kimi-prod", kind="eks")
    objects = render_objects(example_manifest(), endpoint, "0" * 64)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    stated = json.loads(deployment["metadata"]["annotations"]["kimi-ops.io/data-capture"])
    assert stated["payloads"] is False and "status" in stated["metadata"]
    assert capture_check(DataCapture(), "eks", 5, ArtifactPolicy()).status == "pass"
    assert capture_check(DataCapture(**PAYLOADS), "eks", 5, WITH_EXCEPTION).status == "fail"


@pytest.mark.parametrize(("changes", "policy", "words"), [
    ({}, WITH_EXCEPTION, None),
    ({}, ArtifactPolicy(endpoint="kimi-prod", now=START), "payload-capture security exception"),
    ({"sampling_percent": 20}, WITH_EXCEPTION, "ceiling of 5%"),
    ({"max_payload_kb": 0}, WITH_EXCEPTION, "max_payload_kb"),
    ({"kms_key_id": None}, WITH_EXCEPTION, "kms_key_id"),
    ({"retention_days": None}, WITH_EXCEPTION, "retention_days"),
    ({}, ArtifactPolicy(endpoint="kimi-prod", exceptions=(EXCEPTION,), now=START + dt.timedelta(days=31)), "expired"),
])
def test_payload_capture_needs_every_safeguard(changes: dict, policy: ArtifactPolicy, words: str | None) -> None:
    check = capture_check(DataCapture(**{**PAYLOADS, **changes}), "hyperpod", 5, policy)
    if words is None:
        assert check.status == "pass" and "allowed by security exception SEC-CAP-1" in check.reason
    else:
        assert check.status == "fail" and words in check.reason


def test_metadata_only_capture_passes_on_hyperpod() -> None:
    check = capture_check(DataCapture(), "hyperpod", 5, ArtifactPolicy())
    assert check.status == "pass" and "no payloads" in check.reason


@pytest.mark.parametrize(("document", "rate"), [
    (b'{"cases": 15, "passed": 14}', 14 / 15),
    (b'{"summary": {"cases": 10, "passed": 10}}', 1.0),
    (b'{"pass_rate": 0.9}', 0.9),
    (b'{"cases": [{"passed": true}, {"passed": false}]}', 0.5),
    (b'{"attachments": {"evaluation": {"summary": {"cases": 4, "passed": 3}}}}', 0.75),
    (b"not json", None),
    (b'{"pass_rate": 7}', None),
    (b"[]", None),
])
def test_release_reports_in_understood_shapes(document: bytes, rate: float | None) -> None:
    found = pass_rate_of(document)
    assert (found.rate if found else None) == rate


def test_the_release_report_is_shown_beside_the_fresh_run_and_never_blocks() -> None:
    fresh = PassRate(15, 15, 1.0)
    shown = release_report_check("s3://b/r.json", b'{"cases": 15, "passed": 14}', None, fresh)
    assert shown.status == "pass"
    assert shown.reason == ("release's evaluation report (s3://b/r.json): 14/15 cases passed, 93%; "
                            "this run: 15/15 cases passed, 100%")
    assert release_report_check(None, None, None, fresh).status == "warn"
    unread = release_report_check("s3://b/r.json", None, "NoSuchKey", fresh)
    assert unread.status == "warn" and "could not be read (NoSuchKey)" in unread.reason
