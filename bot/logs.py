"""Logging setup: readable text locally, one JSON object per line in production.

Records may carry ``correlation_id``; it is printed so a user-facing id can be found in the log. Every logger of
kimi-ops is in one hierarchy, ``kimi_ops.<layer>.<module>`` (:func:`logger_for`), so one name sets the level of a
layer (``kimi_ops.slack``) or of the whole bot (``kimi_ops``).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

ROOT_LOGGER = "kimi_ops"
# Bolt's own logger (signatures, listeners), at the Slack edge it serves.
BOLT_LOGGER = f"{ROOT_LOGGER}.slack.bolt"
_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def logger_name(module: str) -> str:
    """``bot.services.gates`` → ``kimi_ops.services.gates``; ``commands.deploy`` → ``kimi_ops.commands.deploy``."""
    return f"{ROOT_LOGGER}.{module.removeprefix('bot.')}"


def logger_for(module: str) -> logging.Logger:
    """The logger of the module named ``module`` (pass ``__name__``), in the ``kimi_ops`` hierarchy."""
    return logging.getLogger(logger_name(module))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "at": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class TextFormatter(logging.Formatter):
    """Readable one-line records; ``tracebacks=False`` keeps exceptions out of a person's terminal."""

    def __init__(self, fmt: str, tracebacks: bool = True) -> None:
        super().__init__(fmt)
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        if not self.tracebacks and record.exc_info:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        base = super().format(record)
        extras = {k: v for k, v in record.__dict__.items() if k not in _RESERVED}
        if extras:
            base += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return base


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(fmt: str | None = None, level: str | None = None, *, interactive: bool = False) -> None:
    """Configure the root logger; settings that fail to load fall back to text/INFO.

    ``interactive`` (the CLI) keeps tracebacks off the terminal and writes the
    full record to ``<data_dir>/kimi-ops.log``, where a correlation id leads.
    """
    log_file: Path | None = None
    try:
        from bot.config import load_settings

        settings = load_settings()
        fmt, level = fmt or settings.log_format, level or settings.log_level
        log_file = settings.data_dir / "kimi-ops.log"
    except Exception:  # the command itself reports a bad setting
        fmt, level = fmt or "text", level or "INFO"
    handlers: list[logging.Handler] = []
    console = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        console.setFormatter(JsonFormatter())
    else:
        console.setFormatter(TextFormatter(TEXT_FORMAT, tracebacks=not interactive))
    handlers.append(console)
    if interactive:
        console.setLevel(logging.WARNING)
        if log_file is not None:
            try:
                log_file.parent.mkdir(parents=True, exist_ok=True)
                file_handler = logging.FileHandler(log_file, encoding="utf-8")
                file_handler.setFormatter(TextFormatter(TEXT_FORMAT))
                handlers.append(file_handler)
            except OSError:
                pass
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level)
    for noisy in ("botocore", "urllib3", "kubernetes", "httpx", "httpcore", "alembic.runtime.migration"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
