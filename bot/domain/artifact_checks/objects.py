"""The weights as S3 listed them, compared with the manifest's object list."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.domain.checks import Check
from bot.domain.release import WeightObject


@dataclass(frozen=True)
class ObservedObject:
    """One object as S3 reported it; ``sha256`` is ``None`` when it was not read (e.g. wrong size)."""

    key: str
    size: int
    sha256: str | None = None


def first_few(items: Sequence[str], limit: int = 3) -> str:
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
        problems.append(f"{len(missing)} missing ({first_few(missing)})")
    if wrong_size:
        problems.append(f"{len(wrong_size)} with a different size ({first_few(wrong_size)})")
    if wrong_sha:
        problems.append(f"{len(wrong_sha)} with a different SHA-256 ({first_few(wrong_sha)})")
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
        checks = [Check.errored("weights.objects", f"{len(unread)} object(s) could not be checksummed ({first_few(unread)})")]
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
                f"{len(extra)} object(s) under the prefix are not in the manifest ({first_few(extra)})",
                extra=extra,
            )
        )
    else:
        checks.append(Check.passed("weights.extra", "no objects under the prefix beyond the manifest"))
    return checks
