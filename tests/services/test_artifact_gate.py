"""The artifact gate as a whole against moto's S3 and ECR over HTTP: a good release passes every check, `release verify`
stores nothing, AWS that cannot answer is an error (never a pass), and the CLI's report. The checks one by one:
``test_artifact_gate_release.py`` (what the tuple says) and ``test_artifact_gate_s3.py`` (what S3 holds).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bot.cli.main import app
from bot.config import EndpointSettings
from bot.domain import artifact_checks as rules
from bot.domain.checks import Check
from bot.sandbox.governance import seed_governance
from bot.services.artifact_gate import run_artifact_checks, verify_release
from bot.services.context import Context
from bot.services.errors import NotFound
from bot.services.releases import register_release
from tests.artifact_support import ROLE, Seeded, by_name, not_passing
from tests.conftest import with_ports
from tests.workflow_support import endpoint_config

ALL_CHECKS = {
    "image.pinned", "image.provenance", "image.exists", "image.scan", "model.commit",
    "serving.tensor_parallel", "serving.model", "serving.max_model_len", "serving.served_model_name",
    "serving.trust_remote_code", "serving.no_secrets",
    "weights.objects", "weights.extra",
    "bucket.versioning", "bucket.public_access_block", "bucket.encryption", "bucket.logging", "bucket.policy",
    "licence.sha256", "licence.review",
}

ENDPOINT = endpoint_config()


def test_good_release_passes_every_check(seeded: Seeded) -> None:
    report = run_artifact_checks(seeded.verifier(), seeded.release, seeded.policy())
    assert {c.name for c in report.checks} == ALL_CHECKS
    assert not_passing(report.checks) == {}
    assert report.gate == "artifact" and report.approvable and report.status == "pass"
    assert report.summary.endswith("20 pass, 0 warn, 0 fail, 0 error")
    # Shards carry S3 SHA-256 checksums and are not downloaded; the small files and the licence have none and are streamed.
    streamed = {key.rsplit("/", 1)[-1] for key, _, _ in seeded.progress}
    assert streamed == {"config.json", "tokenizer_config.json", "kimi-k3-license-2026-07-27.pdf"}


def test_verify_release_reads_the_registered_tuple_and_stores_nothing(seeded: Seeded, make_ctx) -> None:
    ctx = make_ctx(endpoints=[ENDPOINT])
    register_release(ctx, seeded.release.model_dump(mode="json"), actor="U1")
    seed_governance(ctx, [seeded.release], ctx.settings.endpoints)
    ctx = with_ports(ctx, artifacts=seeded.verifier())
    with ctx.uow() as uow:
        audit_before = len(uow.audit.list(limit=1000))
    report = verify_release(ctx, seeded.release.name)
    assert report.approvable and {c.name for c in report.checks} == ALL_CHECKS
    with ctx.uow() as uow:
        assert len(uow.audit.list(limit=1000)) == audit_before
    with pytest.raises(NotFound):
        verify_release(ctx, "no-such-release")


@pytest.mark.own_moto
def test_s3_going_down_mid_check_is_an_error_never_a_pass(seeded: Seeded, ctx: Context) -> None:
    def stop_server(**_: object) -> None:
        seeded.moto.stop()

    register_release(ctx, seeded.release.model_dump(mode="json"), actor="U1")
    ctx = with_ports(ctx, artifacts=seeded.verifier())
    with ctx.uow() as uow:
        audit_before = [a.action for a in uow.audit.list(limit=1000)]
    # The weights are read, then the server goes away just before the bucket settings are asked for.
    seeded.s3.meta.events.register_first("before-call.s3.GetBucketVersioning", stop_server)
    report = verify_release(ctx, seeded.release.name)
    with ctx.uow() as uow:
        assert [a.action for a in uow.audit.list(limit=1000)] == audit_before  # verifying stores nothing, even half-way
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["weights.objects"] == "pass"
    assert statuses["bucket.posture"] == "error" and statuses["licence.sha256"] == "error"
    assert not any(name.startswith("bucket.") and status == "pass" for name, status in statuses.items())
    assert not report.approvable and report.status == "error"


@pytest.mark.own_moto
def test_closed_port_turns_every_aws_check_into_an_error(seeded: Seeded) -> None:
    seeded.moto.stop()
    report = run_artifact_checks(seeded.verifier(), seeded.release, seeded.policy())
    assert not_passing(report.checks) == {
        "image.exists": "error", "weights.objects": "error", "bucket.posture": "error", "licence.sha256": "error",
    }
    assert "cannot reach S3 at http://127.0.0.1:" in by_name(report.checks)["weights.objects"].reason
    assert "(could not connect)" in by_name(report.checks)["weights.objects"].reason
    assert "cannot reach ECR at " in by_name(report.checks)["image.exists"].reason


def test_verifier_that_raises_or_returns_nothing_is_an_error(seeded: Seeded) -> None:
    class Broken:
        def verify(self, release: object, policy: object = None) -> list[Check]:
            raise RuntimeError("credentials expired")

        def verify_weights(self, release: object) -> list[Check]:
            return []

    class Silent(Broken):
        def verify(self, release: object, policy: object = None) -> list[Check]:
            return []

    broken = run_artifact_checks(Broken(), seeded.release)
    assert [(c.name, c.status) for c in broken.checks] == [("artifact.aws", "error")]
    assert "credentials expired" in broken.checks[0].reason
    assert not run_artifact_checks(Silent(), seeded.release).approvable


def _cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, db_url: str, moto_url: str) -> None:
    monkeypatch.delenv("KIMI_CONFIG", raising=False)
    monkeypatch.setenv("KIMI_DATABASE_URL", db_url)
    monkeypatch.setenv("KIMI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("KIMI_ENDPOINTS", json.dumps([ENDPOINT]))


def test_cli_verify_prints_the_report_and_exits_non_zero_when_blocked(
    seeded: Seeded, db_url: str, make_ctx, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cli_env(monkeypatch, tmp_path, db_url, seeded.moto.url)
    manifest = tmp_path / "release.yaml"
    manifest.write_text(yaml.safe_dump(seeded.release.model_dump(mode="json")))
    runner = CliRunner()
    assert runner.invoke(app, ["release", "register", str(manifest)]).exit_code == 0
    seed_governance(make_ctx(endpoints=[ENDPOINT]), [seeded.release], [EndpointSettings(**ENDPOINT)])

    ok = runner.invoke(app, ["release", "verify", seeded.release.name])
    assert ok.exit_code == 0, ok.output
    assert "bucket.public_access_block" in ok.output and "20 pass, 0 warn, 0 fail, 0 error" in ok.output

    seeded.s3.put_bucket_versioning(Bucket=seeded.bucket, VersioningConfiguration={"Status": "Suspended"})
    blocked = runner.invoke(app, ["release", "verify", seeded.release.name])
    assert blocked.exit_code == 1
    assert "block the artifact gate: bucket.versioning" in blocked.output


def test_pure_rules_parse_images_and_policies() -> None:
    ecr = rules.parse_image("123456789012.dkr.ecr.us-west-2.amazonaws.com/team/vllm:kimi@sha256:" + "a" * 64)
    assert (ecr.ecr_account, ecr.ecr_region, ecr.ecr_repository, ecr.digest) == (
        "123456789012", "us-west-2", "team/vllm", "sha256:" + "a" * 64)
    hub = rules.parse_image("vllm/vllm-openai:kimi-k3")
    assert not hub.is_ecr and hub.digest is None
    policy = json.dumps({"Statement": {"Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:List*"]}})
    assert rules.public_read_statements(policy) == (["#0"], [])
    deny = json.dumps({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:*",
                                      "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]})
    assert rules.public_read_statements(deny) == ([], [])
    assert rules.bucket_checks(rules.BucketPosture(bucket="b", policy="{not json"), [ROLE])[-1].status == "error"
