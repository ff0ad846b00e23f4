"""The Kubernetes Lease leader lock against the Kubernetes stand-in (kmock over real HTTP, the official client).

The stand-in honours a ``resourceVersion`` precondition on merge patches, as the
API server does, so two replicas racing for one expired Lease are tested for real.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from bot.adapters.clock import FrozenClock
from bot.adapters.leader import KubernetesLease
from bot.sandbox.kube import start_kube
from tests.conftest import START


@pytest.fixture()
def api() -> Iterator[client.CoordinationV1Api]:
    with start_kube() as kube:
        yield client.CoordinationV1Api(kube.api_client())


def test_one_replica_holds_the_lease_until_it_expires_or_is_released(api: client.CoordinationV1Api) -> None:
    clock = FrozenClock(START)
    a = KubernetesLease(api, "kimi", identity="pod-a", duration_seconds=30, now=clock.now)
    b = KubernetesLease(api, "kimi", identity="pod-b", duration_seconds=30, now=clock.now)

    assert a.acquire()  # creates the Lease
    assert not b.acquire()
    clock.advance(dt.timedelta(seconds=20))
    assert a.acquire()  # renews
    clock.advance(dt.timedelta(seconds=20))
    assert not b.acquire()  # renewed 20 s ago: still a's

    clock.advance(dt.timedelta(seconds=31))  # a stopped renewing (crashed, partitioned)
    assert b.acquire()
    assert not a.acquire()
    lease = api.read_namespaced_lease("kimi-ops-scheduler", "kimi")
    assert lease.spec.holder_identity == "pod-b" and lease.spec.lease_transitions == 1
    assert lease.spec.lease_duration_seconds == 30

    b.release()  # a clean shutdown hands over at once
    assert a.acquire()
    assert api.read_namespaced_lease("kimi-ops-scheduler", "kimi").spec.holder_identity == "pod-a"


class Interrupted(KubernetesLease):
    """A replica that another replica overtakes between reading the Lease and writing it."""

    def __init__(self, *args: Any, rival: KubernetesLease, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rival = rival
        self.rival_won: bool | None = None

    def _patch(self, body: dict[str, Any]) -> None:
        self.rival_won = self.rival.acquire()
        super()._patch(body)


def test_two_replicas_racing_for_an_expired_lease_cannot_both_lead(api: client.CoordinationV1Api) -> None:
    clock = FrozenClock(START)
    old = KubernetesLease(api, "kimi", identity="pod-old", now=clock.now)
    assert old.acquire()
    clock.advance(dt.timedelta(seconds=31))  # the holder died: the Lease is up for grabs

    c = KubernetesLease(api, "kimi", identity="pod-c", now=clock.now)
    b = Interrupted(api, "kimi", identity="pod-b", now=clock.now, rival=c)
    assert not b.acquire()  # its write carried the resourceVersion it read: 409, c was first
    assert b.rival_won is True
    assert api.read_namespaced_lease("kimi-ops-scheduler", "kimi").spec.holder_identity == "pod-c"
    assert c.acquire() and not b.acquire()


def test_two_replicas_creating_the_first_lease_cannot_both_lead(api: client.CoordinationV1Api) -> None:
    clock = FrozenClock(START)
    c = KubernetesLease(api, "kimi", identity="pod-c", now=clock.now)

    class CreatesLate(KubernetesLease):
        def _body(self, **kwargs: Any) -> dict[str, Any]:
            if kwargs.get("version") is None:  # about to create: c gets there first
                assert c.acquire()
            return super()._body(**kwargs)

    b = CreatesLate(api, "kimi", identity="pod-b", now=clock.now)
    assert not b.acquire()  # 409 AlreadyExists
    assert api.read_namespaced_lease("kimi-ops-scheduler", "kimi").spec.holder_identity == "pod-c"
