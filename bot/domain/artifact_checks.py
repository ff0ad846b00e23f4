"""The artifact gate's checks as pure functions over a release tuple and what S3/ECR reported.

The manifest model already refuses tag-only images and short commits at
registration; these checks verify them again on their own, because a stored
tuple may predate a rule and tests build tuples with ``model_construct``. Checks
that need AWS take plain observations (:class:`ObservedObject`,
:class:`BucketPosture`, :class:`ImageScan`) gathered by the adapter, so the
rules are tested without any I/O. A check never echoes a secret value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.domain.checks import Check
from bot.domain.governance import NODE_GPUS, ArtifactPolicy, allowed_by
from bot.domain.release import COMMIT_HEX, DIGEST_REF, Provenance, WeightObject
from bot.domain.secrets import EnvValue, secret_locations

ECR_HOST = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")
READ_ACTIONS = ("s3:getobject", "s3:getobjectversion", "s3:listbucket", "s3:get*", "s3:list*", "s3:*", "*")
BPA_FLAGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")


@dataclass(frozen=True)
class ImageRef:
    """A container image reference split into its parts."""

    repository: str
    digest: str | None
    registry: str | None
    ecr_account: str | None = None
    ecr_region: str | None = None
    ecr_repository: str | None = None

    @property
    def is_ecr(self) -> bool:
        return self.ecr_account is not None


def parse_image(image: str) -> ImageRef:
    """Split ``[registry/]repo[:tag][@sha256:…]``; ECR hosts yield account, region and repository name."""
    match = DIGEST_REF.match(image)
    repo, digest = (match["repo"], "sha256:" + match["digest"]) if match else (image.split("@", 1)[0], None)
    first, _, rest = repo.partition("/")
    registry = first if rest and ("." in first or ":" in first or first == "localhost") else None
    path = rest if registry else repo
    ecr = ECR_HOST.match(registry or "")
    if ecr:
        name = re.sub(r":[^/:]+$", "", path)  # drop a tag that rides along with the digest
        return ImageRef(repo, digest, registry, ecr["account"], ecr["region"], name)
    return ImageRef(repo, digest, registry)


def check_image_pinned(image: str) -> Check:
    if DIGEST_REF.match(image or ""):
        return Check.passed("image.pinned", "image is pinned by sha256 digest")
    if "@sha256:" in (image or ""):
        return Check.failed("image.pinned", "image digest is not sha256:<64 lower-case hex>; pin the full digest")
    return Check.failed(
        "image.pinned", "image is referenced by tag only; a floating tag makes rollback ambiguous, pin @sha256:<digest>"
    )


def check_provenance(provenance: Provenance | None) -> Check:
    """The guide: rebuild the serving image from reviewed inputs; the manifest says which inputs."""
    if provenance is None:
        return Check.failed(
            "image.provenance",
            "the manifest does not record where the image comes from; add provenance: base_image, cuda, driver "
            "and vllm_commit",
        )
    return Check.passed(
        "image.provenance",
        f"built on {provenance.base_image} · CUDA {provenance.cuda} · driver {provenance.driver} · "
        f"vLLM {provenance.vllm_commit[:12]}",
        base_image=provenance.base_image, cuda=provenance.cuda, driver=provenance.driver,
        vllm_commit=provenance.vllm_commit,
    )


def check_model_commit(commit: str) -> Check:
    if COMMIT_HEX.match(commit or ""):
        return Check.passed("model.commit", "model commit is a full 40-hex revision")
    return Check.failed("model.commit", "model commit must be the full 40-hex revision, not a branch, tag or short hash")


def _flag_value(args: Sequence[str], *flags: str) -> str | None:
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def check_tensor_parallel(
    args: Sequence[str], gpus: int = NODE_GPUS, policy: ArtifactPolicy | None = None, release: str | None = None
) -> Check:
    """The guide's launch shards the model over all of the node's GPUs; anything else needs a recorded exception."""
    raw = _flag_value(args, "--tensor-parallel-size", "-tp")
    if raw is None:
        return Check.failed(
            "serving.tensor_parallel",
            f"--tensor-parallel-size is not set (vLLM would use 1 GPU); add --tensor-parallel-size {gpus}, "
            f"the node's {gpus} GPUs",
        )
    if not raw.isdigit() or int(raw) < 1:
        return Check.failed("serving.tensor_parallel", f"--tensor-parallel-size {raw!r} is not a positive whole number")
    size = int(raw)
    if size != gpus:
        exception, why = (policy or ArtifactPolicy()).exception("tensor-parallel", release)
        if exception is not None:
            return Check.passed(
                "serving.tensor_parallel", f"--tensor-parallel-size {size} instead of {gpus}: allowed by {allowed_by(exception)}"
            )
        return Check.failed(
            "serving.tensor_parallel",
            f"--tensor-parallel-size {size} is not the guide's {gpus} (all of the node's GPUs); use {gpus}, or record a "
            f"tensor-parallel security exception ({why})",
            size=size,
        )
    return Check.passed("serving.tensor_parallel", f"--tensor-parallel-size {size} uses all of the node's {gpus} GPUs")


def check_model_argument(args: Sequence[str]) -> Check:
    """The model path is vLLM's positional argument: ``--model`` is deprecated in recent vLLM."""
    if _has_flag(args, "--model"):
        where = _flag_value(args, "--model") or "PATH"
        return Check.failed(
            "serving.model",
            f"--model is deprecated in recent vLLM; give the model as the first, positional argument ({where})",
        )
    if not args or args[0].startswith("-"):
        return Check.failed("serving.model", "no model path: make the first serving arg the model path (e.g. /opt/ml/model)")
    return Check.passed("serving.model", f"model path {args[0]} given as vLLM's positional argument")


