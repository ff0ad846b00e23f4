"""The artifact gate's automated checks for a release, as a :class:`GateReport`.

The checks run through the :class:`~bot.services.ports.ArtifactVerifier` port:
the one in ``ctx.adapters`` when the process has one (Slack app, tests, sandbox),
else an S3/ECR verifier built from the standard AWS environment (the CLI). A
verifier that cannot answer at all yields an ``error`` check, never a ``pass``;
a report with any ``fail`` or ``error`` cannot be approved.
"""

from __future__ import annotations

import logging
from collections import Counter

from bot.adapters.aws.artifacts import Progress, S3EcrArtifactVerifier
from bot.adapters.aws.session import default_region, make_client
from bot.bootstrap import Context
from bot.domain.artifact_checks import parse_image
from bot.domain.checks import Check, GateReport
from bot.domain.release import ReleaseManifest
from bot.services import ports
from bot.services.releases import get_release

log = logging.getLogger(__name__)


def summarise(checks: list[Check]) -> str:
    counts = Counter(c.status for c in checks)
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in ("pass", "warn", "fail", "error"))


def run_artifact_checks(verifier: ports.ArtifactVerifier, release: ReleaseManifest) -> GateReport:
    """Every artifact check of ``release``; an exception or an empty answer becomes an ``error``."""
    try:
        checks = list(verifier.verify(release))
    except Exception as exc:  # the verifier could not answer: that is an error, never a pass
        log.warning("artifact checks for %s could not run: %s", release.name, exc, exc_info=True)
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        checks = [Check.errored("artifact.aws", f"could not be checked: {first_line}")]
    if not checks:
        checks = [Check.errored("artifact.aws", "the verifier returned no checks")]
    return GateReport(gate="artifact", checks=checks, summary=f"release {release.name}: {summarise(checks)}")


def aws_verifier(release: ReleaseManifest, fallback_region: str | None = None, progress: Progress | None = None) -> S3EcrArtifactVerifier:
    """An S3/ECR verifier from the standard AWS chain; ECR is read in the image's own region."""
    region = default_region(fallback_region)
    ecr_region = parse_image(release.image).ecr_region or region
    return S3EcrArtifactVerifier(make_client("s3", region=region), make_client("ecr", region=ecr_region), progress=progress)


def verifier_for(ctx: Context, release: ReleaseManifest, progress: Progress | None = None) -> ports.ArtifactVerifier:
    configured: ports.ArtifactVerifier | None = ctx.adapters.get(ports.ARTIFACTS)
    if configured is not None:
        return configured
    regions = ctx.settings.aws_regions
    return aws_verifier(release, regions[0] if regions else None, progress)


def verify_release(ctx: Context, name: str, progress: Progress | None = None) -> GateReport:
    """Run the artifact gate's checks for a registered release; reads only, stores nothing."""
    release = get_release(ctx, name).manifest
    return run_artifact_checks(verifier_for(ctx, release, progress), release)
