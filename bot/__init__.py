"""kimi-ops: gated, reversible Kimi K3 deployments driven from Slack.

Layers (inner to outer): ``bot.domain`` (pure rules), ``bot.adapters`` (database,
cluster, AWS, endpoint, Slack), ``bot.services`` (use cases), and the entrypoints
``bot.cli``, ``commands`` (Slack) and ``jobs`` (scheduler).
"""

from __future__ import annotations

from functools import cache


@cache
def _version() -> str:
    # Reading the installed metadata costs tens of milliseconds: only ``--version`` and /metrics ask for it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kimi-ops")
    except PackageNotFoundError:  # running from a source tree without installation
        return "0.0.0+source"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