def check_max_model_len(args: Sequence[str], ceiling: int | None) -> Check:
    """A million-token window is a capability, not a free entitlement: the release states its window, within bounds."""
    raw = _flag_value(args, "--max-model-len")
    if ceiling is None:
        return Check.failed(
            "serving.max_model_len", "no endpoint ceiling to check --max-model-len against; name the endpoint it is for"
        )
    if raw is None:
        return Check.failed(
            "serving.max_model_len",
            f"--max-model-len is not set, so vLLM offers the model's whole window; set it to at most {ceiling:,}",
        )
    value = raw.replace("_", "")
    # vLLM's own reading: k/m/g are powers of 1000, K/M/G of 1024.
    scale = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}.get(value[-1:], 1) if value else 1
    number = value[:-1] if scale != 1 else value
    if not number.isdigit() or int(number) < 1:
        return Check.failed("serving.max_model_len", f"--max-model-len {raw!r} is not a positive whole number of tokens")
    tokens = int(number) * scale
    if tokens > ceiling:
        return Check.failed(
            "serving.max_model_len",
            f"--max-model-len {tokens:,} is above the endpoint's ceiling of {ceiling:,} tokens; lower it or raise "
            "the endpoint's max_model_len after a capacity review",
            tokens=tokens, ceiling=ceiling,
        )
    return Check.passed("serving.max_model_len", f"--max-model-len {tokens:,} is within the endpoint's {ceiling:,}")


def check_served_model_name(args: Sequence[str]) -> Check:
    name = _flag_value(args, "--served-model-name")
    if not name or name.startswith("-"):
        return Check.failed(
            "serving.served_model_name", "--served-model-name is missing; clients and readiness probes need a stable model name"
        )
    return Check.passed("serving.served_model_name", f"served as {name}")


def check_trust_remote_code(
    args: Sequence[str], exception: str | None, policy: ArtifactPolicy | None = None, release: str = ""
) -> Check:
    """``--trust-remote-code`` runs the model repo's Python: only under a recorded, current security exception."""
    if not _has_flag(args, "--trust-remote-code"):
        return Check.passed("serving.trust_remote_code", "--trust-remote-code is not requested")
    if not exception or not exception.strip():
        return Check.failed(
            "serving.trust_remote_code",
            "--trust-remote-code runs code from the model repo; record a security exception and name it in "
            "trust_remote_code_exception",
        )
    found, why = (policy or ArtifactPolicy()).named_exception(exception.strip(), "trust-remote-code", release)
    if found is None:
        return Check.failed("serving.trust_remote_code", f"--trust-remote-code: {why}")
    return Check.passed("serving.trust_remote_code", f"--trust-remote-code allowed by {allowed_by(found)}")


def check_no_secrets(args: Sequence[str], env: Mapping[str, EnvValue]) -> Check:
    where = secret_locations(args, env)
    if where:
        return Check.failed(
            "serving.no_secrets",
            f"literal secret in {', '.join(where)}; refer to a Kubernetes Secret or a Secrets Manager ARN instead "
            "(value not shown)",
            locations=where,
        )
    return Check.passed("serving.no_secrets", "no secret values in serving args or env")


def serving_checks(
    args: Sequence[str],
    env: Mapping[str, EnvValue],
    trust_remote_code_exception: str | None,
    policy: ArtifactPolicy | None = None,
    release: str = "",
) -> list[Check]:
    policy = policy or ArtifactPolicy()
    return [
        check_tensor_parallel(args, policy.gpus, policy, release),
        check_model_argument(args),
        check_max_model_len(args, policy.max_model_len),
        check_served_model_name(args),
        check_trust_remote_code(args, trust_remote_code_exception, policy, release),
        check_no_secrets(args, env),
    ]


@dataclass(frozen=True)
class ObservedObject:
    """One object as S3 reported it; ``sha256`` is ``None`` when it was not read (e.g. wrong size)."""

    key: str
    size: int
    sha256: str | None = None


