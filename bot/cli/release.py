"""``kimi-ops release``: register, list and inspect release tuples."""

from __future__ import annotations

from pathlib import Path

import typer

from bot.cli import output
from bot.cli.common import context, default_actor

app = typer.Typer(help="Release tuples: the immutable rollback units.", no_args_is_help=True)


@app.command("list")
def list_(limit: int = typer.Option(50, "--limit", "-n", min=1, help="Show at most N releases.")) -> None:
    """List registered releases, newest first."""
    from bot.cli.main import run_guarded
    from bot.services.releases import list_releases

    def body() -> None:
        releases = list_releases(context(), limit)
        output.table(
            "Releases",
            ["name", "model commit", "image digest", "licence", "registered by", "registered at (UTC)"],
            [
                (
                    r.name,
                    r.manifest.model.commit[:12],
                    r.manifest.image.split("@sha256:")[-1][:12],
                    r.manifest.licence.version,
                    r.registered_by,
                    r.registered_at.strftime("%Y-%m-%d %H:%M"),
                )
                for r in releases
            ],
            empty="no releases registered yet; `kimi-ops release register FILE` adds one",
        )

    run_guarded(body)


@app.command()
def show(name: str = typer.Argument(..., help="Release name.")) -> None:
    """Show every field of one release tuple."""
    from bot.cli.main import run_guarded
    from bot.services.releases import get_release

    def body() -> None:
        r = get_release(context(), name)
        m = r.manifest
        output.table(
            f"Release {m.name}",
            ["field", "value"],
            [
                ("model", f"{m.model.repo} @ {m.model.commit}"),
                ("weights", f"{m.weights.prefix} ({len(m.weights.objects)} objects, {sum(o.size for o in m.weights.objects):,} bytes)"),
                ("image", m.image),
                ("serving args", " ".join(m.serving.args)),
                ("serving env", ", ".join(f"{k}={v}" for k, v in m.serving.env.items()) or "-"),
                ("licence", f"{m.licence.version} sha256:{m.licence.sha256[:16]}… {m.licence.document or ''}"),
                ("evaluation report", m.evaluation_report or "-"),
                ("trust-remote-code exception", m.trust_remote_code_exception or "-"),
                ("tuple hash", r.tuple_hash),
                ("registered", f"{r.registered_by} at {r.registered_at:%Y-%m-%d %H:%M:%S} UTC"),
            ],
        )

    run_guarded(body)


@app.command()
def register(
    file: Path = typer.Argument(..., help="Release manifest (YAML)."),
    actor: str = typer.Option(None, "--as", help="Identity to record (default: cli:<login>)."),
) -> None:
    """Validate and register a release manifest; nothing is stored if any field is wrong."""
    from bot.cli.main import run_guarded
    from bot.services.errors import ValidationFailed
    from bot.services.releases import register_release

    def body() -> None:
        import yaml

        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValidationFailed([f"{file}: no such file"]) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise ValidationFailed([f"{file}: not valid YAML" + (f" at line {mark.line + 1}" if mark else "")]) from None
        result = register_release(context(), data, actor or default_actor())
        for w in result.warnings:
            output.warn(w)
        output.info(f"registered release {result.release.name} (tuple {result.release.tuple_hash[:12]})")

    run_guarded(body)


@app.command()
def schema() -> None:
    """Print the JSON schema of release manifests."""
    import json

    from bot.domain.release import manifest_json_schema

    output.stdout.print_json(json.dumps(manifest_json_schema()))
