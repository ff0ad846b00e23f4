"""The Kubernetes Lease leader lock against kmock's Kubernetes emulator (real HTTP, the official client)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Iterator

import pytest
from kmock import KubernetesEmulator, Server
from kubernetes import client

from bot.adapters.clock import FrozenClock
from bot.adapters.leader import KubernetesLease
from tests.conftest import START


class EmulatorThread:
    """kmock's asyncio server on an ephemeral 127.0.0.1 port, in a thread of its own."""

    def __init__(self) -> None:
        self.url = ""
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with KubernetesEmulator() as emulator, Server(emulator, host="127.0.0.1") as server:
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> "EmulatorThread":
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("kmock did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        self._loop.close()


@pytest.fixture()
def api() -> Iterator[client.CoordinationV1Api]:
    with EmulatorThread() as emulator:
        config = client.Configuration()
        config.host = emulator.url
        api_client = client.ApiClient(config)
        yield client.CoordinationV1Api(api_client)
        api_client.close()


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
