"""The deployment engine: runs a deployment's steps until it waits for a person or ends.

:mod:`~bot.services.engine.driver` holds the :class:`Engine` and the table of steps; ``run`` what every step
works with (the snapshot, moves under the row lock, the step outcomes); ``leases`` who drives a deployment;
``recovery`` resuming after a crash; ``closed_door`` the proof that no user reached a candidate; and one module
per family of steps: ``gates``, ``exposure`` (close, drain, reopen), ``apply`` (apply, rollout, readiness,
evaluation) and ``ramp``. The step modules do not import each other.
"""

from bot.services.engine.driver import READINESS_PAUSE_SECONDS, STEPS, Engine

__all__ = ["READINESS_PAUSE_SECONDS", "STEPS", "Engine"]
