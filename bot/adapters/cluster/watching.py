"""The Kubernetes watch API on one object: each new version of it as the API server streams it, for a while.

kimi-ops waits on the cluster in two places users feel: a rollout's verdict (the endpoint object's status) and a
gateway's verdict on a route change (the HTTPRoute's status). Reading on a fixed period saw each change up to a
period late; a watch sees it within the API server's own latency. Each watch lasts at most ``seconds`` (the
server's ``timeoutSeconds`` and a client read timeout, since a stand-in may ignore the former), after which the
caller reads the object again anyway: a dropped watch or a missed event costs one resync, never the verdict.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from kubernetes.watch import Watch
from urllib3.exceptions import HTTPError

from bot.adapters.cluster.rest import RESOURCES, api_error
from bot.logs import logger_for

log = logger_for(__name__)

CONNECT_SECONDS = 5.0
_refusals_said: set[str] = set()  # each reason a watch was refused is logged once per process


def resource_version(obj: dict[str, Any] | None) -> str | None:
    meta = (obj or {}).get("metadata") or {}
    version = meta.get("resourceVersion")
    return str(version) if version is not None else None


def versions(api_client: Any, kind: str, name: str, namespace: str, *, seconds: float,
             stop: threading.Event) -> Iterator[dict[str, Any]]:
    """Each version of the object the watch streams (the current one first) until ``seconds`` pass, ``stop`` is set,
    the object is deleted or the watch ends; raises :class:`WatchUnavailable` when the API refuses the watch."""
    info = RESOURCES[kind]
    group, _, version = info.api_version.rpartition("/")
    if not group:
        raise ValueError(f"{kind} is in the core API group; watch it with the core client")
    watcher = Watch()
    finished = threading.Event()

    def stop_on_request() -> None:
        # Ends the stream at once when asked (Watch.stop closes the socket under a blocked read).
        while not finished.wait(0.05):
            if stop.is_set():
                watcher.stop()
                return

    deadline = time.monotonic() + seconds
    threading.Thread(target=stop_on_request, name="kimi-watch-stop", daemon=True).start()
    stream: Any = None  # the client's generator; closed below so its response is released at once
    try:
        stream = watcher.stream(
            CustomObjectsApi(api_client).list_namespaced_custom_object, group, version, namespace, info.plural,
            field_selector=f"metadata.name={name}", timeout_seconds=max(1, int(seconds + 0.999)),
            _request_timeout=(CONNECT_SECONDS, max(0.05, seconds)))
        for event in stream:
            obj = event.get("raw_object") if isinstance(event, dict) else None
            if isinstance(obj, dict) and ((obj.get("metadata") or {}).get("name")) == name:
                if event.get("type") == "DELETED":
                    return
                if event.get("type") in ("ADDED", "MODIFIED"):
                    yield obj
            if stop.is_set() or time.monotonic() >= deadline:
                return
    except ApiException as exc:
        if exc.status == 410:  # the version we asked from is gone: the caller reads again
            return
        raise WatchUnavailable(api_error(exc)) from exc
    except (HTTPError, OSError):  # the read timeout that ends a quiet watch, or a dropped connection: resync
        return
    finally:
        finished.set()
        watcher.stop()
        if stream is not None:
            stream.close()


class WatchUnavailable(Exception):
    """The API server refused the watch (no ``watch`` permission, an unknown kind); the caller polls instead."""


def wait_for_change(api_client: Any, kind: str, name: str, namespace: str, seen_version: str | None, *,
                    seconds: float, stop: threading.Event) -> bool:
    """Wait until the object differs from version ``seen_version``, at most ``seconds``; True when it changed.

    A watch the API server refuses falls back to waiting out ``seconds`` (logged once per reason, as a poll would).
    """
    started = time.monotonic()
    try:
        for obj in versions(api_client, kind, name, namespace, seconds=seconds, stop=stop):
            if resource_version(obj) != seen_version:
                return True
    except WatchUnavailable as exc:
        if f"{kind}: {exc}" not in _refusals_said:
            _refusals_said.add(f"{kind}: {exc}")
            log.warning("cannot watch %s/%s (%s); reading it every %.1f s instead", kind, name, exc, seconds)
        stop.wait(max(0.0, seconds - (time.monotonic() - started)))
    return False
