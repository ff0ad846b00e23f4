"""Draining an endpoint, read through the live stand-in's ``/metrics`` over HTTP: done at once when idle, waiting for
the queue to empty, not drained when requests run past the deadline or the endpoint cannot be reached.
"""

from __future__ import annotations

from bot.adapters.endpoint import (
    HttpEndpointClient,
)
from tests.endpoint_support import chats_in_background
from tests.endpoint_support import endpoint as endpoint
from tests.endpoint_support import server as server


class FakeTime:
    """A monotonic clock that only moves when drain sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_drain_succeeds_at_once_when_idle(server, endpoint) -> None:
    fake = FakeTime()
    client = HttpEndpointClient(sleep=fake.sleep, clock=fake.clock)

    drained, last = client.drain(endpoint, timeout_seconds=60)

    assert drained
    assert last is not None and last.idle
    assert fake.slept == []


def test_drain_reports_not_drained_when_requests_run_past_the_deadline(server, endpoint) -> None:
    server.hold()
    threads = chats_in_background(server.url, ["a long generation"])
    assert server.wait_for(lambda s: s.running == 1)
    fake = FakeTime()
    client = HttpEndpointClient(sleep=fake.sleep, clock=fake.clock, drain_poll_seconds=5)

    drained, last = client.drain(endpoint, timeout_seconds=12)

    assert not drained
    assert last is not None and last.running == 1.0
    assert fake.slept == [5, 5, 2]  # polled until the deadline, never past it

    server.release()
    for thread in threads:
        thread.join(timeout=10)
    assert client.drain(endpoint, timeout_seconds=12)[0]


def test_drain_waits_for_the_queue_to_empty(server, endpoint) -> None:
    server.configure(max_running=1, max_waiting=4)
    server.hold()
    threads = chats_in_background(server.url, ["running", "queued"])
    assert server.wait_for(lambda s: s.running == 1 and s.waiting == 1)
    polls: list[float] = []

    def release_on_second_poll(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 2:
            server.release()
            assert server.wait_for(lambda s: s.running == 0 and s.waiting == 0)

    client = HttpEndpointClient(sleep=release_on_second_poll, drain_poll_seconds=0.01)

    drained, last = client.drain(endpoint, timeout_seconds=600)

    assert drained and last.idle
    assert len(polls) == 2  # busy twice, then empty
    for thread in threads:
        thread.join(timeout=10)


def test_drain_of_an_unreachable_endpoint_is_not_drained(server, endpoint) -> None:
    server.stop()
    fake = FakeTime()
    client = HttpEndpointClient(sleep=fake.sleep, clock=fake.clock, connect_timeout=1.0, drain_poll_seconds=10)

    drained, last = client.drain(endpoint, timeout_seconds=20)

    assert not drained and last is None
    assert sum(fake.slept) == 20
