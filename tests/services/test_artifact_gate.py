"""The artifact gate's checks against moto's S3 and ECR over HTTP: each check passes on a good release
and fails on its own when its one rule is broken; AWS that cannot answer is an error, never a pass."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bot.cli.main import app
from bot.config import EndpointSettings
from bot.domain import artifact_checks as rules
from bot.domain.checks import Check
from bot.domain.governance import SecurityException
from bot.sandbox import set_scan_findings
from bot.sandbox.aws import seed_image
from bot.sandbox.governance import seed_governance
from bot.services.artifact_gate import run_artifact_checks, verify_release
from bot.services.context import Context
from bot.services.errors import NotFound
from bot.services.releases import register_release
from tests.artifact_support import NOW, Seeded, not_passing
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


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


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


# --- image ---------------------------------------------------------------------------------------------------


def test_tag_only_image_fails_as_ambiguous_rollback(seeded: Seeded) -> None:
    tagged = seeded.release.image.split("@")[0] + ":kimi-k3"
    checks = seeded.verify(seeded.variant(image=tagged))
    assert not_passing(checks) == {"image.pinned": "fail", "image.exists": "fail"}
    assert "a floating tag makes rollback ambiguous" in by_name(checks)["image.pinned"].reason


def test_digest_missing_from_ecr_fails(seeded: Seeded) -> None:
    other = seeded.release.image.split("@sha256:")[0] + "@sha256:" + "ab" * 32
    checks = seeded.verify(seeded.variant(image=other))
    assert not_passing(checks) == {"image.exists": "fail"}
    assert "does not exist in ECR repository vllm-openai" in by_name(checks)["image.exists"].reason


def test_critical_scan_finding_fails(seeded: Seeded) -> None:
    set_scan_findings(seeded.moto, seeded.release.image, {"CRITICAL": 2, "HIGH": 5})
    checks = seeded.verify()
    assert not_passing(checks) == {"image.scan": "fail"}
    assert "2 CRITICAL" in by_name(checks)["image.scan"].reason


def test_scan_without_critical_findings_passes(seeded: Seeded) -> None:
    set_scan_findings(seeded.moto, seeded.release.image, {"HIGH": 1, "MEDIUM": 4})
    checks = seeded.verify()
    assert not_passing(checks) == {}
    assert by_name(checks)["image.scan"].reason == "no CRITICAL scan findings (HIGH 1, MEDIUM 4)"


def test_image_without_recorded_provenance_fails_and_the_gate_shows_it_when_recorded(seeded: Seeded) -> None:
    shown = by_name(seeded.verify())["image.provenance"]
    assert shown.status == "pass" and "CUDA 12.9.1 · driver >=575.57 · vLLM 6b2f8e1d4c7a" in shown.reason
    checks = seeded.verify(seeded.variant(provenance=None))
    assert not_passing(checks) == {"image.provenance": "fail"}
    assert "base_image, cuda, driver and vllm_commit" in by_name(checks)["image.provenance"].reason
    # A tuple registered before provenance was recorded keeps its hash.
    bare = seeded.release.model_copy(update={"provenance": None})
    assert "provenance" not in bare.tuple_dict() and bare.tuple_hash() != seeded.release.tuple_hash()


def test_image_outside_ecr_is_neither_looked_up_nor_scanned(seeded: Seeded) -> None:
    hub = seeded.variant(image="docker.io/vllm/vllm-openai@sha256:" + "cd" * 32)
    checks = seeded.verify(hub)
    assert not_passing(checks) == {"image.exists": "warn", "image.scan": "fail"}
    assert "kimi-ops reads no scan of this image" in by_name(checks)["image.scan"].reason


def test_image_without_a_completed_scan_fails_unless_an_exception_allows_it(seeded: Seeded) -> None:
    unscanned = seeded.release.image.split("@sha256:")[0] + "@sha256:" + "ef" * 32
    seed_image(seeded.ecr, unscanned, "unscanned", scan=False)
    release = seeded.variant(image=unscanned)
    checks = seeded.verify(release)
    assert not_passing(checks) == {"image.scan": "fail"}
    assert "no scan exists for this digest" in by_name(checks)["image.scan"].reason
    exception = SecurityException(
        id="SEC-EXC-IMG-1", kind="unscanned-image", scope="release", target=release.name, reviewer="U0APPROVER1",
        reason="scanner outage; image rebuilt from reviewed inputs", expires_at=NOW + dt.timedelta(days=7), recorded_at=NOW)
    allowed = seeded.verify(release, exceptions=(*seeded.policy().exceptions, exception))
    assert not_passing(allowed) == {}
    assert "allowed by security exception SEC-EXC-IMG-1" in by_name(allowed)["image.scan"].reason
    expired = seeded.verify(release, exceptions=(*seeded.policy().exceptions, exception), now=NOW + dt.timedelta(days=8))
    assert not_passing(expired) == {"image.scan": "fail"} and "expired" in by_name(expired)["image.scan"].reason


# --- model, serving ---------------------------------------------------------------------------------------------


def test_short_model_commit_fails(seeded: Seeded) -> None:
    model = seeded.release.model.model_construct(repo="moonshotai/Kimi-K3", commit="3f7c2a9")
    assert not_passing(seeded.verify(seeded.variant(model=model))) == {"model.commit": "fail"}


@pytest.mark.parametrize("size", ["3", "0", "eight", "4", "16"])
def test_tensor_parallel_size_must_be_the_nodes_eight_gpus(seeded: Seeded, size: str) -> None:
    args = list(seeded.release.serving.args)
    args[args.index("--tensor-parallel-size") + 1] = size
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)))
    assert not_passing(checks) == {"serving.tensor_parallel": "fail"}


def test_missing_tensor_parallel_size_fails(seeded: Seeded) -> None:
    args = list(seeded.release.serving.args)
    i = args.index("--tensor-parallel-size")
    del args[i : i + 2]
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)))
    assert not_passing(checks) == {"serving.tensor_parallel": "fail"}
    assert "add --tensor-parallel-size 8" in by_name(checks)["serving.tensor_parallel"].reason


@pytest.mark.parametrize(
    ("head", "fix"),
    [(["--model", "/opt/ml/model"], "positional"), ([], "first serving arg")],
)
def test_model_path_must_be_the_positional_argument(seeded: Seeded, head: list[str], fix: str) -> None:
    args = [*head, *seeded.release.serving.args[1:]]
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)))
    assert not_passing(checks) == {"serving.model": "fail"}
    assert fix in by_name(checks)["serving.model"].reason


@pytest.mark.parametrize(
    ("value", "ceiling", "status"),
    [(None, 262_144, "fail"), ("300000", 262_144, "fail"), ("1m", 262_144, "fail"), ("128k", 262_144, "pass"),
     ("262144", 262_144, "pass"), ("262144", 131_072, "fail"), ("262144", None, "fail"), ("lots", 262_144, "fail")],
)
def test_max_model_len_is_required_within_the_endpoints_ceiling(
    seeded: Seeded, value: str | None, ceiling: int | None, status: str,
) -> None:
    args = list(seeded.release.serving.args)
    i = args.index("--max-model-len")
    del args[i : i + 2]
    if value is not None:
        args += ["--max-model-len", value]
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)), max_model_len=ceiling)
    assert not_passing(checks) == ({} if status == "pass" else {"serving.max_model_len": "fail"})


def test_missing_served_model_name_fails(seeded: Seeded) -> None:
    args = list(seeded.release.serving.args)
    i = args.index("--served-model-name")
    del args[i : i + 2]
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)))
    assert not_passing(checks) == {"serving.served_model_name": "fail"}


def test_trust_remote_code_without_security_exception_fails(seeded: Seeded) -> None:
    checks = seeded.verify(seeded.variant(trust_remote_code_exception=None))
    assert not_passing(checks) == {"serving.trust_remote_code": "fail"}
    assert "trust_remote_code_exception" in by_name(checks)["serving.trust_remote_code"].reason


SECRET = "sk-live-7f3a9b2c4d5e6f708192a3b4c5d6e7f8"


@pytest.mark.parametrize(
    ("extra_args", "env", "where"),
    [
        (["--api-key", SECRET], {}, "args --api-key"),
        (["--hf-token", "hf_" + "r" * 34], {}, "args --hf-token"),
        ([f"--api-key={SECRET}"], {}, "args --api-key"),
        ([], {"HF_TOKEN": "hf_" + "q" * 34}, "env HF_TOKEN"),
        ([], {"DATABASE_PASSWORD": "hunter2-but-longer"}, "env DATABASE_PASSWORD"),
        ([], {"SOME_SETTING": SECRET}, "env SOME_SETTING"),
    ],
)
def test_secret_in_args_or_env_fails_without_echoing_it(
    seeded: Seeded, extra_args: list[str], env: dict[str, str], where: str,
) -> None:
    serving = seeded.serving(args=[*seeded.release.serving.args, *extra_args], env={**seeded.release.serving.env, **env})
    report = run_artifact_checks(seeded.verifier(), seeded.variant(serving=serving), seeded.policy())
    assert not_passing(report.checks) == {"serving.no_secrets": "fail"}
    check = by_name(report.checks)["serving.no_secrets"]
    assert where in check.reason
    dumped = json.dumps(report.model_dump(mode="json"))
    for value in [SECRET, *env.values(), *(a for a in extra_args if not a.startswith("-"))]:
        assert value not in dumped


def test_secret_references_and_lookalike_names_are_not_secrets(seeded: Seeded) -> None:
    env = {
        "HF_TOKEN": "${HF_TOKEN}", "API_KEY": "arn:aws:secretsmanager:us-east-1:123456789012:secret:vllm-key", "EMPTY_SECRET": "",
        "VLLM_MAX_TOKENS": "4096", "HF_TOKEN_PATH": "/var/run/secrets/hf/token",
    }
    args = [*seeded.release.serving.args,
            "--tokenizer", "/opt/ml/model", "--max-num-batched-tokens", "8192", "--task", "generate"]
    serving = seeded.serving(args=args, env={**seeded.release.serving.env, **env})
    checks = seeded.verify(seeded.variant(serving=serving))
    assert not_passing(checks) == {}


# --- weights ---------------------------------------------------------------------------------------------------


def test_missing_object_fails(seeded: Seeded) -> None:
    seeded.s3.delete_object(Bucket=seeded.bucket, Key=seeded.prefix + "config.json")
    checks = seeded.verify()
    assert not_passing(checks) == {"weights.objects": "fail"}
    assert by_name(checks)["weights.objects"].details["missing"] == ["config.json"]


def test_object_of_another_size_fails(seeded: Seeded) -> None:
    seeded.s3.put_object(Bucket=seeded.bucket, Key=seeded.prefix + "tokenizer_config.json", Body=b"{}")
    checks = seeded.verify()
    assert not_passing(checks) == {"weights.objects": "fail"}
    assert by_name(checks)["weights.objects"].details["size_mismatch"] == ["tokenizer_config.json"]


@pytest.mark.parametrize(("key", "checksum"), [("model-00001-of-00002.safetensors", True), ("config.json", False)])
def test_same_size_other_bytes_fail_on_sha256(seeded: Seeded, key: str, checksum: bool) -> None:
    original = next(o for o in seeded.release.weights.objects if o.key == key)
    tampered = b"X" * original.size
    extra = {"ChecksumAlgorithm": "SHA256"} if checksum else {}
    seeded.s3.put_object(Bucket=seeded.bucket, Key=seeded.prefix + key, Body=tampered, **extra)
    checks = seeded.verify()
    assert not_passing(checks) == {"weights.objects": "fail"}
    assert by_name(checks)["weights.objects"].details["sha256_mismatch"] == [key]


def test_extra_object_under_prefix_warns_but_does_not_block(seeded: Seeded) -> None:
    seeded.s3.put_object(Bucket=seeded.bucket, Key=seeded.prefix + "notes/README.md", Body=b"mirror notes")
    report = run_artifact_checks(seeded.verifier(), seeded.release, seeded.policy())
    assert not_passing(report.checks) == {"weights.extra": "warn"}
    assert "notes/README.md" in by_name(report.checks)["weights.extra"].reason
    assert report.approvable and report.status == "warn"


def test_verify_weights_runs_only_the_object_checks(seeded: Seeded) -> None:
    checks = seeded.verifier().verify_weights(seeded.release)
    assert [c.name for c in checks] == ["weights.objects", "weights.extra"]
    assert not_passing(checks) == {}


def test_large_streamed_object_is_read_in_bounded_chunks(seeded: Seeded) -> None:
    body = os.urandom(300_000)
    seeded.s3.put_object(Bucket=seeded.bucket, Key=seeded.prefix + "config.json", Body=body)
    objects = [
        o.model_copy(update={"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}) if o.key == "config.json" else o
        for o in seeded.release.weights.objects
    ]
    release = seeded.variant(weights=seeded.release.weights.model_copy(update={"objects": objects}))
    checks = seeded.verifier(chunk_size=64 * 1024).verify_weights(release)
    assert not_passing(checks) == {}
    steps = [done for key, done, _ in seeded.progress if key.endswith("/config.json")]
    assert steps == [65536, 131072, 196608, 262144, 300000]


# --- bucket posture ----------------------------------------------------------------------------------------------


def test_suspended_versioning_fails(seeded: Seeded) -> None:
    seeded.s3.put_bucket_versioning(Bucket=seeded.bucket, VersioningConfiguration={"Status": "Suspended"})
    checks = seeded.verify()
    assert not_passing(checks) == {"bucket.versioning": "fail"}


@pytest.mark.parametrize("flag", rules.BPA_FLAGS)
def test_each_block_public_access_flag_is_required(seeded: Seeded, flag: str) -> None:
    seeded.s3.put_public_access_block(
        Bucket=seeded.bucket, PublicAccessBlockConfiguration={f: f != flag for f in rules.BPA_FLAGS}
    )
    checks = seeded.verify()
    assert not_passing(checks) == {"bucket.public_access_block": "fail"}
    assert by_name(checks)["bucket.public_access_block"].details["off"] == [flag]


def test_no_public_access_block_at_all_fails(seeded: Seeded) -> None:
    seeded.s3.delete_public_access_block(Bucket=seeded.bucket)
    assert not_passing(seeded.verify()) == {"bucket.public_access_block": "fail"}


def test_missing_default_encryption_fails(seeded: Seeded) -> None:
    seeded.s3.delete_bucket_encryption(Bucket=seeded.bucket)
    assert not_passing(seeded.verify()) == {"bucket.encryption": "fail"}


def test_missing_access_logging_fails(seeded: Seeded) -> None:
    seeded.s3.put_bucket_logging(Bucket=seeded.bucket, BucketLoggingStatus={})
    assert not_passing(seeded.verify()) == {"bucket.logging": "fail"}


def _policy(bucket: str, principal: object, condition: dict | None = None) -> str:
    statement = {"Sid": "Read", "Effect": "Allow", "Principal": principal, "Action": "s3:GetObject",
                 "Resource": f"arn:aws:s3:::{bucket}/*"}
    if condition:
        statement["Condition"] = condition
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


ROLE = "arn:aws:iam::123456789012:role/kimi-k3-inference"
OTHER = "arn:aws:iam::123456789012:role/data-science"


@pytest.mark.parametrize(
    ("principal", "condition", "expected"),
    [
        ("*", None, {"bucket.policy": "fail"}),
        ({"AWS": "*"}, None, {"bucket.policy": "fail"}),
        ("*", {"StringEquals": {"aws:SourceVpce": "vpce-0abc"}}, {"bucket.policy": "fail"}),
        ({"AWS": [ROLE, OTHER]}, None, {"bucket.policy": "fail"}),
        ({"AWS": "arn:aws:iam::123456789012:root"}, None, {"bucket.policy": "fail"}),
        ({"AWS": OTHER}, None, {"bucket.policy": "fail"}),
        ({"AWS": ROLE}, None, {}),
    ],
)
def test_bucket_policy_must_limit_reads_to_the_inference_role(
    seeded: Seeded, principal: object, condition: dict | None, expected: dict,
) -> None:
    seeded.s3.put_bucket_policy(Bucket=seeded.bucket, Policy=_policy(seeded.bucket, principal, condition))
    assert not_passing(seeded.verify()) == expected


def test_deny_to_everyone_but_the_inference_role_limits_reads() -> None:
    # A pure rule: moto enforces such a policy, and the stand-in's dummy credentials are not the role.
    deny = {"Sid": "OnlyInference", "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::b/*", "Condition": {"ArnNotEquals": {"aws:PrincipalArn": ROLE}}}
    policy = json.dumps({"Version": "2012-10-17", "Statement": [deny]})
    assert rules.bucket_policy_check("b", policy, [ROLE]).status == "pass"
    assert rules.bucket_policy_check("b", policy, [ROLE, OTHER]).status == "fail"


def test_missing_bucket_policy_fails_naming_the_fix(seeded: Seeded) -> None:
    seeded.s3.delete_bucket_policy(Bucket=seeded.bucket)
    checks = seeded.verify()
    assert not_passing(checks) == {"bucket.policy": "fail"}
    assert f"add one allowing s3:GetObject only to {ROLE}" in by_name(checks)["bucket.policy"].reason


def test_endpoint_without_inference_roles_fails_the_bucket_policy(seeded: Seeded) -> None:
    checks = seeded.verify(inference_roles=())
    assert not_passing(checks) == {"bucket.policy": "fail"}
    assert "endpoints[].inference_roles" in by_name(checks)["bucket.policy"].reason


# --- licence ---------------------------------------------------------------------------------------------------


def test_changed_licence_document_fails(seeded: Seeded) -> None:
    bucket, key = seeded.release.licence.document.removeprefix("s3://").split("/", 1)
    seeded.s3.put_object(Bucket=bucket, Key=key, Body=b"Kimi K3 licence, revised after review\n")
    checks = seeded.verify()
    assert not_passing(checks) == {"licence.sha256": "fail"}
    assert "changed since review" in by_name(checks)["licence.sha256"].reason


def test_missing_licence_document_fails(seeded: Seeded) -> None:
    bucket, key = seeded.release.licence.document.removeprefix("s3://").split("/", 1)
    seeded.s3.delete_object(Bucket=bucket, Key=key)
    assert not_passing(seeded.verify()) == {"licence.sha256": "fail"}


# --- AWS that cannot answer ---------------------------------------------------------------------------------------


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


# --- CLI ---------------------------------------------------------------------------------------------------------


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
