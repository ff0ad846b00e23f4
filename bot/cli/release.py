"""``kimi-ops release``: register, list, inspect, build, diff and verify release tuples."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bot.cli import output
from bot.cli.common import context, default_actor
from bot.cli.conventions import EXIT_USAGE, OUTPUT_OPTION, Format, typer_app
from bot.cli.guard import run_guarded

if TYPE_CHECKING:
    from rich.progress import TaskID

    from bot.services.releases import ReleaseView

app = typer_app(help="Release tuples: the immutable rollback units.")


@app.command("list")
def list_(limit: int = typer.Option(50, "--limit", "-n", min=1, metavar="N", help="Show at most N releases."),
          fmt: Format = OUTPUT_OPTION) -> None:
    """List registered releases, newest first."""
    from bot.services.releases import list_releases

    def body() -> None:
        releases = list_releases(context(), limit)
        output.emit(fmt, [_release_data(r) for r in releases], lambda: output.table(
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
        ))

    run_guarded(body)


def _release_data(r: ReleaseView) -> dict[str, object]:
    """A release as ``-o json|yaml`` prints it: its name, hash, who registered it and when, and the whole manifest."""
    return {"name": r.name, "tuple_hash": r.tuple_hash, "registered_by": r.registered_by,
            "registered_at": r.registered_at, "manifest": r.manifest}


@app.command()
def show(name: str = typer.Argument(..., metavar="NAME", help="Release name."), fmt: Format = OUTPUT_OPTION) -> None:
    """Show every field of one release tuple."""
    from bot.services.releases import get_release

    def body() -> None:
        r = get_release(context(), name)
        output.emit(fmt, _release_data(r), lambda: _show_release(r))

    run_guarded(body)


def _show_release(r: ReleaseView) -> None:
    m = r.manifest
    output.table(
        f"Release {m.name}",
        ["field", "value"],
        [
            ("model", f"{m.model.repo} @ {m.model.commit}"),
            ("weights", f"{m.weights.prefix} ({len(m.weights.objects)} objects, "
                        f"{sum(o.size for o in m.weights.objects):,} bytes)"),
            ("image", m.image),
            ("serving args", " ".join(m.serving.args)),
            ("serving env", ", ".join(f"{k}={v if isinstance(v, str) else v.describe()}" for k, v in m.serving.env.items())
             or "-"),
            ("licence", f"{m.licence.version} sha256:{m.licence.sha256[:16]}… {m.licence.document or ''}"),
            ("evaluation report", m.evaluation_report or "-"),
            ("trust-remote-code exception", m.trust_remote_code_exception or "-"),
            ("tuple hash", r.tuple_hash),
            ("registered", f"{r.registered_by} at {r.registered_at:%Y-%m-%d %H:%M:%S} UTC"),
        ],
    )


@app.command()
def register(
    file: Path = typer.Argument(..., metavar="FILE", help="Release manifest (YAML)."),
    actor: str = typer.Option(None, "--as", metavar="USER", help="Identity to record (default: cli:<login>)."),
) -> None:
    """Validate and register a release manifest; nothing is stored if any field is wrong."""
    from bot.services.release_build import load_yaml_file
    from bot.services.releases import register_release

    def body() -> None:
        data = load_yaml_file(file)
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


class _ByteProgress:
    """Progress bars on stderr while objects without S3 checksums are streamed and hashed."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TransferSpeedColumn,
        )

        self.bars = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
            console=output.stderr, transient=True,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> _ByteProgress:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    def __call__(self, key: str, done: int, total: int) -> None:
        if key not in self.tasks:
            self.tasks[key] = self.bars.add_task(f"sha256 {key.rsplit('/', 1)[-1]}", total=total)
        self.bars.update(self.tasks[key], completed=done, total=total)


def _provenance(base_image: str | None, cuda: str | None, driver: str | None, vllm_commit: str | None) -> dict[str, str] | None:
    """All four provenance options, or none (the artifact gate then says what is missing)."""
    from bot.services.errors import Refused

    given = {"base_image": base_image, "cuda": cuda, "driver": driver, "vllm_commit": vllm_commit}
    if not any(given.values()):
        return None
    missing = [f"--{k.replace('_', '-')}" for k, v in given.items() if not v]
    if missing:
        raise Refused(f"provenance needs all of --base-image, --cuda, --driver and --vllm-commit; missing {', '.join(missing)}")
    return {k: str(v) for k, v in given.items()}


