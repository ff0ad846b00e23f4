"""Field-by-field difference of two release tuples, and its plain-text rendering.

Serving args are compared as options, not tokens: ``--tensor-parallel-size 8``
is one arg, so changing 8 to 4 reads as one change rather than a removal and an
addition. The same :func:`render_diff` text is printed by ``kimi-ops release
diff`` and posted by ``/kimi diff``. Values of secret-named env variables are
masked: a diff must not leak what the secrets check refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.domain.release import ReleaseManifest
from bot.domain.secrets import EnvValue, SecretRef, is_secret_name

MASK = "***"


@dataclass(frozen=True)
class Change:
    """One changed scalar or keyed value; ``None`` on a side means absent there."""

    field: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class ObjectChange:
    key: str
    before_size: int
    after_size: int
    before_sha256: str
    after_sha256: str


@dataclass(frozen=True)
class ReleaseDiff:
    """What differs from release ``a`` to release ``b``."""

    a: str
    b: str
    fields: list[Change] = field(default_factory=list)
    args_added: list[str] = field(default_factory=list)
    args_removed: list[str] = field(default_factory=list)
    args_changed: list[Change] = field(default_factory=list)
    args_reordered: bool = False
    env: list[Change] = field(default_factory=list)
    objects_added: list[str] = field(default_factory=list)
    objects_removed: list[str] = field(default_factory=list)
    objects_changed: list[ObjectChange] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not (
            self.fields or self.args_added or self.args_removed or self.args_changed or self.args_reordered
            or self.env or self.objects_added or self.objects_removed or self.objects_changed
        )


def _looks_like_value(token: str) -> bool:
    if not token.startswith("-"):
        return True
    try:  # "--seed -1": a negative number is a value, not a flag
        float(token)
        return True
    except ValueError:
        return False


def group_args(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """``[--flag, value, --switch, pos]`` → ``[(--flag, value), (--switch, None), (pos, None)]``."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token.startswith("-") and not _looks_like_value(token):
            if "=" in token:
                flag, value = token.split("=", 1)
                out.append((flag, value))
            elif i + 1 < len(args) and _looks_like_value(args[i + 1]):
                out.append((token, args[i + 1]))
                i += 1
            else:
                out.append((token, None))
        else:
            out.append((token, None))
        i += 1
    return out


def _render_arg(flag: str, value: str | None) -> str:
    return flag if value is None else f"{flag} {value}"


def _keyed(args: Sequence[str]) -> dict[str, list[str | None]]:
    keyed: dict[str, list[str | None]] = {}
    for flag, value in group_args(args):
        keyed.setdefault(flag, []).append(value)
    return keyed


def _diff_args(a: Sequence[str], b: Sequence[str]) -> tuple[list[str], list[str], list[Change], bool]:
    ka, kb = _keyed(a), _keyed(b)
    added = [_render_arg(f, v) for f in kb if f not in ka for v in kb[f]]
    removed = [_render_arg(f, v) for f in ka if f not in kb for v in ka[f]]
    changed = [
        Change(
            f,
            " ".join(str(v) for v in ka[f]) if ka[f] != [None] else "(set)",
            " ".join(str(v) for v in kb[f]) if kb[f] != [None] else "(set)",
        )
        for f in ka
        if f in kb and ka[f] != kb[f]
    ]
    common_a = [f for f in ka if f in kb]
    common_b = [f for f in kb if f in ka]
    # Positional order matters to vLLM (the model path), flag order does not: only report it when nothing else changed.
    reordered = not (added or removed or changed) and list(a) != list(b) and common_a != common_b
    return added, removed, changed, reordered


def _masked(name: str, value: EnvValue | None) -> str | None:
    if isinstance(value, SecretRef):
        return value.describe()  # where the secret lives, never its value
    return MASK if value is not None and is_secret_name(name) else value


def _diff_env(a: dict[str, EnvValue], b: dict[str, EnvValue]) -> list[Change]:
    names = sorted(set(a) | set(b))
    return [Change(n, _masked(n, a.get(n)), _masked(n, b.get(n))) for n in names if a.get(n) != b.get(n)]


