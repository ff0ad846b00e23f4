"""Release use cases: register, list, show, diff.

Services return plain values (:class:`ReleaseView`), never ORM rows, so that
entrypoints never touch the database layer.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from bot.adapters.store.models import Release
from bot.adapters.store.repositories import Conflict
from bot.adapters.store.uow import SqlUnitOfWork
from bot.domain.names import did_you_mean, match
from bot.domain.release import ReleaseManifest
from bot.domain.release_diff import ReleaseDiff
from bot.domain.release_diff import diff_releases as diff_tuples
from bot.domain.secrets import registration_problems
from bot.services.context import Context
from bot.services.errors import NotFound, Refused, ValidationFailed


@dataclass(frozen=True)
class ReleaseView:
    manifest: ReleaseManifest
    tuple_hash: str
    registered_by: str
    registered_at: dt.datetime

    @property
    def name(self) -> str:
        return self.manifest.name


@dataclass(frozen=True)
class Registered:
    release: ReleaseView
    warnings: list[str] = field(default_factory=list)


def manifest_from_row(row: Release) -> ReleaseManifest:
    return ReleaseManifest.model_validate(
        {
            "name": row.name,
            "model": {"repo": row.model_repo, "commit": row.model_commit},
            "weights": {"prefix": row.weights_prefix, "objects": row.objects},
            "image": row.image,
            "serving": {"args": row.serving_args, "env": row.serving_env},
            "licence": {"version": row.licence_version, "document": row.licence_uri, "sha256": row.licence_sha256},
            "evaluation_report": row.evaluation_report,
            "trust_remote_code_exception": row.trust_remote_code_exception,
            "provenance": row.provenance,
        }
    )


def view_of(row: Release) -> ReleaseView:
    return ReleaseView(
        manifest=manifest_from_row(row),
        tuple_hash=row.tuple_hash,
        registered_by=row.registered_by,
        registered_at=row.registered_at,
    )


MAX_PROBLEMS = 20


def parse_manifest(data: Any) -> ReleaseManifest:
    """Validate raw manifest data for registration; every problem is reported with its field path.

    Besides the manifest's own rules, a release to be stored must hold no literal secret (see
    :mod:`bot.domain.secrets`): the problem names the variable or argument, never the value.
    """
    if not isinstance(data, dict):
        raise ValidationFailed(["(top level): a release manifest is a mapping of fields, see `kimi-ops release schema`"])
    try:
        manifest = ReleaseManifest.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_input=False):
            path = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{path}: {msg}")
        # A manifest with 100,000 bad keys says so in a screenful, not 100,000 lines.
        if len(problems) > MAX_PROBLEMS:
            problems = [*problems[:MAX_PROBLEMS], f"(and {len(problems) - MAX_PROBLEMS:,} more problems)"]
        raise ValidationFailed(problems) from None
    secrets = registration_problems(manifest.serving.args, manifest.serving.env)
    if secrets:
        raise ValidationFailed(secrets)
    return manifest


def register_release(ctx: Context, data: Any, actor: str) -> Registered:
    """Validate, store and audit a release; refuse a name already taken."""
    manifest = parse_manifest(data)
    now = ctx.clock.now()
    digest = manifest.tuple_hash()
    with ctx.uow() as uow:
        if uow.releases.get(manifest.name) is not None:
            raise Refused(f"release {manifest.name} is already registered; releases are immutable, register a new name")
        warnings = [
            f"this tuple is identical to release {twin.name}; rollback and diff will treat them as the same deployment"
            for twin in uow.releases.by_tuple_hash(digest)
        ]
        try:
            row = _add_release(uow, manifest, digest, actor, now)
        except Conflict:
            raise Refused(f"release {manifest.name} was registered by someone else a moment ago; register a new name") from None
        uow.audit.record(
            at=now,
            actor=actor,
            action="release.registered",
            subject=f"release:{manifest.name}",
            details={"tuple_hash": digest, "image": manifest.image, "model_commit": manifest.model.commit, "warnings": warnings},
        )
        uow.commit()
        return Registered(release=view_of(row), warnings=warnings)


def _add_release(uow: SqlUnitOfWork, manifest: ReleaseManifest, digest: str, actor: str, now: dt.datetime) -> Release:
    return uow.releases.add(
        Release(
            name=manifest.name,
            model_repo=manifest.model.repo,
            model_commit=manifest.model.commit,
            weights_prefix=manifest.weights.prefix,
            objects=[o.model_dump() for o in manifest.weights.objects],
            image=manifest.image,
            serving_args=list(manifest.serving.args),
            # References stored as their JSON form ({secret, key} / {aws_secret}); never a secret value.
            serving_env=manifest.serving.model_dump(mode="json", exclude_none=True)["env"],
            licence_version=manifest.licence.version,
            licence_uri=manifest.licence.document,
            licence_sha256=manifest.licence.sha256,
            evaluation_report=manifest.evaluation_report,
            trust_remote_code_exception=manifest.trust_remote_code_exception,
            provenance=manifest.provenance.model_dump(mode="json") if manifest.provenance is not None else None,
            tuple_hash=digest,
            registered_by=actor,
            registered_at=now,
        )
    )


def release_row(uow: SqlUnitOfWork, name: str) -> Release:
    """The registered release ``name`` (in any case), or :class:`NotFound` with the closest names."""
    row = uow.releases.get(name)
    if row is not None:
        return row
    names = [r.name for r in uow.releases.list()]
    same = match(name, names)
    found = uow.releases.get(same) if same is not None else None
    if found is not None:
        return found
    raise NotFound(f"no release named {name}{did_you_mean(name, names) or ';'} `/kimi release list` shows the registered ones")


def list_releases(ctx: Context, limit: int | None = None) -> list[ReleaseView]:
    with ctx.uow() as uow:
        return [view_of(r) for r in uow.releases.list(limit)]


def get_release(ctx: Context, name: str) -> ReleaseView:
    with ctx.uow() as uow:
        return view_of(release_row(uow, name))


def diff_releases(ctx: Context, a: str, b: str) -> ReleaseDiff:
    """Field-by-field difference from registered release ``a`` to ``b`` (render with ``render_diff``)."""
    return diff_tuples(get_release(ctx, a).manifest, get_release(ctx, b).manifest)
