"""``release build``: write a release manifest from what actually sits in S3.

Lists the weights prefix, takes each object's SHA-256 from S3's checksum
metadata when it is a full-object SHA-256 and otherwise streams the object
through the hash in bounded chunks (progress reported per chunk); the licence
document is hashed the same way. The manifest is validated before anything is
read (a typo in the commit should not cost an hour of hashing) and again at the
end, then written atomically: a failed build leaves no file behind.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from bot.adapters.aws.artifacts import (
    AWS_ERRORS,
    ListedObject,
    Progress,
    S3Objects,
    aws_error_text,
)
from bot.adapters.aws.session import default_region, make_client
from bot.domain.release import ReleaseManifest, parse_s3_uri
from bot.safe_yaml import YamlFileError
from bot.safe_yaml import load_yaml_file as load_yaml
from bot.services.errors import Refused, ValidationFailed
from bot.services.releases import parse_manifest

# The guide's launch configuration for Kimi K3 on one 8-GPU node: the model path positional (``--model`` is
# deprecated in recent vLLM), and a context window the endpoint's ceiling allows (the default endpoint's).
DEFAULT_SERVING_ARGS: tuple[str, ...] = (
    "/opt/ml/model",
    "--trust-remote-code",
    "--load-format", "fastsafetensors",
    "--enable-prefix-caching",
    "--enable-auto-tool-choice",
    "--tool-call-parser", "kimi_k3",
    "--reasoning-parser", "kimi_k3",
    "--served-model-name", "Kimi-K3",
    "--moe-backend", "auto",
    "--tensor-parallel-size", "8",
    "--no-enable-flashinfer-autotune",
    "--max-model-len", "262144",
)
DEFAULT_SERVING_ENV: dict[str, str] = {"VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION": "1"}
_PLACEHOLDER_OBJECT = {"key": "placeholder", "size": 0, "sha256": "0" * 64}


class WeightStore(Protocol):
    """What a build reads from object storage (implemented by :class:`S3Objects`)."""

    def list_prefix(self, bucket: str, prefix: str) -> list[ListedObject]: ...

    def sha256(
        self, bucket: str, key: str, progress: Progress | None = None, head: dict[str, Any] | None = None,
    ) -> str | None: ...


@dataclass(frozen=True)
class BuildRequest:
    weights: str
    image: str
    model_repo: str
    model_commit: str
    licence_version: str
    licence: str
    name: str | None = None
    serving_args: Sequence[str] = DEFAULT_SERVING_ARGS
    serving_env: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_SERVING_ENV))  # plain, or secret references
    evaluation_report: str | None = None
    trust_remote_code_exception: str | None = None
    provenance: dict[str, str] | None = None  # base_image, cuda, driver, vllm_commit of the serving image

    def default_name(self) -> str:
        stem = self.model_repo.rsplit("/", 1)[-1].lower().replace("_", "-")
        return f"{stem}-{self.model_commit[:12].lower()}"


def _data(request: BuildRequest, objects: list[dict[str, Any]], licence_sha256: str) -> dict[str, Any]:
    weights = request.weights if request.weights.endswith("/") else request.weights + "/"
    return {
        "name": request.name or request.default_name(),
        "model": {"repo": request.model_repo, "commit": request.model_commit},
        "weights": {"prefix": weights, "objects": objects},
        "image": request.image,
        "serving": {"args": list(request.serving_args), "env": dict(request.serving_env)},
        "licence": {"version": request.licence_version, "document": request.licence, "sha256": licence_sha256},
        "evaluation_report": request.evaluation_report,
        "trust_remote_code_exception": request.trust_remote_code_exception,
        "provenance": request.provenance,
    }


def s3_store(region: str | None = None) -> S3Objects:
    """Object reads through the standard AWS chain (``AWS_ENDPOINT_URL`` aims it at a stand-in)."""
    return S3Objects(make_client("s3", region=default_region(region)))


def build_manifest(request: BuildRequest, store: WeightStore | None = None, progress: Progress | None = None) -> ReleaseManifest:
    """Hash everything under the weights prefix and the licence; return the validated manifest."""
    parse_manifest(_data(request, [_PLACEHOLDER_OBJECT], "0" * 64))  # refuse bad fields before any long read
    store = store or s3_store()
    manifest_prefix = request.weights if request.weights.endswith("/") else request.weights + "/"
    bucket, prefix = parse_s3_uri(manifest_prefix)
    try:
        listed = sorted(store.list_prefix(bucket, prefix), key=lambda o: o.key)
        if not listed:
            raise ValidationFailed([f"weights: no objects under {manifest_prefix}; upload the snapshot first"])
        objects = []
        for obj in listed:
            sha = store.sha256(bucket, prefix + obj.key, progress)
            if sha is None:
                raise Refused(f"{obj.key} disappeared from {manifest_prefix} while hashing; is an upload still running?")
            objects.append({"key": obj.key, "size": obj.size, "sha256": sha})
        lic_bucket, lic_key = parse_s3_uri(request.licence)
        licence_sha = store.sha256(lic_bucket, lic_key, progress)
    except AWS_ERRORS as exc:
        raise Refused(f"could not read from S3 ({aws_error_text(exc)}); nothing was written") from None
    if licence_sha is None:
        raise ValidationFailed([f"licence: no object at {request.licence}"])
    return parse_manifest(_data(request, objects, licence_sha))


def manifest_yaml(manifest: ReleaseManifest) -> str:
    data = manifest.model_dump(mode="json", exclude_none=True)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=200)


def write_manifest(manifest: ReleaseManifest, path: Path) -> None:
    """Write atomically (temporary file then rename) so a reader never sees half a manifest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(manifest_yaml(manifest))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# A manifest lists up to 100,000 objects of ~150 bytes each.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


def load_yaml_file(path: Path, max_bytes: int = MAX_MANIFEST_BYTES) -> Any:
    """A manifest or serving file's YAML; a missing, unreadable, binary, non-UTF-8 or bomb file is one problem line."""
    try:
        return load_yaml(path, max_bytes=max_bytes)
    except YamlFileError as exc:
        raise ValidationFailed([str(exc)]) from None


def read_serving_file(path: Path) -> tuple[list[str], dict[str, Any]]:
    """A serving-args file: a YAML list of args, or a mapping with ``args`` and optional ``env``.

    An env value is a plain scalar or a secret reference mapping ({secret, key} / {aws_secret}); the manifest's
    validation refuses literal secrets and bad references afterwards.
    """
    data = load_yaml_file(path)
    if isinstance(data, list):
        data = {"args": data}
    if not isinstance(data, dict) or not isinstance(data.get("args"), list) or not isinstance(data.get("env") or {}, dict):
        raise ValidationFailed([f"{path}: expected a list of args, or a mapping with `args:` (list) and `env:` (mapping)"])
    env = {str(k): v if isinstance(v, dict) else str(v) for k, v in (data.get("env") or {}).items()}
    return [str(a) for a in data["args"]], env
