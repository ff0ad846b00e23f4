"""What the whole-stack test worlds share: waiting for the engine on another thread, and a person's part at a gate.

:func:`wait_until` polls a condition (the bound only guards against a hang, it is
never what a test asserts); :func:`in_background` runs work (usually
``engine.advance``) on a thread and :func:`joined` hands back its result or
re-raises its exception. :func:`live_with_users` makes a sandbox endpoint's release
live with users admitted, where a drill on a live endpoint starts. :class:`SandboxWorld` is the part of a test world over a
:class:`bot.sandbox.stack.Sandbox` that every such module repeated: the context,
the stand-ins it looks at, the two shipped releases, and an approver deciding a
waiting gate (accepting a traffic gate's proposed limits first, as a person does)
and advancing through the gates to a state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from bot.adapters.store.models import Deployment
from bot.domain.checks import GateReport
from bot.sandbox.gateway import GatewayStandIn
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.stack import ADMIN, APPROVER_1, DEPLOYER
from bot.services.access import Identity
from bot.services.admission import override_admission
from bot.services.deployments import decide_gate
from bot.services.errors import Refused
from bot.services.traffic_gate import accept_proposed_limits

APPROVER = Identity(APPROVER_1)
WAIT_SECONDS = 90  # a bound on waiting for the engine in another thread, not a performance expectation

T = TypeVar("T")


def wait_until(what: str, condition: Callable[[], T], timeout: float = WAIT_SECONDS, *, poll: float = 0.02,
               found: Callable[[], object] | None = None) -> T:
    """Poll until ``condition`` gives something true and return it; fail naming ``what`` if ``timeout`` passes first
    (and what ``found`` says is there instead)."""
    deadline = time.monotonic() + timeout
    while not (seen := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:g} s" + ("" if found is None else f"; found: {found()}"))
        time.sleep(poll)
    return seen


def in_background(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``work`` on a thread; its result (or exception) lands in the returned list."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # handed to the test, which re-raises it
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def joined(thread: threading.Thread, result: list[Any], timeout: float = WAIT_SECONDS) -> Any:
    """The work's result once its thread ended (its exception re-raised); fails if it is still running."""
    thread.join(timeout)
    assert not thread.is_alive() and result, "the engine did not return"
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def live_with_users(sandbox: Any, endpoint: str) -> None:
    """``endpoint`` of ``sandbox`` running its first release, once the model pod is ready recorded as the live
    deployment, and open to users."""
    ctx, release = sandbox.ctx, sandbox.releases[0]
    spec = ctx.settings.endpoint(endpoint)
    with ctx.uow() as uow:
        row, rel = uow.endpoints.get(endpoint), uow.releases.get(release.name)
        endpoint_id, release_id, tuple_hash = row.id, rel.id, rel.tuple_hash
    manifest = ctx.ports.cluster.render(release, spec, tuple_hash)
    ctx.ports.cluster.apply(spec, manifest)

    def ready() -> bool:
        health = ctx.ports.cluster.health(spec)
        return health is not None and any(p.ready for p in health.pods)

    wait_until(f"ready model pod of {endpoint}", ready)
    now = ctx.clock.now()
    with ctx.uow() as uow:
        uow.deployments.add(Deployment(endpoint_id=endpoint_id, release_id=release_id, kind="deploy", state="live",
                                       requested_by=DEPLOYER, created_at=now, updated_at=now, finished_at=now,
                                       applied_manifest=manifest.text, manifest_hash=manifest.sha256))
        uow.commit()
    override_admission(ctx, endpoint, "open", "users on the live release", Identity(ADMIN))


class SandboxWorld:
    """Mixed into a test world that has a ``sandbox`` (:class:`bot.sandbox.stack.Sandbox` or a subclass)."""

    sandbox: Any
    engine: Any  # the production Engine driving the world's deployments

    @property
    def ctx(self) -> Any:
        return self.sandbox.ctx

    @property
    def gateway(self) -> GatewayStandIn:
        gateway: GatewayStandIn = self.sandbox.stand_ins["traffic"].gateway
        return gateway

    @property
    def model(self) -> OpenAIServer:
        model: OpenAIServer = self.sandbox.stand_ins["openai"]
        return model

    @property
    def releases(self) -> tuple[str, str]:
        older, newer = (r.name for r in self.sandbox.releases)
        return older, newer

    @contextmanager
    def endpoint_changed(self, name: str, *, ramp: dict[str, Any] | None = None, **changes: Any) -> Iterator[None]:
        """Endpoint ``name``'s stored settings with ``changes`` (and ``ramp`` changes) while the block runs, then as
        before: the engine reads a deployment's endpoint from its row, as after an edit of the configuration."""
        with self.ctx.uow() as uow:
            row = uow.endpoints.get(name)
            saved = dict(row.settings)
            row.settings = {**saved, **changes, "ramp": {**saved["ramp"], **(ramp or {})}}
            uow.commit()
        try:
            yield
        finally:
            with self.ctx.uow() as uow:
                uow.endpoints.get(name).settings = saved
                uow.commit()

    def approve(self, deployment_id: int, *, until: str) -> Any:
        """Advance, approving each gate that waits, until the deployment is in state ``until``."""
        view = self.engine.advance(deployment_id)
        while view.state != until:
            self.decide(view)
            view = self.engine.advance(deployment_id)
        return view

    def decide(self, view: Any, approver: Identity = APPROVER) -> None:
        """``approver`` approves the gate ``view`` waits at (a traffic gate's proposed limits accepted first), without
        advancing."""
        assert view.pending is not None and view.pending.approvable, (view.state, view.state_reason, blocking(view))
        if view.pending.gate == "traffic":
            self.accept_limits(view.id, view.pending.report_hash, approver)
        decide_gate(self.ctx, view.id, view.pending.gate, "approved", approver,
                    seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)

    def accept_limits(self, deployment_id: int, report_hash: str, approver: Identity = APPROVER) -> None:
        """Take the traffic gate's proposed limits, as an approver would (unless the endpoint already runs with them)."""
        try:
            accept_proposed_limits(self.ctx, None, deployment_id, approver, seen_report_hash=report_hash)
        except Refused as refused:
            assert "nothing to accept" in str(refused)


def blocking(view: Any) -> list[tuple[str, str, str]]:
    """The checks that keep ``view``'s pending gate from being approved (for a failed test's message)."""
    if view.pending is None:
        return []
    return [(c.name, c.status, c.reason) for c in GateReport.model_validate(view.pending.report).blocking]
