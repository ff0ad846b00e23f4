"""Slack entrypoints: one module per ``/kimi`` sub-command or interactive action.

Each module parses, authorises, calls one service in ``bot.services`` and renders Block Kit.
"""
