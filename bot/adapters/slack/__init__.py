"""Slack adapters: Block Kit rendering, the outbox notifier, and user-group lookups over the Web API."""