def _sample(items: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def compare_objects(expected: Iterable[WeightObject], observed: Mapping[str, ObservedObject]) -> list[Check]:
    """Missing, wrong-size or wrong-checksum objects fail; objects the manifest does not list warn."""
    expected = list(expected)
    missing = [o.key for o in expected if o.key not in observed]
    wrong_size = [o.key for o in expected if o.key in observed and observed[o.key].size != o.size]
    unread = [o.key for o in expected if o.key in observed and o.key not in wrong_size and observed[o.key].sha256 is None]
    wrong_sha = [
        o.key
        for o in expected
        if o.key in observed and o.key not in wrong_size and observed[o.key].sha256 not in (None, o.sha256)
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing ({_sample(missing)})")
    if wrong_size:
        problems.append(f"{len(wrong_size)} with a different size ({_sample(wrong_size)})")
    if wrong_sha:
        problems.append(f"{len(wrong_sha)} with a different SHA-256 ({_sample(wrong_sha)})")
    checks: list[Check]
    if problems:
        checks = [
            Check.failed(
                "weights.objects",
                "objects differ from the manifest: " + "; ".join(problems),
                missing=missing,
                size_mismatch=wrong_size,
                sha256_mismatch=wrong_sha,
            )
        ]
    elif unread:
        checks = [Check.errored("weights.objects", f"{len(unread)} object(s) could not be checksummed ({_sample(unread)})")]
    else:
        total = sum(o.size for o in expected)
        checks = [
            Check.passed(
                "weights.objects", f"all {len(expected)} objects present with recorded size and SHA-256 ({total:,} bytes)"
            )
        ]
    listed = {o.key for o in expected}
    extra = sorted(k for k in observed if k not in listed)
    if extra:
        checks.append(
            Check.warned(
                "weights.extra",
                f"{len(extra)} object(s) under the prefix are not in the manifest ({_sample(extra)})",
                extra=extra,
            )
        )
    else:
        checks.append(Check.passed("weights.extra", "no objects under the prefix beyond the manifest"))
    return checks


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
            f"bucket policy lets principals other than the inference role read: {_sample(strangers)}; allow reads only "
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


def check_licence(expected_sha256: str, actual_sha256: str | None, document: str | None) -> Check:
    if not document:
        return Check.failed("licence.sha256", "no licence document is recorded; record the reviewed document's s3:// URI")
    if actual_sha256 is None:
        return Check.failed("licence.sha256", f"licence document {document} does not exist")
    if actual_sha256 != expected_sha256.lower():
        return Check.failed("licence.sha256", "licence document changed since review: SHA-256 differs from the recorded one")
    return Check.passed("licence.sha256", "licence document matches the recorded SHA-256")


@dataclass(frozen=True)
class ImageScan:
    """What the registry knows about a digest: whether it exists, its scan's status and severity counts.

    ``severity_counts`` is ``None`` when no scan exists; ``status`` is the scan's (``COMPLETE``, ``IN_PROGRESS``,
    ``FAILED``…) when one does.
    """

    exists: bool
    severity_counts: Mapping[str, int] | None = None
    status: str | None = None


def _unscanned(reason: str, policy: ArtifactPolicy | None, release: str | None) -> Check:
    """An image without a completed scan fails, unless a current ``unscanned-image`` exception allows it."""
    exception, why = (policy or ArtifactPolicy()).exception("unscanned-image", release)
    if exception is not None:
        return Check.passed("image.scan", f"{reason}; allowed by {allowed_by(exception)}")
    return Check.failed(
        "image.scan", f"{reason}; scan it (ECR basic or enhanced scanning) or record an unscanned-image exception ({why})"
    )


def image_registry_checks(
    ref: ImageRef, scan: ImageScan | None, policy: ArtifactPolicy | None = None, release: str | None = None
) -> list[Check]:
    """Existence of the digest, a completed scan and no CRITICAL findings (ECR); elsewhere nothing is scanned."""
    if not ref.is_ecr or scan is None:
        where = ref.registry or "Docker Hub"
        return [
            Check.warned("image.exists", f"{where} is not ECR; the digest's existence is not checked"),
            _unscanned(f"{where} is not ECR, so kimi-ops reads no scan of this image", policy, release),
        ]
    if not scan.exists:
        return [Check.failed("image.exists", f"digest {ref.digest} does not exist in ECR repository {ref.ecr_repository}")]
    checks = [Check.passed("image.exists", f"digest exists in ECR repository {ref.ecr_repository}")]
    if scan.severity_counts is None or (scan.status or "COMPLETE") != "COMPLETE":
        state = "no scan exists" if scan.severity_counts is None else f"its scan is {str(scan.status).lower()}"
        checks.append(_unscanned(f"{state} for this digest", policy, release))
        return checks
    critical = int(scan.severity_counts.get("CRITICAL", 0))
    if critical:
        checks.append(
            Check.failed(
                "image.scan", f"image scan reports {critical} CRITICAL finding(s)", severity_counts=dict(scan.severity_counts)
            )
        )
    else:
        summary = ", ".join(f"{k} {v}" for k, v in sorted(scan.severity_counts.items())) or "none"
        checks.append(Check.passed("image.scan", f"no CRITICAL scan findings ({summary})"))
    return checks
