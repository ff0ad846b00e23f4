"""Shared pieces for the artifact tests: moto's server over HTTP and a seeded good release."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.adapters.aws.artifacts import S3EcrArtifactVerifier
from bot.config import EndpointSettings
from bot.domain.checks import Check
from bot.domain.governance import ArtifactPolicy
from bot.domain.release import ReleaseManifest
from bot.sandbox import MotoStandIn, seed_good_release, start_moto
from bot.sandbox.aws import INFERENCE_ROLE
from bot.sandbox.governance import governance_records

# The first example release tuple; conftest re-exports it (it imports this module for the moto fixtures).
EXAMPLE_RELEASE = Path(__file__).resolve().parents[1] / "deploy" / "releases" / "kimi-k3-2026-08-01.yaml"


POLICY = ArtifactPolicy(
    endpoint="kimi-prod", inference_roles=(INFERENCE_ROLE,), max_model_len=262_144, exposure="internal",
    requester="U0DEPLOYER",
)
ENDPOINT = EndpointSettings(name="kimi-prod", inference_roles=[INFERENCE_ROLE])
NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def example_manifest() -> ReleaseManifest:
    return ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))


@dataclass
class Seeded:
    """A moto server holding a good release, with clients and a verifier pointed at it."""

    moto: MotoStandIn
    s3: Any
    ecr: Any
    release: ReleaseManifest
    progress: list[tuple[str, int, int]]

    def verifier(self, **kwargs: Any) -> S3EcrArtifactVerifier:
        return S3EcrArtifactVerifier(self.s3, self.ecr, progress=lambda *a: self.progress.append(a), **kwargs)

    def verify(self, release: ReleaseManifest | None = None, **policy: Any) -> list[Check]:
        """Every artifact check of ``release`` (default: the seeded one) for the sandbox's kind of endpoint."""
        return self.verifier().verify(release or self.release, self.policy(**policy))

    def policy(self, **changes: Any) -> ArtifactPolicy:
        """What an endpoint configured like the sandbox's holds the seeded release to, with the sandbox's
        governance records; ``changes`` replace fields."""
        reviews, exceptions = governance_records([self.release], [ENDPOINT], NOW)
        base = replace(POLICY, licence_reviews=tuple(reviews), exceptions=tuple(exceptions), now=NOW)
        return replace(base, **changes)

    def variant(self, **changes: Any) -> ReleaseManifest:
        """The seeded release with some fields replaced, without validation (checks must judge it)."""
        fields = {name: getattr(self.release, name) for name in type(self.release).model_fields}
        fields.update(changes)
        return ReleaseManifest.model_construct(**fields)

    def serving(self, args: list[str] | None = None, env: dict[str, str] | None = None) -> Any:
        current = self.release.serving
        return current.model_construct(args=args if args is not None else list(current.args),
                                       env=env if env is not None else dict(current.env))

    @property
    def bucket(self) -> str:
        return self.release.weights.bucket

    @property
    def prefix(self) -> str:
        return self.release.weights.key_prefix


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoStandIn]:
    """One moto server for the whole run of this process (each xdist worker has its own)."""
    stand_in = start_moto()
    try:
        yield stand_in
    finally:
        stand_in.stop()


@pytest.fixture()
def moto(request: pytest.FixtureRequest) -> Iterator[MotoStandIn]:
    """moto's S3 and ECR, empty. A test marked ``own_moto`` (it stops the server) gets a private one."""
    if request.node.get_closest_marker("own_moto") is None:
        shared: MotoStandIn = request.getfixturevalue("moto_server")
        shared.reset()
        yield shared
        return
    stand_in = start_moto()
    stand_in.reset()
    try:
        yield stand_in
    finally:
        stand_in.stop()


@pytest.fixture()
def seeded(moto: MotoStandIn) -> Seeded:
    s3, ecr = moto.client("s3"), moto.client("ecr")
    release = seed_good_release(s3, ecr, example_manifest())
    return Seeded(moto=moto, s3=s3, ecr=ecr, release=release, progress=[])


def not_passing(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.status for c in checks if c.status != "pass"}


# The inference role a bucket policy must limit reads to (as an ARN written in a policy), and another role.
ROLE = "arn:aws:iam::123456789012:role/kimi-k3-inference"


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}