@app.command()
def build(
    weights: str = typer.Option(..., "--weights", help="Versioned S3 prefix of the weights: s3://bucket/prefix/."),
    image: str = typer.Option(..., "--image", help="Serving image pinned by digest: REPO@sha256:<64 hex>."),
    model_repo: str = typer.Option(..., "--model-repo", help="Upstream model repository, e.g. moonshotai/Kimi-K3."),
    model_commit: str = typer.Option(..., "--model-commit", help="Full 40-hex revision that was mirrored."),
    licence_version: str = typer.Option(..., "--licence-version", help="Reviewed licence version."),
    licence: str = typer.Option(..., "--licence", help="s3:// URI of the reviewed licence document."),
    serving_args: Path = typer.Option(
        None, "--serving-args",
        help="YAML: list of vLLM args, or {args: [...], env: {...}}. Default: the guide's launch args.",
    ),
    name: str = typer.Option(None, "--name", help="Release name (default: <model>-<commit[:12]>)."),
    evaluation_report: str = typer.Option(None, "--evaluation-report", help="Where the evaluation report lives."),
    trust_remote_code_exception: str = typer.Option(
        None, "--trust-remote-code-exception", help="Security exception allowing --trust-remote-code.",
    ),
    base_image: str = typer.Option(None, "--base-image", help="Provenance: base image of the serving image, by digest."),
    cuda: str = typer.Option(None, "--cuda", help="Provenance: CUDA version in the image, e.g. 12.9.1."),
    driver: str = typer.Option(None, "--driver", help="Provenance: NVIDIA driver versions it runs on, e.g. '>=575.57'."),
    vllm_commit: str = typer.Option(None, "--vllm-commit", help="Provenance: full 40-hex vLLM commit of the image."),
    out: Path = typer.Option(None, "--out", metavar="FILE", help="Manifest file to write (default: ./<name>.yaml)."),
    # `-o` is the output format (table|json|yaml) of every read command; the file was once taken as `-o FILE`.
    old_out: str | None = typer.Option(None, "--output", "-o", hidden=True),
) -> None:
    """Write a release manifest by listing the weights prefix and reading every object's SHA-256."""

    if old_out is not None:
        output.error(f"release build writes its manifest with --out FILE (e.g. --out {old_out}); -o is the output "
                     "format (table|json|yaml) of read commands. Nothing was built.")
        raise typer.Exit(EXIT_USAGE)
    from bot.services.release_build import (
        DEFAULT_SERVING_ARGS,
        DEFAULT_SERVING_ENV,
        BuildRequest,
        build_manifest,
        read_serving_file,
        write_manifest,
    )

    def body() -> None:
        args, env = read_serving_file(serving_args) if serving_args else (list(DEFAULT_SERVING_ARGS), dict(DEFAULT_SERVING_ENV))
        request = BuildRequest(
            weights=weights, image=image, model_repo=model_repo, model_commit=model_commit, licence_version=licence_version,
            licence=licence, name=name, serving_args=args, serving_env=env, evaluation_report=evaluation_report,
            trust_remote_code_exception=trust_remote_code_exception,
            provenance=_provenance(base_image, cuda, driver, vllm_commit),
        )
        with _ByteProgress() as progress:
            manifest = build_manifest(request, progress=progress)
        target = out or Path(f"{manifest.name}.yaml")
        write_manifest(manifest, target)
        total = sum(o.size for o in manifest.weights.objects)
        output.info(f"wrote {target}: release {manifest.name}, {len(manifest.weights.objects)} objects, {total:,} bytes")

    run_guarded(body)


@app.command()
def diff(
    a: str = typer.Argument(..., metavar="FROM", help="Release to compare from (e.g. the one running)."),
    b: str = typer.Argument(..., metavar="TO", help="Release to compare to (e.g. the candidate)."),
    fmt: Format = OUTPUT_OPTION,
) -> None:
    """Field-by-field difference of two release tuples."""
    from bot.domain.release_diff import render_diff
    from bot.services.releases import diff_releases

    def body() -> None:
        found = diff_releases(context(), a, b)
        output.emit(fmt, found, lambda: output.info(render_diff(found)))

    run_guarded(body)


@app.command()
def verify(
    name: str = typer.Argument(..., metavar="NAME", help="Release name."),
    endpoint: str | None = typer.Option(
        None, "--endpoint", help="Endpoint the release is judged for (default: the only one configured)."
    ),
) -> None:
    """Run the artifact gate's checks against S3 and ECR; exits 1 when the report blocks approval."""
    from bot.services.artifact_gate import verify_release

    def body() -> None:
        with _ByteProgress() as progress:
            report = verify_release(context(), name, progress=progress, endpoint=endpoint)
        output.table(f"Artifact checks: {name}", ["check", "status", "reason"],
                     [(c.name, c.status, c.reason) for c in report.checks])
        output.info(report.summary)
        if not report.approvable:
            output.error(f"{len(report.blocking)} check(s) block the artifact gate: {', '.join(c.name for c in report.blocking)}")
            raise typer.Exit(1)

    run_guarded(body)
