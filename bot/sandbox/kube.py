"""kmock's Kubernetes emulator over HTTP on 127.0.0.1, seeded like a HyperPod/EKS cluster.

:func:`start_kube` runs the emulator in a background thread with its own event
loop and returns a :class:`KubeStandIn` whose :meth:`~KubeStandIn.api_client`
is an ordinary ``kubernetes.client.ApiClient`` pointed at it.

kmock needs a few adjustments to behave like an API server for kimi-ops; they
all live in :func:`_emulator_class`:

* ``POST`` answers ``201 Created`` and stamps ``uid``, ``resourceVersion``,
  ``generation`` and ``creationTimestamp``;
* lists carry ``kind: <Kind>List`` and ``apiVersion``;
* ``coordination.k8s.io/v1`` Leases are served too (the scheduler's leader election);
* ``PATCH`` with ``application/apply-patch+yaml`` is server-side apply: created
  when absent, field managers tracked (:mod:`bot.sandbox.ssa`), ``409`` with
  ``FieldManagerConflict`` causes unless ``force=true``, ``dryRun=All`` honoured,
  and a no-op apply leaves ``resourceVersion`` alone;
* merge patches bump ``resourceVersion`` (``generation`` when the spec
  changes), honour a ``resourceVersion`` precondition, and on the ``status``
  subresource change only ``status`` — the main resource ignores ``status``;
* kmock's request log (kept for assertions, walked through every reaction's
  filter on every request) holds only the requests still being answered, so
  a request costs the same in the first second of a sandbox and the hundredth;
* every write sets the events handed out by :meth:`KubeStandIn.changes`, so
  the operator simulator and the gateway stand-in wake on a change instead of
  listing the API many times a second;
* while :meth:`KubeStandIn.denying` holds, every write of a kind is refused as a
  validating admission webhook refuses it (``403 Forbidden``, the webhook's words).

kmock is a sandbox dependency: it is imported only when a stand-in starts. (Its
pytest plugin imports pytest-asyncio, which nothing here installs; the suite loads
only the plugins it names, so that plugin never loads.)
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import functools
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from bot.adapters.cluster.rest import RESOURCES, Kind, Rest, collection_path
from bot.adapters.cluster.validate import crd_schema_document
from bot.sandbox import ssa

# Kinds the bot reaches through the typed clients rather than :mod:`bot.adapters.cluster.rest`:
# the scheduler's leader-election Lease.
EXTRA_RESOURCES: dict[str, Kind] = {"Lease": Kind("coordination.k8s.io/v1", "leases", True)}
OPERATOR_NAMESPACE = "hyperpod-inference-system"
NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces(/[^/]+(?:/status)?)?/?$")
NAMESPACES_PLURAL = "x-namespaces"
OPERATOR_DEPLOYMENT = "hyperpod-inference-operator-controller-manager"
SUBRESOURCES: dict[str, set[str]] = {
    "InferenceEndpointConfig": {"status", "scale"},
    "Deployment": {"status", "scale"},
    "Pod": {"status"},
    "Node": {"status"},
    "Namespace": {"status"},
    "PersistentVolume": {"status"},
    "PersistentVolumeClaim": {"status"},
    "Service": {"status"},
    "PodDisruptionBudget": {"status"},
    "CustomResourceDefinition": {"status"},
    "HTTPRoute": {"status"},
}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.cache
def _emulator_class() -> type:
    """kmock's ``KubernetesEmulator`` with the adjustments listed in the module docstring."""
    import aiohttp.web
    from kmock import KubernetesEmulator, KubernetesError, ResourceInfo, action

    class ApplyingEmulator(KubernetesEmulator):
        def __attrs_post_init__(self) -> None:
            super().__attrs_post_init__()
            self.owners: dict[tuple[Any, ...], ssa.Owners] = {}
            self.received: list[Any] = []  # every request, for the tests' assertions (kmock's own log is cut)
            self.answering: dict[int, Any] = {}  # id -> request, from its arrival in _handle until it is answered
            self.watchers: list[threading.Event] = []  # set on every write (KubeStandIn.changes)
            self.version = 1
            self.denied: dict[str, str] = {}  # plural -> the admission webhook's message (KubeStandIn.denying)
            self.kinds: dict[Any, tuple[str, str]] = {}
            for kind, info in {**RESOURCES, **EXTRA_RESOURCES}.items():
                plural = NAMESPACES_PLURAL if kind == "Namespace" else info.plural
                key = f"{info.api_version}/{plural}" if "/" in info.api_version else f"v1/{plural}"
                self.resources[key] = ResourceInfo(
                    kind=kind, namespaced=info.namespaced, subresources=SUBRESOURCES.get(kind, set()),
                    verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
                )
            for resource in self.resources:
                registered = self.resources[resource]
                api_version = str(resource.version) if resource.group == "" else f"{resource.group}/{resource.version}"
                self.kinds[resource] = (str(registered.kind), api_version)

        def _stamp_version(self, obj: dict[str, Any]) -> None:
            self.version += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)

        def _managed_fields(self, key: tuple[Any, ...], obj: dict[str, Any]) -> None:
            owners = self.owners.get(key, {})
            obj["metadata"]["managedFields"] = [
                {"manager": m.removesuffix("-update"), "operation": e["operation"], "apiVersion": e["apiVersion"],
                 "fieldsType": "FieldsV1", "fieldsV1": ssa.fields_v1(e["fields"]), "time": _now()}
                for m, e in sorted(owners.items())
            ]

        async def _store(self, request: Any, key: tuple[Any, ...], obj: dict[str, Any], created: bool) -> None:
            if created:
                self._objects[key] = obj
            else:
                self._objects[key].history.append(obj)
            await self._buses[request.resource].put({"type": "ADDED" if created else "MODIFIED", "object": obj})

        def _live(self, key: tuple[Any, ...]) -> dict[str, Any] | None:
            if key not in self._objects or self._objects[key].deleted:
                return None
            live: dict[str, Any] = copy.deepcopy(self._objects[key].raw)
            return live

        @staticmethod
        def _respond(obj: dict[str, Any], status: int = 200) -> Any:
            return aiohttp.web.json_response(obj, status=status)

        async def __call__(self, raw_request: Any) -> Any:
            # kmock reads /api/v1/namespaces[/name] as a namespace prefix, not the Namespace resource:
            # serve Namespaces under a private plural instead (nothing else uses that path shape).
            match = NAMESPACE_PATH.match(raw_request.path)
            if match:
                rest = match.group(1) or ""
                raw_request = raw_request.clone(rel_url=raw_request.rel_url.with_path(f"/api/v1/{NAMESPACES_PLURAL}{rest}"))
            self._forget_answered_requests()
            return await super().__call__(raw_request)

        def _forget_answered_requests(self) -> None:
            # kmock keeps every request for assertions and matches each new one against its reactions by walking
            # that whole log through each reaction's filter chain: a sandbox slowed down quadratically, and even a
            # log cut to a few dozen made matching most of an idle sandbox's CPU. Tests read ``received`` instead.
            # A request is appended and reaches ``_handle`` with no await in between, so the log only ever
            # needs what ``_handle`` is still answering.
            log: list[Any] = self._requests
            if len(log) > len(self.answering):
                log[:] = [r for r in log if id(r) in self.answering]

        async def _handle(self, request: Any) -> Any:
            self.received.append(request)
            self.answering[id(request)] = request
            try:
                return await self._answer(request)
            finally:
                del self.answering[id(request)]
                if request.action not in (action.FETCH, action.LIST, action.WATCH):
                    for changed in self.watchers:
                        changed.set()

        async def _answer(self, request: Any) -> Any:
            if request.resource is None:
                return await super()._handle(request)
            denial = self.denied.get(request.resource.plural)
            if denial is not None and request.action in (action.CREATE, action.UPDATE):
                raise KubernetesError(status=403, reason="Forbidden", message=denial)
            content_type = str(request.headers.get("Content-Type", ""))
            if request.action == action.CREATE:
                return await self._create(request)
            if request.action == action.UPDATE and content_type.startswith("application/apply-patch"):
                return await self._apply(request)
            if request.action == action.UPDATE:
                return await self._merge(request)
            if request.action == action.DELETE and request.name is not None:
                self.owners.pop((request.resource, request.namespace, request.name), None)
            return await super()._handle(request)

        async def _create(self, request: Any) -> Any:
            obj = copy.deepcopy(request.data or {})
            meta = obj.setdefault("metadata", {})
            namespace = request.namespace or meta.get("namespace")
            key = (request.resource, namespace, meta.get("name"))
            async with self._lock:
                if self._live(key) is not None:
                    raise KubernetesError(status=409, reason="AlreadyExists",
                                          message=f'{request.resource.plural} "{meta.get("name")}" already exists')
                meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=_now())
                if namespace:
                    meta["namespace"] = namespace
                self._stamp_version(obj)
                manager = request.params.get("fieldManager", "unknown")
                self.owners[key] = {}
                ssa.update(self.owners[key], manager, self.kinds[request.resource][1], obj)
                self._managed_fields(key, obj)
                await self._store(request, key, obj, created=True)
            return self._respond(obj, 201)

        async def _apply(self, request: Any) -> Any:
            config = copy.deepcopy(request.data or {})
            config.pop("status", None)  # the status subresource: an apply to the object never sets status
            manager = request.params.get("fieldManager")
            if not manager:
                raise KubernetesError(status=400, reason="BadRequest", message="fieldManager is required for apply patch")
            force = request.params.get("force") == "true"
            dry_run = request.params.get("dryRun") == "All"
            key = (request.resource, request.namespace, request.name)
            kind, api_version = self.kinds[request.resource]
            async with self._lock:
                live = self._live(key)
                owners = copy.deepcopy(self.owners.get(key, {}))
                if live is None:
                    new: dict[str, Any] = {"apiVersion": api_version, "kind": kind,
                           "metadata": {"name": request.name, "uid": str(uuid.uuid4()), "generation": 1,
                                        "creationTimestamp": _now()}}
                    if request.namespace:
                        new["metadata"]["namespace"] = request.namespace
                    new = ssa.apply(owners, manager, api_version, new, config, force=True)
                else:
                    clashes = ssa.conflicts(owners, manager, live, config)
                    if clashes and not force:
                        causes = [{"reason": "FieldManagerConflict", "field": ssa.describe(p),
                                   "message": f'conflict with "{m.removesuffix("-update")}" using {api_version}'}
                                  for m, p in clashes]
                        raise KubernetesError(
                            status=409,
                            reason="Conflict",
                            message=f"Apply failed with {len(causes)} conflict(s): "
                            + "; ".join(f"{c['message']}: {c['field']}" for c in causes),
                            details={"causes": causes, "name": request.name, "kind": request.resource.plural},
                        )
                    new = ssa.apply(owners, manager, api_version, live, config, force=force)
                if live is not None and _same(new, live) and _same_owners(owners, self.owners.get(key, {})):
                    return self._respond(live)
                if live is not None and _spec(new) != _spec(live):
                    new["metadata"]["generation"] = int(live["metadata"].get("generation", 1)) + 1
                if dry_run:
                    return self._respond(new, 201 if live is None else 200)
                self.owners[key] = owners
                self._stamp_version(new)
                self._managed_fields(key, new)
                await self._store(request, key, new, created=live is None)
            return self._respond(new, 201 if live is None else 200)

        async def _merge(self, request: Any) -> Any:
            from kmock._internal import (
                dicts,  # kmock's own RFC 7386 merge, as its emulator uses
            )

            patch = copy.deepcopy(request.data or {})
            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                live = self._live(key)
                if live is None:
                    raise KubernetesError(status=404, reason="NotFound", message=f'"{request.name}" not found')
                wanted_version = (patch.get("metadata") or {}).get("resourceVersion")
                if wanted_version is not None and str(wanted_version) != str(live["metadata"].get("resourceVersion")):
                    raise KubernetesError(
                        status=409,
                        reason="Conflict",
                        message="the object has been modified; please apply your changes to the latest version",
                    )
                if request.subresource == "status":
                    patch = {"status": patch.get("status") or {}}
                else:
                    patch.pop("status", None)
                    owners = self.owners.setdefault(key, {})
                    ssa.update(owners, request.params.get("fieldManager", "unknown"), self.kinds[request.resource][1], patch)
                new = dict(dicts.merge_patch_dict(live, patch))
                new = json.loads(json.dumps(new))
                if _same(new, live):
                    return self._respond(live)
                if _spec(new) != _spec(live):
                    new["metadata"]["generation"] = int(live["metadata"].get("generation", 1)) + 1
                self._stamp_version(new)
                self._managed_fields(key, new)
                await self._store(request, key, new, created=False)
            return self._respond(new)

        async def _serve_list(self, request: Any) -> Any:
            payload: Any = await super()._serve_list(request)
            kind, api_version = self.kinds.get(request.resource, ("", ""))
            return {
                "apiVersion": api_version or "v1",
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(self.version)},
                "items": payload["items"],
            }

    return ApplyingEmulator


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    """Everything that bumps ``generation``: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in {"metadata", "status"}}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def strip(o: dict[str, Any]) -> dict[str, Any]:
        volatile = {"resourceVersion", "managedFields"}
        return {**o, "metadata": {k: v for k, v in (o.get("metadata") or {}).items() if k not in volatile}}

    return strip(a) == strip(b)


def _same_owners(a: ssa.Owners, b: ssa.Owners) -> bool:
    return {m: (e["operation"], frozenset(e["fields"])) for m, e in a.items()} == {
        m: (e["operation"], frozenset(e["fields"])) for m, e in b.items()
    }


@dataclass
class KubeStandIn:
    """A running emulator: its URL, the emulator object, and clients for it."""

    url: str
    emulator: Any
    loop: asyncio.AbstractEventLoop
    _stop: Callable[[], None]
    _clients: list[client.ApiClient] = field(default_factory=list)

    def api_client(self) -> client.ApiClient:
        config = client.Configuration()
        config.host = self.url
        config.retries = 1
        api = client.ApiClient(config)
        self._clients.append(api)
        return api

    def rest(self) -> Rest:
        return Rest(self.api_client())

    def changes(self) -> threading.Event:
        """An event the emulator sets after every write it answers; the holder clears it when it has looked."""
        changed = threading.Event()
        self.emulator.watchers.append(changed)
        return changed

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the emulator's event loop (where its state lives) and return its result."""

        async def call() -> Any:
            async with self.emulator._lock:
                return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(30)

    def requests(self) -> list[Any]:
        """Every request the emulator received, oldest first (kmock's parsed ``Request`` objects)."""
        return list(self.run(lambda: list(self.emulator.received)))

    def serve(self, kind: str, version: str | None) -> None:
        """Serve ``kind`` at ``version`` of its group instead of kimi-ops's, or not at all (``None``): a cluster with an
        older release of the kind's CRD, or without it. Objects of the kind planted before are gone."""
        info = {**RESOURCES, **EXTRA_RESOURCES}[kind]
        group = info.api_version.rpartition("/")[0]

        def swap() -> None:
            resources = self.emulator.resources
            registered = resources.pop(f"{info.api_version}/{info.plural}")
            if version is not None:
                resources[f"{group}/{version}/{info.plural}"] = registered
                for resource in resources:
                    if (resource.group, resource.version, resource.plural) == (group, version, info.plural):
                        self.emulator.kinds[resource] = (kind, f"{group}/{version}")

        self.run(swap)

    @contextmanager
    def denying(self, kind: str, webhook: str, why: str) -> Iterator[None]:
        """While open, every create, update and apply of ``kind`` is refused as the validating admission webhook
        ``webhook`` refuses it: ``403 Forbidden``, ``admission webhook "<webhook>" denied the request: <why>``."""
        plural = {**RESOURCES, **EXTRA_RESOURCES}[kind].plural
        message = f'admission webhook "{webhook}" denied the request: {why}'
        self.run(lambda: self.emulator.denied.__setitem__(plural, message))
        try:
            yield
        finally:
            self.run(lambda: self.emulator.denied.pop(plural, None))

    def remove(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete an object outright (a seeded CRD, node…) to stage a preflight failure."""
        self.rest().delete(collection_path(kind, namespace) + f"/{name}")

    def stop(self) -> None:
        for api in self._clients:
            api.close()
        self._stop()

    def __enter__(self) -> KubeStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_kube() -> KubeStandIn:
    """Start the emulator on 127.0.0.1 with an ephemeral port, in a daemon thread."""
    from kmock import Server

    emulator_cls = _emulator_class()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        state["stop"] = asyncio.Event()
        async with emulator_cls() as emulator, Server(emulator, host="127.0.0.1") as server:
            state["emulator"], state["url"] = emulator, str(server.url).rstrip("/")
            ready.set()
            await state["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), name="kmock", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the Kubernetes emulator did not start within 30 s")

    def stop() -> None:
        loop.call_soon_threadsafe(state["stop"].set)
        thread.join(30)
        if thread.is_alive():  # its server still waits for a request to end: closing the loop under it would fail
            raise RuntimeError("the Kubernetes emulator did not stop within 30 s: a request it answers is still open "
                               "(a watch whose client went without the connection closing, e.g. through a proxy)")
        loop.close()

    return KubeStandIn(url=state["url"], emulator=state["emulator"], loop=loop, _stop=stop)


def _crd_object() -> dict[str, Any]:
    doc = crd_schema_document()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{doc['plural']}.{doc['group']}"},
        "spec": {
            "group": doc["group"],
            "scope": "Namespaced",
            "names": {
                "kind": doc["kind"],
                "plural": doc["plural"],
                "listKind": f"{doc['kind']}List",
                "singular": doc["kind"].lower(),
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": doc["subresources"],
                    "schema": {"openAPIV3Schema": doc["openAPIV3Schema"]},
                }
            ],
        },
    }


def seed_cluster(
    rest: Rest,
    *,
    namespace: str = "model-serving",
    zone: str = "us-east-1a",
    instance_type: str = "ml.p6-b300.48xlarge",
    gpus: int = 8,
    operator_available: bool = True,
) -> None:
    """The CRD, the operator Deployment, the namespace and one GPU node in ``zone``."""
    rest.create(collection_path("CustomResourceDefinition"), _crd_object())
    for name in (namespace, OPERATOR_NAMESPACE):
        rest.create(
            collection_path("Namespace"),
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            },
        )
    labels = {"app.kubernetes.io/name": "hyperpod-inference-operator", "control-plane": "controller-manager"}
    ready = "True" if operator_available else "False"
    rest.create(
        collection_path("Deployment", OPERATOR_NAMESPACE),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": OPERATOR_DEPLOYMENT, "namespace": OPERATOR_NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "manager", "image": "public.ecr.aws/hyperpod/inference-operator:v1"}]},
                },
            },
            "status": {
                "replicas": 1,
                "readyReplicas": 1 if operator_available else 0,
                "availableReplicas": 1 if operator_available else 0,
                "conditions": [
                    {
                        "type": "Available",
                        "status": ready,
                        "reason": "MinimumReplicasAvailable" if operator_available else "MinimumReplicasUnavailable",
                    }
                ],
            },
        },
    )
    bare = instance_type.removeprefix("ml.")
    rest.create(
        collection_path("Node"),
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"hyperpod-i-0{bare.replace('.', '-')}",
                "labels": {
                    "node.kubernetes.io/instance-type": instance_type,
                    "topology.kubernetes.io/zone": zone,
                    "eks.amazonaws.com/capacityType": "CAPACITY_BLOCK",
                    "kubernetes.io/os": "linux",
                },
            },
            "status": {
                "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "190", "memory": "4000Gi"},
                "capacity": {"nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
