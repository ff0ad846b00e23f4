"""The weights bucket's protection: public access blocks, encryption, versioning, logging and its policy."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.domain.artifact_checks.objects import first_few
from bot.domain.checks import Check

READ_ACTIONS = ("s3:getobject", "s3:getobjectversion", "s3:listbucket", "s3:get*", "s3:list*", "s3:*", "*")
BPA_FLAGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")

@dataclass(frozen=True)
class BucketPosture:
    """The weights bucket's protection settings as S3 reported them (``None``: not configured)."""

    bucket: str
    versioning: str | None = None
    public_access_block: Mapping[str, bool] | None = None
    encryption: Sequence[str] = field(default_factory=tuple)
    logging_target: str | None = None
    policy: str | None = None


def _principal_is_everyone(principal: Any) -> bool:
    if principal == "*":
        return True
    if isinstance(principal, Mapping):
        values = principal.get("AWS")
        values = values if isinstance(values, list) else [values]
        return "*" in values
    return False


def _grants_read(actions: Any) -> bool:
    actions = actions if isinstance(actions, list) else [actions]
    return any(str(a).lower() in READ_ACTIONS for a in actions)


def _statements(policy_text: str) -> list[Mapping[str, Any]]:
    document = json.loads(policy_text)
    statements = document.get("Statement", [])
    statements = statements if isinstance(statements, list) else [statements]
    return [st for st in statements if isinstance(st, Mapping)]


def _sid(st: Mapping[str, Any], index: int) -> str:
    return str(st.get("Sid") or f"#{index}")


def public_read_statements(policy_text: str) -> tuple[list[str], list[str]]:
    """``(unconditional, conditional)`` statement ids that allow ``Principal: *`` to read."""
    unconditional: list[str] = []
    conditional: list[str] = []
    for index, st in enumerate(_statements(policy_text)):
        if st.get("Effect") != "Allow":
            continue
        if _principal_is_everyone(st.get("Principal")) and _grants_read(st.get("Action", [])):
            (conditional if st.get("Condition") else unconditional).append(_sid(st, index))
    return unconditional, conditional


def _named_principals(principal: Any) -> list[str]:
    """Every principal a statement names (``AWS`` ARNs, services, canonical users), ``*`` excluded."""
    if not isinstance(principal, Mapping):
        return []
    names: list[str] = []
    for values in principal.values():
        for value in values if isinstance(values, list) else [values]:
            if str(value) != "*":
                names.append(str(value))
    return names


def _condition_values(condition: Any) -> list[str]:
    values: list[str] = []
    for operator in condition.values() if isinstance(condition, Mapping) else ():
        for raw in operator.values() if isinstance(operator, Mapping) else ():
            values += [str(v) for v in (raw if isinstance(raw, list) else [raw])]
    return values


def inference_role_readers(policy_text: str, roles: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(strangers, limited_by)``: principals besides ``roles`` allowed to read, and statements limiting reads to them.

    A statement limits reads to the roles when it allows a role to read, or denies reads to everyone whose
    ``aws:PrincipalArn`` is not a role (the pattern that also shuts out the account's other IAM principals).
    """
    wanted = set(roles)
    strangers: list[str] = []
    limited_by: list[str] = []
    for index, st in enumerate(_statements(policy_text)):
        if not _grants_read(st.get("Action", [])):
            continue
        named = _named_principals(st.get("Principal"))
        if st.get("Effect") == "Allow":
            strangers += [p for p in named if p not in wanted and p not in strangers]
            if any(p in wanted for p in named):
                limited_by.append(_sid(st, index))
        elif (
            st.get("Effect") == "Deny"
            and _principal_is_everyone(st.get("Principal"))
            and wanted
            and wanted <= set(_condition_values(st.get("Condition")))
        ):
            limited_by.append(_sid(st, index))
    return strangers, limited_by


def bucket_policy_check(bucket: str, policy: str | None, inference_roles: Sequence[str]) -> Check:
    """The guide: a bucket policy that permits reads only from the inference role."""
    roles = ", ".join(inference_roles)
    if not inference_roles:
        return Check.failed(
            "bucket.policy",
            "no inference role is configured for this endpoint; set endpoints[].inference_roles to the IAM role(s) "
            "the model pods read the weights with",
        )
    if not policy:
        return Check.failed(
            "bucket.policy",
            f"{bucket} has no bucket policy, so any principal of the account with S3 rights may read the weights; "
            f"add one allowing s3:GetObject only to {roles}",
        )
    try:
        unconditional, conditional = public_read_statements(policy)
        strangers, limited_by = inference_role_readers(policy, inference_roles)
    except (ValueError, AttributeError):
        return Check.errored("bucket.policy", f"the bucket policy of {bucket} is not readable JSON")
    if unconditional:
        return Check.failed(
            "bucket.policy", f"bucket policy lets anyone (Principal *) read: statement {', '.join(unconditional)}"
        )
    if strangers:
        return Check.failed(
            "bucket.policy",
            f"bucket policy lets principals other than the inference role read: {first_few(strangers)}; allow reads only "
            f"to {roles}",
            strangers=strangers,
        )
    if not limited_by:
        return Check.failed(
            "bucket.policy",
            f"bucket policy does not limit reads to the inference role; add a statement allowing s3:GetObject to {roles}",
        )
    if conditional:
        return Check.warned(
            "bucket.policy",
            f"bucket policy lets Principal * read under conditions: statement {', '.join(conditional)}; review them",
        )
    return Check.passed("bucket.policy", f"bucket policy limits reads to {roles}")


def bucket_checks(posture: BucketPosture, inference_roles: Sequence[str] = ()) -> list[Check]:
    b = posture.bucket
    checks = [
        Check.passed("bucket.versioning", f"versioning is enabled on {b}")
        if posture.versioning == "Enabled"
        else Check.failed(
            "bucket.versioning", f"versioning is {(posture.versioning or 'off').lower()} on {b}; old weights could be overwritten"
        ),
    ]
    bpa = posture.public_access_block or {}
    off = [flag for flag in BPA_FLAGS if not bpa.get(flag)]
    checks.append(
        Check.failed("bucket.public_access_block", f"Block Public Access is off on {b}: {', '.join(off)}", off=off)
        if off
        else Check.passed("bucket.public_access_block", "all four Block Public Access settings are on")
    )
    checks.append(
        Check.passed("bucket.encryption", f"default encryption: {', '.join(posture.encryption)}")
        if posture.encryption
        else Check.failed("bucket.encryption", f"{b} has no default encryption")
    )
    checks.append(
        Check.passed("bucket.logging", f"access logs go to {posture.logging_target}")
        if posture.logging_target
        else Check.failed("bucket.logging", f"{b} has no server access logging; reads of the weights would leave no trace")
    )
    checks.append(bucket_policy_check(b, posture.policy, inference_roles))
    return checks
