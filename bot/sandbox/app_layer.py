"""An application layer stand-in for an endpoint without a route: it enforces admission and says so.

An endpoint that declares ``door.application_layer`` instead of a route leaves
admission to that layer, which must acknowledge every change: kimi-ops writes a
``generation`` into the admission ConfigMap and waits until the layer writes the
same number back as ``enforced-generation`` (DESIGN.md, "Admission and the traffic layer").
This stand-in watches the ConfigMap in the Kubernetes emulator (woken by its
writes) and acknowledges after ``delay_seconds``; ``paused`` makes it stop
answering, as a layer that crashed or lost its watch would.
"""

from __future__ import annotations

import threading
import time

from bot.adapters.cluster.rest import Rest, object_path

MANAGER = "application-layer"


class ApplicationLayerStandIn:
    """``ApplicationLayerStandIn(rest, namespace, endpoint).start()``; :meth:`stop` ends its thread."""

    def __init__(self, rest: Rest, namespace: str, endpoint: str, *, delay_seconds: float = 0.0,
                 changed: threading.Event | None = None, poll_seconds: float = 0.1) -> None:
        self.rest = rest
        self.path = object_path("ConfigMap", f"kimi-ops-admission-{endpoint}", namespace)
        self.delay_seconds = delay_seconds
        self.paused = threading.Event()
        self.enforcing: dict[str, str] = {}  # what it lets through now: the ConfigMap's data it acknowledged
        self._changed = changed
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="application-layer", daemon=True)

    def start(self) -> ApplicationLayerStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._changed is not None:
            self._changed.set()
        self._thread.join(5)

    def __enter__(self) -> ApplicationLayerStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._changed is not None:
                self._changed.wait(self._poll)
                self._changed.clear()
            else:
                self._stop.wait(self._poll)
            if self.paused.is_set():
                continue
            try:
                self._acknowledge()
            except Exception:  # the emulator stopping under it; the next round tries again
                continue

    def _acknowledge(self) -> None:
        configmap = self.rest.get(self.path)
        data = dict((configmap or {}).get("data") or {})
        generation = data.get("generation")
        if generation is None or data.get("enforced-generation") == generation:
            return
        time.sleep(self.delay_seconds)
        self.enforcing = data
        self.rest.merge_patch(self.path, {"data": {"enforced-generation": generation}}, manager=MANAGER)
