"""The ``kimi-ops`` command line: thin entrypoints over ``bot.services``."""
