"""Chat-neutral presentation: what a person should see, before any chat or terminal format.

Slack commands (``commands/``), the Slack adapter (``bot/adapters/slack``) and
the CLI (``bot/cli``) describe messages with these frozen parts and shared
tables; :mod:`bot.adapters.slack.blocks` turns parts into Block Kit within
Slack's limits and maps :class:`bot.views.icons.Icon` to Slack emoji, and the
CLI prints the same tables as plain text. The layer reads domain values and
read models (``bot.domain``) only: the domain and the services never import it
(an import-linter contract), so no decision depends on how it is shown.
"""
