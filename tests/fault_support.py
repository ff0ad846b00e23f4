"""The fault world: the sandbox with a misbehaving-on-demand proxy in front of each stand-in kimi-ops talks to.

:class:`FaultProxy` is a TCP proxy that passes bytes through until a test makes it
misbehave as the real system does when it breaks: ``unreachable`` (its listener is
closed: connection refused, open connections reset), ``status`` (every request
answered with an HTTP error and the system's own error body), ``garbage`` (200 with
bytes that are no protocol at all) or ``hang`` (the request is read and never
answered). It reads just enough HTTP to see each request line, so a fault can start
*after* a given request (``after``): "the API server fails once the apply went
through" is mid-rollout, deterministically.

:class:`FaultSandbox` is :class:`bot.sandbox.stack.Sandbox` itself (stand-ins
started and seeded exactly as the sandbox does, so every gate check the sandbox
satisfies is satisfied here too), except that kimi-ops's own adapters reach the
Kubernetes API, S3, ECR, the model endpoint and (optionally) PostgreSQL through one
proxy each. The stand-ins' own clients (the operator simulator, the gateway, moto's
seeding) go direct: only kimi-ops sees the outage.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client as k8s
from sqlalchemy import make_url

from bot.config import Settings
from bot.sandbox.stack import Sandbox
from bot.services.context import Ports

REQUEST_LINE = re.compile(rb"(?m)^(GET|POST|PUT|PATCH|DELETE|HEAD) (\S+) HTTP/1\.[01]\r$")


@dataclass(frozen=True)
class Misbehaviour:
    """What a :class:`FaultProxy` does instead of passing a request through."""

    kind: str  # "unreachable" | "status" | "garbage" | "hang"
    status: int = 500
    body: bytes = b""
    content_type: str = "application/json"


def unreachable() -> Misbehaviour:
    return Misbehaviour("unreachable")


def status(code: int, body: bytes | str, content_type: str = "application/json") -> Misbehaviour:
    return Misbehaviour("status", code, body.encode() if isinstance(body, str) else body, content_type)


def garbage() -> Misbehaviour:
    return Misbehaviour("garbage", 200, b"\x00\xff<html>502 bad gateway</html>\x1b[0m{\"id\": ", "application/json")


def hang() -> Misbehaviour:
    return Misbehaviour("hang")


# What each real system says when it breaks, as the proxy serves it.
KUBE_500 = status(500, '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                       '"message":"etcdserver: request timed out","reason":"InternalError","code":500}')
S3_500 = status(500, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code><Message>We encountered "
                     "an internal error. Please try again.</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>",
                "application/xml")
ECR_503 = status(503, '{"__type":"ServiceUnavailableException","message":"Service is unavailable"}',
                 "application/x-amz-json-1.1")
VLLM_500 = status(500, '{"object":"error","message":"EngineCore encountered an issue. See stack trace (above) for the root '
                       'cause.","type":"InternalServerError","param":null,"code":500}')

REASONS = {200: "OK", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


class FaultProxy:
    """A TCP proxy in front of ``target`` (``host:port``) that misbehaves while :meth:`fail` says so."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._lock = threading.Lock()
        self._fault: Misbehaviour | None = None
        self._healed = threading.Event()
        self._after: list[tuple[re.Pattern[bytes], Callable[[], None]]] = []
        self._due: list[Callable[[], None]] = []
        self._open: set[socket.socket] = set()
        self._closed = False
        self.seen: list[str] = []  # request lines, in order (for the tests' own curiosity)
        self.met = 0  # requests answered with a fault and open connections cut: proof the fault was felt
        self._listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ control
    def fail(self, fault: Misbehaviour | None) -> None:
        """Misbehave from the next request on (``None``: pass through again)."""
        with self._lock:
            previous, self._fault = self._fault, fault
            if fault is None:
                self._healed.set()
            else:
                self._healed.clear()
        if fault is not None and fault.kind == "unreachable":
            self._sever()
            if previous is None or previous.kind != "unreachable":
                self._stop_listening()
        elif previous is not None and previous.kind == "unreachable":
            self._listen()

    def heal(self) -> None:
        self.fail(None)

    def after(self, pattern: str, then: Callable[[], None]) -> None:
        """Once a request whose line matches ``pattern`` went through, run ``then`` before the next request."""
        with self._lock:
            self._after.append((re.compile(pattern.encode()), then))

    def close(self) -> None:
        self._closed = True
        self._healed.set()
        self._sever()
        self._stop_listening()

    # ------------------------------------------------------------------ serving
    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener, self.port = listener, listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _stop_listening(self) -> None:
        """Refuse new connections: shut the listener down first, which wakes the thread blocked in ``accept``
        (a bare ``close`` leaves that call holding the socket, and it would accept one more connection)."""
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with suppress(OSError):
            self._listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            # Tracked here, not in the thread that serves it: a cut between the two would miss it, and it would pass
            # bytes through the outage.
            with self._lock:
                refused = listener.fileno() == -1 or listener is not self._listener or (
                    self._fault is not None and self._fault.kind == "unreachable")
                if not refused:
                    self._open.add(conn)
            if refused:  # it stopped listening meanwhile
                conn.close()
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _track(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._open.update(sockets)

    def _sever(self) -> None:
        """Reset every open connection, as a dead host's.

        Each socket is shut for reading before it is closed. A bare close leaves the socket open under the thread
        blocked in its ``recv`` (the kernel keeps it until that call returns): no reset went out, and a client
        waiting for its answer (a pool's pre-ping) waited for ever, since the pipe dropped the answer. Woken, that
        thread lets go of the socket and the close resets it. Under the lock: the woken threads close their
        sockets in :meth:`_let_go`, which would otherwise send an end of file before the reset.
        """
        with self._lock:
            dropped, self._open = self._open, set()
            self.met += len(dropped)
            for s in dropped:
                with suppress(OSError):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, not a FIN
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RD)
                with suppress(OSError):
                    s.close()

    def _let_go(self, *sockets: socket.socket | None, close: bool) -> None:
        """Shut down (an end of file to the other side, and a wake-up to a thread in ``recv``), then maybe close.
        A socket :meth:`_sever` reset is closed already: the calls fail and do nothing."""
        with self._lock:
            for s in sockets:
                if s is None:
                    continue
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                if close:
                    with suppress(OSError):
                        s.close()

    def _fire_due(self) -> Misbehaviour | None:
        with self._lock:
            due, self._due = self._due, []
        for then in due:
            then()
        with self._lock:
            return self._fault

    def _note(self, data: bytes) -> None:
        with self._lock:
            for line in REQUEST_LINE.finditer(data):
                self.seen.append(line.group(0).decode("latin-1").strip())
                for pattern, then in list(self._after):
                    if pattern.search(line.group(0)):
                        self._after.remove((pattern, then))
                        self._due.append(then)

    def _serve(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                if REQUEST_LINE.search(data):
                    fault = self._fire_due()
                    if fault is not None:
                        self._misbehave(conn, fault, data)
                        return
                    self._note(data)
                if upstream is None:
                    upstream = socket.create_connection(self.target)
                    self._track(upstream)
                    threading.Thread(target=self._pipe, args=(upstream, conn), daemon=True).start()
                upstream.sendall(data)
        except OSError:
            return
        finally:
            # Shut down before closing: a bare close leaves the upstream socket open under the pipe thread blocked in
            # its recv, so the stand-in never saw the client go (kmock answered its watch until its own shutdown).
            self._let_go(conn, upstream, close=True)

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._let_go(source, sink, close=False)

    def _misbehave(self, conn: socket.socket, fault: Misbehaviour, data: bytes) -> None:
        with self._lock:
            self.met += 1
        self._read_request(conn, data)
        if fault.kind == "hang":
            while not self._healed.wait(0.2) and not self._closed:
                pass
            return
        if fault.kind == "unreachable":
            return
        body = fault.body
        head = (f"HTTP/1.1 {fault.status} {REASONS.get(fault.status, 'Error')}\r\nContent-Type: {fault.content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        conn.sendall(head + body)

    @staticmethod
    def _read_request(conn: socket.socket, data: bytes) -> None:
        """Read the rest of the request so that answering it never resets a client still sending."""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        wanted = int(found.group(1)) if found else 0
        conn.settimeout(5)
        with suppress(OSError):
            while len(body) < wanted:
                more = conn.recv(65536)
                if not more:
                    return
                body += more


def _proxy_to(url: str) -> FaultProxy:
    parts = urlsplit(url)
    return FaultProxy(parts.hostname or "127.0.0.1", parts.port or 80)


@dataclass
class FaultSandbox(Sandbox):
    """The sandbox, with kimi-ops's adapters reaching the stand-ins through :class:`FaultProxy` instances."""

    database: str | None = None  # a PostgreSQL URL: kimi-ops then reaches its database through a proxy too
    proxies: dict[str, FaultProxy] = field(default_factory=dict)
    endpoint_timeout: float = 3.0  # a hung model is noticed in seconds, not in the production default's minute

    def _start_stand_ins(self) -> None:
        super()._start_stand_ins()
        moto = self.stand_ins["moto"].url
        self.proxies.update(kube=_proxy_to(self.stand_ins["kube"].url), s3=_proxy_to(moto), ecr=_proxy_to(moto),
                            model=_proxy_to(self.stand_ins["openai"].url))
        if self.database:
            url = make_url(self.database)
            self.proxies["db"] = FaultProxy(url.host or "127.0.0.1", url.port or 5432)

    def settings(self) -> Settings:
        if "db" not in self.proxies:
            return super().settings()
        url = make_url(self.database or "").set(host="127.0.0.1", port=self.proxies["db"].port)
        self.settings_overrides = {**self.settings_overrides, "database_url": url.render_as_string(hide_password=False)}
        return super().settings()

    def _endpoint_config(self) -> dict[str, Any]:
        return {**super()._endpoint_config(), "url": self.proxies["model"].url}

    def ports(self) -> Ports:
        from bot.adapters.aws.artifacts import RegionalArtifactVerifier
        from bot.adapters.aws.reservations import AwsReservationSource
        from bot.adapters.aws.session import make_client, new_session
        from bot.adapters.cluster import ContextClusters
        from bot.adapters.endpoint import HttpEndpointClient
        from bot.adapters.endpoint.evaluation import HttpEvaluator
        from bot.adapters.endpoint.loadgen import HttpLoadGenerator
        from bot.sandbox.aws import DUMMY_CREDENTIALS

        def aws(service: str, region: str) -> Any:
            session = new_session(region_name=region, **DUMMY_CREDENTIALS)
            return make_client(service, region=region, endpoint_url=self.proxies[service].url, single_attempt=True,
                               session=session)

        def kube(_context: str) -> Any:
            config = k8s.Configuration()
            config.host = self.proxies["kube"].url
            config.retries = 1
            return k8s.ApiClient(config)

        endpoint = HttpEndpointClient(timeout=self.endpoint_timeout, drain_poll_seconds=0.2)
        return Ports(
            artifacts=RegionalArtifactVerifier("us-east-1", client_factory=aws),
            cluster=ContextClusters(client_factory=kube, poll_seconds=0.1, clock=self.clock),
            reservations=AwsReservationSource(self.stand_ins["capacity"].client_factory()),
            endpoint=endpoint,
            evaluator=HttpEvaluator(),
            loadgen=HttpLoadGenerator(metrics=endpoint.peak_metrics),
        )

    def stop(self) -> None:
        super().stop()
        for proxy in self.proxies.values():
            proxy.close()
        self.proxies.clear()
