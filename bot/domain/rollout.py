"""Values exchanged with the cluster adapter: rendered manifests, apply results, rollout progress."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

RolloutStatus = Literal["succeeded", "failed", "timed_out", "stopped"]


def manifest_text(objects: list[dict[str, Any]]) -> str:
    """Canonical YAML of a list of Kubernetes objects (the bytes stored and hashed)."""
    return yaml.safe_dump_all(objects, sort_keys=True, default_flow_style=False)


@dataclass(frozen=True)
class RenderedManifest:
    """The Kubernetes objects for one (release, endpoint); ``text`` is what gets stored and hashed."""

    objects: list[dict[str, Any]]
    text: str
    sha256: str

    @classmethod
    def of(cls, objects: list[dict[str, Any]]) -> RenderedManifest:
        text = manifest_text(objects)
        return cls(objects=objects, text=text, sha256=hashlib.sha256(text.encode()).hexdigest())

    @classmethod
    def from_text(cls, text: str) -> RenderedManifest:
        """Rebuild from stored text, byte for byte (rollback re-applies exactly this)."""
        objects = [o for o in yaml.safe_load_all(text) if o]
        return cls(objects=objects, text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


@dataclass(frozen=True)
class ApplyResult:
    manifest: RenderedManifest
    changed: bool
    conflicts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RolloutProgress:
    """One thing worth telling the deployment's thread while a rollout runs."""

    message: str
    state: str | None = None
    at: str | None = None


@dataclass(frozen=True)
class RolloutOutcome:
    status: RolloutStatus
    reason: str
    elapsed_seconds: float = 0.0
