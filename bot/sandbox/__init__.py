"""Local stand-ins used by tests and by `kimi-ops demo` / `kimi-ops sandbox`.

They need the optional ``sandbox`` extra (moto's server, kmock, aiohttp), which
every module here imports lazily, inside the function that starts a stand-in:
importing this package costs nothing and works on a production install.
:func:`require_extra` tells a command, before it starts anything, whether the
extra is there.
"""

from __future__ import annotations

import importlib.util

from bot.sandbox.aws import (
    MotoStandIn,
    seed_good_release,
    set_scan_findings,
    start_moto,
)

# What the stand-ins import when they start: moto's server (which needs flask), kmock, and aiohttp under kmock.
EXTRA_MODULES = ("moto", "flask", "kmock", "aiohttp")
INSTALL_HINT = "the sandbox is not installed: pip install 'kimi-ops[sandbox]'"


class SandboxNotInstalled(RuntimeError):
    """The ``sandbox`` extra is missing; the message is the one line to show."""


def missing_modules() -> list[str]:
    """The extra's top-level modules this Python cannot import."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]


def require_extra() -> None:
    """Raise :class:`SandboxNotInstalled` unless every module the stand-ins need is installed."""
    if missing_modules():
        raise SandboxNotInstalled(INSTALL_HINT)


__all__ = [
    "INSTALL_HINT",
    "MotoStandIn",
    "SandboxNotInstalled",
    "missing_modules",
    "require_extra",
    "seed_good_release",
    "set_scan_findings",
    "start_moto",
]
