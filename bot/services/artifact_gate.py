"""The artifact gate's automated checks for a release, as a :class:`GateReport`.

The checks run through the :class:`~bot.services.ports.ArtifactVerifier` port:
the one the composition root put in ``ctx.ports.artifacts`` (S3 and ECR through the
standard AWS chain in production; moto in tests and the sandbox). A
verifier that cannot answer at all yields an ``error`` check, never a ``pass``;
a report with any ``fail`` or ``error`` cannot be approved.
"""

from __future__ import annotations

from collections import Counter

from bot.adapters.aws.artifacts import Progress
from bot.config import EndpointSettings
from bot.domain.checks import Check, GateReport
from bot.domain.governance import ArtifactPolicy
from bot.domain.release import ReleaseManifest
from bot.logs import logger_for
from bot.services import ports
from bot.services.context import Context, require
from bot.services.errors import NotFound
from bot.services.governance import artifact_policy
from bot.services.releases import get_release

log = logger_for(__name__)


def summarise(checks: list[Check]) -> str:
    counts = Counter(c.status for c in checks)
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in ("pass", "warn", "fail", "error"))


def run_artifact_checks(
    verifier: ports.ArtifactVerifier, release: ReleaseManifest, policy: ArtifactPolicy | None = None
) -> GateReport:
    """Every artifact check of ``release`` for ``policy``'s endpoint; an exception or an empty answer is an ``error``."""
    try:
        checks = list(verifier.verify(release, policy))
    except Exception as exc:  # the verifier could not answer: that is an error, never a pass
        log.warning("artifact checks for %s could not run: %s", release.name, exc, exc_info=True)
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        checks = [Check.errored("artifact.aws", f"could not be checked: {first_line}")]
    if not checks:
        checks = [Check.errored("artifact.aws", "the verifier returned no checks")]
    return GateReport(gate="artifact", checks=checks, summary=f"release {release.name}: {summarise(checks)}")


def verifier_for(ctx: Context, progress: Progress | None = None) -> ports.ArtifactVerifier:
    """The process's verifier; with ``progress`` when it can report streaming progress."""
    configured = require(ctx.ports.artifacts, "S3/ECR access")
    if progress is not None and isinstance(configured, ports.ReportsProgress):
        return configured.with_progress(progress)
    return configured


def verify_release(
    ctx: Context, name: str, progress: Progress | None = None, endpoint: str | None = None
) -> GateReport:
    """Run the artifact gate's checks for a registered release on ``endpoint`` (default: the only one configured).

    Reads only, stores nothing.
    """
    release = get_release(ctx, name).manifest
    return run_artifact_checks(verifier_for(ctx, progress), release, artifact_policy(ctx, _endpoint(ctx, endpoint)))


def _endpoint(ctx: Context, name: str | None) -> EndpointSettings | None:
    if name is None:
        endpoints = ctx.settings.endpoints
        return endpoints[0] if len(endpoints) == 1 else None
    found = ctx.settings.endpoint(name)
    if found is None:
        known = ", ".join(e.name for e in ctx.settings.endpoints) or "none configured"
        raise NotFound(f"no endpoint named {name} (known: {known})")
    return found
