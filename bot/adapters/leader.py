"""Leader election, so that with several bot replicas only one runs the scheduled jobs.

Three implementations of one small protocol (``acquire`` tries once and says
whether this process leads now; ``release`` gives leadership up):

* :class:`KubernetesLease` — a ``coordination.k8s.io/v1`` Lease, when the bot
  runs in a cluster. The holder renews it; another replica takes it over only
  after ``leaseDurationSeconds`` without renewal. Renewals are merge patches
  carrying the Lease's ``resourceVersion``, so two replicas racing for an
  expired Lease cannot both win (the API server answers 409 to the loser).
* :class:`PostgresAdvisoryLock` — ``pg_try_advisory_lock`` held on a dedicated
  connection for as long as this process leads; PostgreSQL frees it when the
  connection (or the process) dies.
* :class:`SingleProcess` — SQLite means a single replica, which always leads.

:func:`leader_lock` picks one for the running process.
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, text

from bot.logs import logger_for

log = logger_for(__name__)

ADVISORY_KEY = 0x6B696D69  # "kimi": one well-known key for the whole bot
LEASE_NAME = "kimi-ops-scheduler"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class LeaderLock(Protocol):
    identity: str

    def acquire(self) -> bool:
        """Try once, without waiting: ``True`` while this process is the leader (acquired or renewed)."""
        ...

    def release(self) -> None: ...


def default_identity() -> str:
    """Pod name (the hostname in Kubernetes) plus a per-process suffix, so two processes never share one."""
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


class SingleProcess:
    """SQLite: one replica by construction, which always leads."""

    def __init__(self, identity: str | None = None) -> None:
        self.identity = identity or default_identity()

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        return None


class PostgresAdvisoryLock:
    """Session-level advisory lock on a dedicated connection, outside any transaction."""

    def __init__(self, engine: Engine, key: int = ADVISORY_KEY, identity: str | None = None) -> None:
        self.engine = engine
        self.key = key
        self.identity = identity or default_identity()
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    def acquire(self) -> bool:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute(text("SELECT 1"))
                    return True
                except Exception as exc:  # the connection died: PostgreSQL has already freed the lock
                    log.warning("leader connection lost: %s", exc)
                    self._drop()
            conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            try:
                got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar())
            except Exception:
                conn.close()
                raise
            if got:
                self._conn = conn
            else:
                conn.close()
            return got

    def release(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            try:
                self._conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
            except Exception as exc:  # closing the connection frees the lock anyway
                log.warning("advisory unlock failed: %s", exc)
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()  # never hand a lock-holding connection back to the pool
                conn.close()
            except Exception:  # already broken: nothing left to free
                log.debug("closing the leader connection failed", exc_info=True)


def _micro(at: dt.datetime) -> str:
    """Kubernetes ``MicroTime``: RFC 3339 with exactly six fractional digits."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


class KubernetesLease:
    """A ``coordination.k8s.io/v1`` Lease held by renewing it before it expires."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        *,
        name: str = LEASE_NAME,
        identity: str | None = None,
        duration_seconds: int = 30,
        now: Callable[[], dt.datetime] | None = None,
    ) -> None:
        """``api`` is a ``kubernetes.client.CoordinationV1Api``; ``now`` a zero-argument clock (tests move it)."""
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.duration_seconds = duration_seconds
        self._now = now or (lambda: dt.datetime.now(dt.UTC))

    def _body(self, *, acquired: dt.datetime, renewed: dt.datetime, transitions: int, version: str | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version is not None:
            metadata["resourceVersion"] = version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration_seconds,
                "acquireTime": _micro(acquired),
                "renewTime": _micro(renewed),
                "leaseTransitions": transitions,
            },
        }

    def _patch(self, body: dict[str, Any]) -> None:
        """Merge-patch the Lease; the ``resourceVersion`` in the body makes it conditional (409 if it moved)."""
        self.api.patch_namespaced_lease(self.name, self.namespace, body, _content_type="application/merge-patch+json")

    def acquire(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        now = self._now()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            try:
                self.api.create_namespaced_lease(
                    self.namespace, self._body(acquired=now, renewed=now, transitions=0, version=None)
                )
                return True
            except ApiException as create_exc:
                if create_exc.status == 409:  # another replica created it first
                    return False
                raise
        spec = lease.spec
        holder = spec.holder_identity if spec else None
        renewed = _parse(spec.renew_time) if spec else None
        duration = (spec.lease_duration_seconds if spec else None) or self.duration_seconds
        transitions = (spec.lease_transitions if spec else None) or 0
        if holder == self.identity:
            acquired = _parse(spec.acquire_time) or now
        elif holder and renewed is not None and renewed + dt.timedelta(seconds=duration) > now:
            return False  # someone else holds a fresh Lease
        else:
            acquired, transitions = now, transitions + 1
        body = self._body(acquired=acquired, renewed=now, transitions=transitions, version=lease.metadata.resource_version)
        try:
            self._patch(body)
        except ApiException as exc:
            if exc.status == 409:  # the Lease changed since we read it: someone else renewed or took it
                return False
            raise
        return True

    def release(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            body = self._body(
                acquired=_parse(lease.spec.acquire_time) or self._now(),
                renewed=self._now(),
                transitions=lease.spec.lease_transitions or 0,
                version=lease.metadata.resource_version,
            )
            body["spec"]["holderIdentity"] = None  # the next replica takes over at once instead of waiting out the Lease
            self._patch(body)
        except ApiException as exc:
            log.warning("releasing the Lease failed (it expires by itself): %s", exc)


def _in_cluster_api() -> tuple[Any, str] | None:
    """``(CoordinationV1Api, namespace)`` when this process runs in a Kubernetes pod, else ``None``."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        return None
    namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() if SERVICE_ACCOUNT_NAMESPACE.exists() else "default"
    return client.CoordinationV1Api(), namespace


def leader_lock(engine: Engine) -> LeaderLock:
    """A Lease in a cluster, an advisory lock on PostgreSQL, otherwise a single replica."""
    in_cluster = _in_cluster_api()
    if in_cluster is not None:
        api, namespace = in_cluster
        return KubernetesLease(api, namespace)
    if engine.dialect.name == "postgresql":
        return PostgresAdvisoryLock(engine)
    return SingleProcess()
