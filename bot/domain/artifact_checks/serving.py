"""Checks of the serving half of a release tuple: the image reference, provenance and vLLM's arguments."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.domain.checks import Check
from bot.domain.governance import NODE_GPUS, ArtifactPolicy, allowed_by
from bot.domain.release import COMMIT_HEX, DIGEST_REF, Provenance
from bot.domain.secrets import EnvValue, secret_locations

ECR_HOST = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


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
