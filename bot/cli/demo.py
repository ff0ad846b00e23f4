"""``kimi-ops demo``: the quickstart scenario on embedded defaults (SQLite, local stand-ins).

It grows with the product: today it migrates the embedded database, registers the
example Kimi K3 release and lists the release history.
"""

from __future__ import annotations

from pathlib import Path

import typer

from bot.cli import output

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "releases"


def demo() -> None:
    """Run the quickstart scenario non-interactively and print what happens."""
    import yaml

    from bot.adapters.store import schema
    from bot.bootstrap import build_context
    from bot.cli.main import run_guarded
    from bot.config import load_settings
    from bot.services.releases import get_release, list_releases, register_release
    from bot.services.errors import NotFound

    def body() -> None:
        settings = load_settings()
        schema.upgrade(settings.effective_database_url)
        ctx = build_context(settings)
        for path in sorted(EXAMPLES.glob("*.yaml")):
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            try:
                get_release(ctx, data["name"])
                output.info(f"release {data['name']} already registered")
            except NotFound:
                reg = register_release(ctx, data, "demo")
                output.info(f"registered release {reg.release.name} from {path.name}")
        output.table(
            "Release history",
            ["name", "model commit", "image digest", "registered by"],
            [(r.name, r.manifest.model.commit[:12], r.manifest.image.split("@sha256:")[-1][:12], r.registered_by) for r in list_releases(ctx)],
        )
        ctx.close()

    run_guarded(body)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
