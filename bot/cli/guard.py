"""Every CLI command's body runs guarded: a failure meant for a person is one line and an exit code, anything else
is logged with a correlation id and only that id is shown. No traceback reaches the operator."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import typer

from bot.cli import output
from bot.cli.conventions import EXIT_BUG, EXIT_SCHEMA, EXIT_USAGE
from bot.config_error import ConfigError
from bot.logs import logger_for

log = logger_for(__name__)


def run_guarded(fn: Callable[[], Any]) -> Any:
    """Run a CLI body, turning every failure into one line and an exit code."""
    from bot.adapters.store.schema import SchemaMismatch
    from bot.services.errors import UserError, ValidationFailed

    try:
        return fn()
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except ConfigError as exc:
        output.error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    except SchemaMismatch as exc:
        output.error(str(exc))
        raise typer.Exit(EXIT_SCHEMA) from None
    except ValidationFailed as exc:
        output.error(f"{len(exc.problems)} problem(s); nothing was stored:")
        for problem in exc.problems:
            output.error(f"  - {problem}")
        raise typer.Exit(exc.exit_code) from None
    except UserError as exc:
        output.error(str(exc))
        raise typer.Exit(exc.exit_code) from None
    except Exception:
        correlation = uuid.uuid4().hex[:12]
        log.exception("unexpected error", extra={"correlation_id": correlation})
        output.error("kimi-ops hit an unexpected error; kimi-ops.log in the data directory has the details "
                     f"under correlation id {correlation}")
        raise typer.Exit(EXIT_BUG) from None
