"""The ``kimi-ops`` console script: a Typer app whose commands call services.

Errors meant for a person (:class:`ConfigError`, :class:`UserError`,
:class:`SchemaMismatch`) are printed as one line on stderr; anything else is
logged with a correlation id and only that id is shown. No traceback reaches
the operator.
"""

from __future__ import annotations

import gc
import sys

import typer

from bot.cli import output
from bot.cli.conventions import EXIT_CODES_HELP, EXIT_USAGE, typer_app
from bot.config_error import ConfigError
from bot.logs import logger_for

log = logger_for(__name__)

app = typer_app(
    name="kimi-ops",
    help="Gated, reversible Kimi K3 deployments on SageMaker HyperPod and EKS.",
    epilog=EXIT_CODES_HELP,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish and PowerShell
)


def _version(value: bool) -> None:
    if value:
        from bot import __version__

        typer.echo(f"kimi-ops {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """Gated, reversible Kimi K3 deployments on SageMaker HyperPod and EKS."""


# Sub-command groups register themselves here; one line each, in help order.
from bot.cli import capacity as _capacity  # noqa: E402
from bot.cli import db as _db  # noqa: E402
from bot.cli import demo as _demo  # noqa: E402
from bot.cli import drills as _drills  # noqa: E402
from bot.cli import governance as _governance  # noqa: E402
from bot.cli import jobs as _jobs  # noqa: E402
from bot.cli import release as _release  # noqa: E402
from bot.cli import serve as _serve  # noqa: E402
from bot.cli import shell as _shell  # noqa: E402
from bot.cli import worker as _worker  # noqa: E402
from bot.cli import workflow as _workflow  # noqa: E402

app.add_typer(_db.app, name="db")
app.add_typer(_release.app, name="release")
_demo.register(app)
_workflow.register(app)
_governance.register(app)
_jobs.register(app)
_drills.register(app)
_capacity.register(app)
_serve.register(app)
_shell.register(app)
_worker.register(app)


def _only_help(args: list[str]) -> bool:
    """Whether ``args`` only ask for help or the version (no command runs; Typer answers and exits)."""
    return not args or any(a in ("--help", "-h", "--version", "--show-completion", "--install-completion") for a in args)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = argv if argv is not None else sys.argv[1:]
    if not _only_help(args):
        # Reading the settings for the log format loads pydantic and the whole configuration (~0.5 s);
        # help and the version log nothing, and must answer at once.
        from bot.logs import configure_logging

        configure_logging(interactive=True)
    try:
        app(args=args, prog_name="kimi-ops")
    except ConfigError as exc:  # raised while Typer builds defaults
        output.error(str(exc))
        sys.exit(EXIT_USAGE)
    finally:
        if argv is None:  # the process ends here (a caller passing argv, such as a test, goes on)
            # The interpreter's last garbage collection would walk every object left (moto's, kmock's, botocore's,
            # the ORM's): 0.7-1.3 CPU-s and seconds of wall after `kimi-ops demo` printed its last line. Frozen,
            # they are skipped; the OS frees them, and atexit handlers (log flushes, temporary files) still run.
            gc.freeze()