def _provenance(release: ReleaseManifest, key: str) -> str | None:
    return None if release.provenance is None else str(getattr(release.provenance, key))


def diff_releases(a: ReleaseManifest, b: ReleaseManifest) -> ReleaseDiff:
    """Difference from ``a`` (usually the running release) to ``b`` (the candidate)."""
    scalar = {
        "model.repo": (a.model.repo, b.model.repo),
        "model.commit": (a.model.commit, b.model.commit),
        "image": (a.image, b.image),
        "weights.prefix": (a.weights.prefix, b.weights.prefix),
        "licence.version": (a.licence.version, b.licence.version),
        "licence.document": (a.licence.document, b.licence.document),
        "licence.sha256": (a.licence.sha256, b.licence.sha256),
        "evaluation_report": (a.evaluation_report, b.evaluation_report),
        "trust_remote_code_exception": (a.trust_remote_code_exception, b.trust_remote_code_exception),
        **{
            f"provenance.{key}": (_provenance(a, key), _provenance(b, key))
            for key in ("base_image", "cuda", "driver", "vllm_commit")
        },
    }
    fields = [Change(name, before, after) for name, (before, after) in scalar.items() if before != after]
    added, removed, changed, reordered = _diff_args(a.serving.args, b.serving.args)
    oa = {o.key: o for o in a.weights.objects}
    ob = {o.key: o for o in b.weights.objects}
    return ReleaseDiff(
        a=a.name,
        b=b.name,
        fields=fields,
        args_added=added,
        args_removed=removed,
        args_changed=changed,
        args_reordered=reordered,
        env=_diff_env(dict(a.serving.env), dict(b.serving.env)),
        objects_added=sorted(k for k in ob if k not in oa),
        objects_removed=sorted(k for k in oa if k not in ob),
        objects_changed=[
            ObjectChange(k, oa[k].size, ob[k].size, oa[k].sha256, ob[k].sha256)
            for k in sorted(oa)
            if k in ob and (oa[k].size, oa[k].sha256) != (ob[k].size, ob[k].sha256)
        ],
    )


def _show(value: str | None) -> str:
    return "(none)" if value is None else value


def render_diff(diff: ReleaseDiff, max_items: int = 20) -> str:
    """Plain text, one change a line, ``-``/``+``/``~`` markers; long lists are cut at ``max_items``."""
    if diff.identical:
        return f"{diff.a} → {diff.b}: identical tuples"
    lines = [f"{diff.a} → {diff.b}"]

    def section(title: str, items: list[str]) -> None:
        if not items:
            return
        lines.append(f"{title}:")
        lines.extend(f"  {item}" for item in items[:max_items])
        if len(items) > max_items:
            lines.append(f"  … and {len(items) - max_items} more")

    section("fields", [f"~ {c.field}: {_show(c.before)} → {_show(c.after)}" for c in diff.fields])
    section(
        "serving args",
        [f"- {x}" for x in diff.args_removed]
        + [f"+ {x}" for x in diff.args_added]
        + [f"~ {c.field}: {c.before} → {c.after}" for c in diff.args_changed]
        + (["~ same args in a different order"] if diff.args_reordered else []),
    )
    section(
        "serving env",
        [
            f"- {c.field}={c.before}"
            if c.after is None
            else f"+ {c.field}={c.after}"
            if c.before is None
            else f"~ {c.field}: {c.before} → {c.after}"
            for c in diff.env
        ],
    )
    section(
        "weights objects",
        [f"- {k}" for k in diff.objects_removed]
        + [f"+ {k}" for k in diff.objects_added]
        + [f"~ {o.key}: {_object_change(o)}" for o in diff.objects_changed],
    )
    return "\n".join(lines)


def _object_change(o: ObjectChange) -> str:
    parts = []
    if o.before_size != o.after_size:
        parts.append(f"size {o.before_size:,} → {o.after_size:,}")
    if o.before_sha256 != o.after_sha256:
        parts.append(f"sha256 {o.before_sha256[:12]}… → {o.after_sha256[:12]}…")
    return ", ".join(parts)
