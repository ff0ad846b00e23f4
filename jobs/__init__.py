"""Scheduler entrypoints: module-level job functions that call services and notify."""
