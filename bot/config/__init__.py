"""The one place settings come from.

``Settings`` reads environment variables prefixed ``KIMI_`` (plus Slack's own
``SLACK_*`` names) and, when ``KIMI_CONFIG`` names a YAML file, endpoints and
roles from it. Environment variables win over the file. Nothing else in the
code base reads ``os.environ``.

A bad setting raises :class:`ConfigError` whose message is one line naming the
setting, what is wrong and an example of a good value; the CLI (and ``serve``
at start) prints it and exits with status 2. List settings take JSON
(``["us-east-1"]``) or the comma-separated form people write
(``us-east-1,us-west-2``). The ``KIMI_CONFIG`` file and the evaluation set are
read at start, within size and alias limits (:mod:`bot.safe_yaml`), and must
parse.

The package, by idea: :mod:`~bot.config.settings` (the process's ``Settings``), :mod:`~bot.config.endpoint`,
:mod:`~bot.config.service` and :mod:`~bot.config.roles` (what the ``KIMI_CONFIG`` file declares),
:mod:`~bot.config.sources` (environment and file), :mod:`~bot.config.loading` (one-line errors) and
:mod:`~bot.config.examples` (a good value of each setting). Callers import every name from ``bot.config``.
"""

from __future__ import annotations

from bot.config.endpoint import EndpointKind, EndpointSettings, PairSide, RampSettings, RequestLimits
from bot.config.examples import EXAMPLES
from bot.config.loading import load_settings
from bot.config.roles import Role, Roles
from bot.config.service import ServiceRoute, ServiceSettings, ServiceSide
from bot.config.settings import Settings
from bot.config_error import ConfigError

__all__ = [
    "EXAMPLES",
    "ConfigError",
    "EndpointKind",
    "EndpointSettings",
    "PairSide",
    "RampSettings",
    "RequestLimits",
    "Role",
    "Roles",
    "ServiceRoute",
    "ServiceSettings",
    "ServiceSide",
    "Settings",
    "load_settings",
]
