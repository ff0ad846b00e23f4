"""The artifact gate's checks of what S3 holds, against moto's S3 over HTTP: the weights object by object, the bucket's
posture (versioning, public access block, encryption, logging, a policy that limits reads to the inference role)
and the licence document. Each passes on a good release and fails on its own when its one rule is broken.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from bot.domain import artifact_checks as rules
from bot.services.artifact_gate import run_artifact_checks
from tests.artifact_support import ROLE, Seeded, by_name, not_passing


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
