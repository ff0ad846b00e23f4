"""The release tuple: the immutable rollback unit of the guide.

model repo + 40-hex commit, versioned S3 weights prefix + per-object SHA-256
manifest, image pinned by digest, vLLM serving args + env, licence version +
licence document checksum, evaluation report, trust-remote-code exception.

:class:`ReleaseManifest` is both the YAML file format operators write and the
value the services pass around; its JSON schema is published from it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bot.domain.secrets import EnvValue, SecretRef

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
COMMIT_HEX = re.compile(r"^[0-9a-f]{40}$")
DIGEST_REF = re.compile(r"^(?P<repo>[^@\s]+)@sha256:(?P<digest>[0-9a-f]{64})$")
S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/(?P<key>.*)$")
NAME = r"^[a-z0-9]([-a-z0-9._]{0,126}[a-z0-9])?$"
# Bounds a real Kimi K3 release sits far inside; anything beyond is a mistake or an attack on the store.
MAX_OBJECT_BYTES = 2 * 1024**4  # 2 TiB: the largest safetensors shard is a few GiB
MAX_OBJECTS = 100_000
MAX_KEY_BYTES = 1024  # S3's own limit for a key
MAX_SERVING_ARGS = 512
MAX_ARG_BYTES = 4096
MAX_ENV_VARS = 256
MAX_ENV_VALUE_BYTES = 4096
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/key`` into (bucket, key)."""
    match = S3_URI.match(uri)
    if not match:
        raise ValueError(f"not an s3:// URI: {uri!r}")
    return match["bucket"], match["key"]


class ModelSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(min_length=1, max_length=256, description="Upstream model repository, e.g. moonshotai/Kimi-K3.")
    commit: str = Field(description="Full 40-hex revision of the model repository that was mirrored.")

    @field_validator("commit")
    @classmethod
    def _full_revision(cls, value: str) -> str:
        if not COMMIT_HEX.match(value):
            raise ValueError("must be the full 40-hex commit, not a branch, tag or short hash")
        return value


class WeightObject(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, description="Object key relative to the weights prefix (no '..', no leading '/').")
    size: int = Field(ge=0, description=f"Size in bytes (at most {MAX_OBJECT_BYTES:,}).")
    sha256: str = Field(description="Lower-case hex SHA-256 of the object's bytes.")

    @field_validator("key")
    @classmethod
    def _relative_key(cls, value: str) -> str:
        problem = key_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("size")
    @classmethod
    def _bounded(cls, value: int) -> int:
        if value > MAX_OBJECT_BYTES:
            raise ValueError(f"must be at most {MAX_OBJECT_BYTES:,} bytes (2 TiB); check the size was written in bytes")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        value = value.lower()
        if not SHA256_HEX.match(value):
            raise ValueError("must be 64 hex characters")
        return value


class Weights(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix: str = Field(description="Versioned S3 prefix, s3://bucket/path/ (ends with a slash).")
    objects: list[WeightObject] = Field(min_length=1)

    @field_validator("objects", mode="before")
    @classmethod
    def _few_enough(cls, value: Any) -> Any:
        # Before validating each item: a million objects should be refused at once, not after a million checks.
        if isinstance(value, list) and len(value) > MAX_OBJECTS:
            raise ValueError(f"{len(value):,} objects; a release holds at most {MAX_OBJECTS:,}")
        return value

    @field_validator("prefix")
    @classmethod
    def _s3_prefix(cls, value: str) -> str:
        if not S3_URI.match(value):
            raise ValueError("must be an s3://bucket/prefix/ URI")
        if not value.endswith("/"):
            raise ValueError("must end with '/' so it names a prefix, not an object")
        return value

    @model_validator(mode="after")
    def _unique_keys(self) -> Weights:
        keys = [o.key for o in self.objects]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"object keys repeat: {', '.join(dupes[:5])}")
        return self

    @property
    def bucket(self) -> str:
        return parse_s3_uri(self.prefix)[0]

    @property
    def key_prefix(self) -> str:
        return parse_s3_uri(self.prefix)[1]


