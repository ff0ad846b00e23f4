"""The licence document and the image as the registry knows it: existence and its vulnerability scan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bot.domain.artifact_checks.serving import ImageRef
from bot.domain.checks import Check
from bot.domain.governance import ArtifactPolicy, allowed_by


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
