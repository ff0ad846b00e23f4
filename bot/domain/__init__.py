"""The pure domain: release tuple, gates, deployment state machine, policies.

Nothing here performs I/O or imports an adapter; everything is testable with plain values.
"""