class Serving(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    args: list[str] = Field(
        min_length=1, description=f"vLLM arguments, one list item per token (at most {MAX_SERVING_ARGS}, each ≤ 4 KiB)."
    )
    env: dict[str, EnvValue] = Field(
        default_factory=dict,
        description="Environment variables of the serving container: a plain value, or for a secret a reference "
        "{secret: NAME, key: KEY} (Kubernetes Secret) or {aws_secret: ARN} (AWS Secrets Manager); never a literal secret.",
    )

    @field_validator("args", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        if isinstance(value, list):
            if len(value) > MAX_SERVING_ARGS:
                raise ValueError(f"{len(value):,} arguments; at most {MAX_SERVING_ARGS} are accepted")
            return [str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in value]
        return value

    @field_validator("args")
    @classmethod
    def _bounded_args(cls, value: list[str]) -> list[str]:
        for i, arg in enumerate(value):
            if len(arg.encode()) > MAX_ARG_BYTES:
                raise ValueError(f"argument {i} is {len(arg.encode()):,} bytes; each is at most {MAX_ARG_BYTES:,}")
            if "\x00" in arg:
                raise ValueError(f"argument {i} contains a NUL character")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _stringify_env(cls, value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) > MAX_ENV_VARS:
                raise ValueError(f"{len(value):,} variables; at most {MAX_ENV_VARS} are accepted")
            return {str(k): _env_value(str(k), v) for k, v in value.items()}
        return value

    @field_validator("env")
    @classmethod
    def _bounded_env(cls, value: dict[str, EnvValue]) -> dict[str, EnvValue]:
        for name, item in value.items():
            if not ENV_NAME.match(name):
                raise ValueError(f"{name[:64]!r} is not an environment variable name (letters, digits, '_', '.', '-')")
            if isinstance(item, str) and (len(item.encode()) > MAX_ENV_VALUE_BYTES or "\x00" in item):
                raise ValueError(f"{name}: a value is at most {MAX_ENV_VALUE_BYTES:,} bytes without NUL characters")
        return value

    def plain_env(self) -> dict[str, str]:
        """The variables with a literal value (secret references left out)."""
        return {k: v for k, v in self.env.items() if isinstance(v, str)}

    def secret_env(self) -> dict[str, SecretRef]:
        """The variables whose value is a reference to a secret."""
        return {k: v for k, v in self.env.items() if isinstance(v, SecretRef)}

    def arg_value(self, flag: str) -> str | None:
        """The value following ``flag`` (or given as ``flag=value``), if present."""
        for i, arg in enumerate(self.args):
            if arg == flag and i + 1 < len(self.args):
                return self.args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return None

    def has_flag(self, flag: str) -> bool:
        return any(a == flag or a.startswith(flag + "=") for a in self.args)


def _env_value(name: str, value: Any) -> Any:
    """A plain value as text, a mapping as a :class:`SecretRef`; problems name the variable (never a value)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, dict):
        try:
            return SecretRef.model_validate(value)
        except ValidationError as exc:
            reasons = "; ".join(
                (".".join(str(p) for p in err["loc"]) + ": " if err["loc"] else "") + err["msg"].removeprefix("Value error, ")
                for err in exc.errors(include_input=False)
            )
            raise ValueError(f"{name[:64]}: {reasons}") from None
    if not isinstance(value, str):
        raise ValueError(f"{name[:64]}: a value is text, or a secret reference {{secret: NAME, key: KEY}} / {{aws_secret: ARN}}")
    return value


class Licence(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(min_length=1, max_length=128)
    document: str | None = Field(default=None, description="s3:// URI of the reviewed licence document.")
    sha256: str

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        value = value.lower()
        if not SHA256_HEX.match(value):
            raise ValueError("must be 64 hex characters")
        return value

    @field_validator("document")
    @classmethod
    def _s3(cls, value: str | None) -> str | None:
        if value is not None and not S3_URI.match(value):
            raise ValueError("must be an s3://bucket/key URI")
        return value


class Provenance(BaseModel):
    """Where the serving image comes from: what the guide asks to rebuild from reviewed inputs and record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_image: str = Field(min_length=1, max_length=512, description="Base image the vLLM image was built on, by digest.")
    cuda: str = Field(pattern=r"^\d{1,2}\.\d{1,2}(\.\d{1,3})?$", description="CUDA version in the image, e.g. 12.9.1.")
    driver: str = Field(min_length=1, max_length=64, description="NVIDIA driver versions it runs on, e.g. >=575.57.")
    vllm_commit: str = Field(description="Full 40-hex vLLM commit the image was built from.")

    @field_validator("vllm_commit")
    @classmethod
    def _full_commit(cls, value: str) -> str:
        if not COMMIT_HEX.match(value):
            raise ValueError("must be the full 40-hex vLLM commit")
        return value


class ReleaseManifest(BaseModel):
    """A release manifest file (YAML) and the release tuple it describes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME, description="Unique release name, e.g. kimi-k3-2026-08-01.")
    model: ModelSource
    weights: Weights
    image: str = Field(description="Serving image pinned by digest: REPO@sha256:<64 hex>.")
    serving: Serving
    licence: Licence
    evaluation_report: str | None = Field(default=None, description="Where the evaluation report of this tuple lives.")
    trust_remote_code_exception: str | None = Field(
        default=None, description="Reference of the security exception that allows --trust-remote-code."
    )
    provenance: Provenance | None = Field(
        default=None, description="Base image, CUDA, driver compatibility and vLLM commit of the serving image."
    )

    @field_validator("image")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if not DIGEST_REF.match(value):
            raise ValueError("must be pinned by digest (REPO@sha256:<64 hex>); a floating tag makes rollback ambiguous")
        return value

    @property
    def served_model_name(self) -> str | None:
        return self.serving.arg_value("--served-model-name")

    def tuple_dict(self) -> dict[str, Any]:
        """The tuple without its name: what makes two releases the same deployment."""
        data = self.model_dump(mode="json", exclude={"name"})
        if data.get("provenance") is None:  # releases registered before provenance was recorded keep their hash
            data.pop("provenance", None)
        return data

    def tuple_hash(self) -> str:
        """SHA-256 of the canonical JSON of the tuple (name excluded)."""
        canonical = json.dumps(self.tuple_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a relative path inside the weights prefix, or ``None`` when it is."""
    if len(key.encode()) > MAX_KEY_BYTES:
        return f"is longer than S3's {MAX_KEY_BYTES} bytes"
    if CONTROL.search(key):
        return "contains a control character (NUL, newline, …)"
    if "\\" in key:
        return "contains a backslash; keys use '/' between parts"
    if key.startswith("/"):
        return "must be relative to the weights prefix, not start with '/'"
    parts = key.split("/")
    if any(p in ("..", ".") for p in parts):
        return "must stay inside the weights prefix: no '.' or '..' parts"
    if any(p == "" for p in parts):
        return "has an empty part ('//' or a trailing '/'); name an object, not a folder"
    return None


def manifest_json_schema() -> dict[str, Any]:
    schema = ReleaseManifest.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "kimi-ops release manifest"
    return schema
