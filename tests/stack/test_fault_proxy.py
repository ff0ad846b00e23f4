"""The fault proxy itself: ``unreachable`` resets the connections open through it, as a dead host does.

A client waiting for an answer when the cut comes must learn at once that its connection is gone. The proxy once
closed its sockets under the threads blocked reading them; the kernel kept them open until those reads returned,
so no reset went out and the answer on its way was dropped: a pool's pre-ping in flight at the cut waited for ever
(the worker of ``test_acknowledged_work`` then held its SIGTERM until ``serve`` killed it, 50 s later).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import suppress

import pytest

from tests.fault_support import FaultProxy, unreachable

HANG_SECONDS = 30  # a bound on a hang, not a performance expectation: the reset comes at once


class Upstream:
    """A TCP server that answers each request only when :attr:`answer` is set."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = threading.Event()
        self.answer = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with suppress(OSError):
            conn, _ = self.listener.accept()
            with conn:
                while conn.recv(100):
                    self.received.set()
                    self.answer.wait(HANG_SECONDS)
                    conn.sendall(b"answer")

    def close(self) -> None:
        self.answer.set()
        self.listener.close()


@pytest.fixture()
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture()
def proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    proxy = FaultProxy("127.0.0.1", upstream.port)
    yield proxy
    proxy.close()


def test_a_connection_waiting_for_its_answer_is_reset_when_the_proxy_becomes_unreachable(
        upstream: Upstream, proxy: FaultProxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.settimeout(HANG_SECONDS)
        client.sendall(b"ping")
        assert upstream.received.wait(HANG_SECONDS)
        proxy.fail(unreachable())
        upstream.answer.set()  # the answer comes after the cut: it must not reach the client
        with pytest.raises(ConnectionResetError):
            client.recv(100)
    assert proxy.met >= 1


def test_an_idle_connection_is_reset_when_the_proxy_becomes_unreachable(upstream: Upstream, proxy: FaultProxy) -> None:
    upstream.answer.set()
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.settimeout(HANG_SECONDS)
        client.sendall(b"ping")
        assert client.recv(100) == b"answer"
        proxy.fail(unreachable())
        with pytest.raises(ConnectionResetError):
            client.recv(100)


def test_after_heal_new_connections_pass_through_again(upstream: Upstream, proxy: FaultProxy) -> None:
    proxy.fail(unreachable())
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port)).close()
    proxy.heal()
    upstream.answer.set()
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.settimeout(HANG_SECONDS)
        client.sendall(b"ping")
        assert client.recv(100) == b"answer"
