"""The bot's IAM policy (``deploy/bot/iam-policy.json``): exactly the AWS calls the bot makes, scoped.

The expected actions are read from the code (:func:`expected_iam_actions`), so a new boto3
call fails a test until the policy grants it, and broadening the policy fails one until the code uses it.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from typing import Any

import yaml

from bot.domain.release import ReleaseManifest
from tests.deploy_support import BOT, REPO

# S3 operations whose IAM action is not named after the operation (AWS's Service Authorization Reference for S3).
S3_ACTION_OF = {"ListObjectsV2": "ListBucket", "HeadObject": "GetObject", "GetPublicAccessBlock": "GetBucketPublicAccessBlock",
                "GetBucketEncryption": "GetEncryptionConfiguration"}
# Granted without a call of the bot's own: S3 asks KMS to decrypt SSE-KMS objects on the caller's behalf.
IMPLIED_IAM_ACTIONS = {"kms:Decrypt"}


def boto3_calls() -> dict[str, set[str]]:
    """Every boto3 client method called in bot/adapters/aws, as ``service → {OperationName}``, read from the code.

    A module's services are the ones it names when it makes a client (``client("s3", …)``); a method name is
    an operation of whichever of those services has it (``describe_images`` is ECR's beside S3, EC2's elsewhere);
    a paginator counts as its operation.
    """
    import boto3

    session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    models: dict[str, dict[str, str]] = {}
    calls: dict[str, set[str]] = {}
    for path in sorted((REPO / "bot" / "adapters" / "aws").glob("*.py")):
        tree = ast.parse(path.read_text())
        services = {node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value in ("s3", "ecr", "ec2", "sagemaker")
                    and isinstance(node.func, (ast.Attribute, ast.Name))
                    and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id).endswith("client")}
        for service in services:
            models.setdefault(service, session.client(service).meta.method_to_api_mapping)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            if method == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                method = str(node.args[0].value)
            for service in services:
                operation = models[service].get(method)
                if operation is not None:
                    calls.setdefault(service, set()).add(operation)
    return calls


def expected_iam_actions() -> set[str]:
    actions = set(IMPLIED_IAM_ACTIONS)
    for service, operations in boto3_calls().items():
        actions |= {f"{service}:{S3_ACTION_OF.get(op, op) if service == 's3' else op}" for op in operations}
    return actions


# These two actions have no resource-level permissions (the Service Authorization Reference lists no resource
# type for them), so IAM requires "Resource": "*"; their statements are narrowed by region instead.
STAR_RESOURCE_ACTIONS = {"ec2:DescribeCapacityReservations", "sagemaker:ListTrainingPlans"}


def _statements() -> list[dict[str, Any]]:
    policy = json.loads((BOT / "iam-policy.json").read_text())
    assert policy["Version"] == "2012-10-17"
    return policy["Statement"]


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def test_iam_policy_grants_exactly_the_calls_the_bot_makes() -> None:
    statements = _statements()
    sids = [s["Sid"] for s in statements]
    assert len(set(sids)) == len(sids) and all(re.fullmatch(r"[A-Za-z0-9]+", sid) for sid in sids)
    actions = [a for s in statements for a in _as_list(s["Action"])]
    assert all(s["Effect"] == "Allow" and "NotAction" not in s and "NotResource" not in s for s in statements)
    assert not [a for a in actions if "*" in a], "wildcard actions"
    # Derived from the code: a call added without its grant fails here, and so does a grant no code uses.
    expected = expected_iam_actions()
    assert {"s3:GetObject", "s3:ListBucket", "ecr:DescribeImages", "ec2:DescribeCapacityReservations"} <= expected
    assert set(actions) == expected, (set(actions) - expected, expected - set(actions))


def test_iam_resources_are_scoped_except_where_aws_requires_a_star() -> None:
    for statement in _statements():
        resources = _as_list(statement["Resource"])
        if "*" in resources:
            assert set(_as_list(statement["Action"])) <= STAR_RESOURCE_ACTIONS, f"{statement['Sid']}: Resource * not required"
            assert statement["Condition"]["StringEquals"]["aws:RequestedRegion"], statement["Sid"]
        for resource in resources:
            if resource != "*":
                assert resource.startswith("arn:aws:") and not resource.endswith(":*"), f"{statement['Sid']}: {resource}"
    # Bucket-level actions on the bucket ARN, object-level ones on its objects, never the other way round.
    for statement in _statements():
        for action in _as_list(statement["Action"]):
            if action.startswith("s3:GetObject"):
                assert all(r.endswith("/*") for r in _as_list(statement["Resource"])), action
            elif action.startswith("s3:"):
                assert all(r.startswith("arn:aws:s3:::") and "/" not in r for r in _as_list(statement["Resource"])), action
    kms = next(s for s in _statements() if "kms:Decrypt" in _as_list(s["Action"]))
    assert kms["Condition"]["StringEquals"]["kms:ViaService"].startswith("s3.")


def _iam_allows(action: str, arn: str) -> bool:
    return any(
        action in _as_list(s["Action"]) and any(fnmatch.fnmatchcase(arn, r) for r in _as_list(s["Resource"]))
        for s in _statements()
    )


def test_iam_resources_cover_the_example_release() -> None:
    """The artifact gate can read the example release's weights, licence, report and image, and nothing is spare."""
    release = ReleaseManifest.model_validate(
        yaml.safe_load((REPO / "deploy" / "releases" / "kimi-k3-2026-08-01.yaml").read_text()))
    bucket = release.weights.bucket
    assert _iam_allows("s3:ListBucket", f"arn:aws:s3:::{bucket}")
    assert _iam_allows("s3:GetBucketPolicy", f"arn:aws:s3:::{bucket}")
    for key in [release.weights.key_prefix + o.key for o in release.weights.objects]:
        assert _iam_allows("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}")
    assert not _iam_allows("s3:GetObject", "arn:aws:s3:::some-other-bucket/config.json")
    registry, repository = release.image.split("@", 1)[0].split("/", 1)
    account, _, _, region, *_ = registry.split(".")
    assert _iam_allows("ecr:DescribeImageScanFindings", f"arn:aws:ecr:{region}:{account}:repository/{repository}")
    assert not _iam_allows("ecr:DescribeImages", f"arn:aws:ecr:{region}:{account}:repository/some-other-repo")


def test_the_cluster_page_explains_every_iam_statement() -> None:
    section = (REPO / "docs" / "cluster.md").read_text()
    assert section.startswith("# Running the bot in a cluster")
    for sid in (s["Sid"] for s in _statements()):
        assert f"`{sid}`" in section, f"docs/cluster.md does not explain statement {sid}"
