"""The Slack app's middleware, one per module: redeliveries, replays, metrics."""
