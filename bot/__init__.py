"""kimi-ops: gated, reversible Kimi K3 deployments driven from Slack.

Layers (inner to outer): ``bot.domain`` (pure rules), ``bot.adapters`` (database,
cluster, AWS, endpoint, Slack), ``bot.services`` (use cases), and the entrypoints
``bot.cli``, ``commands`` (Slack) and ``jobs`` (scheduler).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kimi-ops")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+source"
