"""A Gateway API gateway stand-in: a real HTTP reverse proxy driven by HTTPRoutes in the emulator.

It plays one ``Gateway`` (name, namespace, one HTTP listener) the way a
controller such as Envoy Gateway or the AWS Load Balancer Controller would,
for the subset of HTTPRoute that kimi-ops writes and the reference examples use:

* it reads every ``gateway.networking.k8s.io/v1`` HTTPRoute from the Kubernetes
  emulator with the official client (:class:`~bot.adapters.cluster.rest.Rest`,
  as the operator simulator does), on every write the emulator reports (``changed``), every
  ``poll_seconds``, or on :meth:`sync`;
* routes attached to it (``parentRefs`` naming this Gateway, and this listener
  when a ``sectionName`` is given) get ``status.parents`` written through the
  status subresource: ``Accepted`` and ``ResolvedRefs`` with the route's
  ``observedGeneration``, entries of other controllers kept;
* a request is matched on hostname, path (``PathPrefix``, ``Exact``,
  ``RegularExpression``), method, headers (``Exact``, ``RegularExpression``,
  names case-insensitive) and query parameters, with the specification's
  precedence (exact path, longest path, method, most header matches, most
  query matches, oldest route, then rule order); no match answers 404;
* the backend is a weighted random choice among the rule's ``backendRefs``
  (a seeded :class:`random.Random`, so a test's split is reproducible); all
  weights 0 or an unknown Service answers 500, a Service whose upstream does
  not answer 503, as the specification asks; a backend may be a Service or an
  ``InferencePool`` (``inference.networking.k8s.io``), which resolves when the
  pool exists in the emulator and has endpoints (:meth:`GatewayStandIn.add_pool`),
  weighted like any backend (the extension's ``GatewayWeightedAcrossTwoInferencePools``);
* ``RequestHeaderModifier`` and ``ResponseHeaderModifier`` filters, on a rule
  (every request it takes) or on a backendRef (only when that backend is
  chosen), ``set`` / ``add`` / ``remove`` as the specification says; any other
  filter leaves the backend unresolved (``UnsupportedValue``);
* the request is forwarded to the Service's local upstream URL and the answer
  streamed back as it arrives (chunked when the upstream gives no length), so
  Server-Sent Events pass through intact.

Every request is counted as a :class:`Routed` (the Service it went to, or
``unavailable`` / ``no-route``, and whether the cohort's rule took it), so a
test or the sandbox can see what users got under each admission; and, in
:meth:`GatewayStandIn.counts_by_admission`, under the admission the route that took it
was annotated with (``kimi-ops.io/admission``) when the request was routed.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit

import httpx

from bot.adapters.cluster.rest import Rest, collection_path, object_path
from bot.adapters.cluster.route_names import ADMISSION_ANNOTATION
from bot.logs import logger_for

log = logger_for(__name__)

GATEWAY_GROUP = "gateway.networking.k8s.io"
CONTROLLER = "kimi-ops.io/gateway-stand-in"
INFERENCE_GROUP = "inference.networking.k8s.io"
SUPPORTED_FILTERS = {"RequestHeaderModifier", "ResponseHeaderModifier"}
UNAVAILABLE = "unavailable"
NO_ROUTE = "no-route"
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
              "transfer-encoding", "upgrade", "host", "content-length"}


class ServiceKey(NamedTuple):
    namespace: str
    name: str
    port: int


class Routed(NamedTuple):
    """Where one request went: a Service name, ``unavailable`` (500/503) or ``no-route`` (404)."""

    target: str
    cohort: bool


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class _Backend:
    key: ServiceKey | None  # None: a reference this gateway cannot resolve (an InferencePool's port is 0)
    weight: int
    filters: tuple[dict[str, Any], ...] = ()  # the backendRef's own filters, applied only when it is chosen


@dataclass(frozen=True)
class _Rule:
    matches: tuple[dict[str, Any], ...]
    backends: tuple[_Backend, ...]
    filters: tuple[dict[str, Any], ...] = ()  # the rule's filters, applied to every request it takes


@dataclass(frozen=True)
class _Route:
    namespace: str
    name: str
    created: str
    hostnames: tuple[str, ...]
    rules: tuple[_Rule, ...]
    admission: str = ""  # what kimi-ops annotated the route as (closed, internal, 10%, open), for counting


@dataclass
class _Table:
    routes: list[_Route] = field(default_factory=list)


def _path_matches(match: Mapping[str, Any], path: str) -> tuple[bool, int, int]:
    """(matches, exact?, length) for one path match; the CRD's default is ``PathPrefix /``."""
    spec = match.get("path") or {"type": "PathPrefix", "value": "/"}
    kind, value = spec.get("type", "PathPrefix"), str(spec.get("value", "/"))
    if kind == "Exact":
        return path == value, 1, len(value)
    if kind == "RegularExpression":
        return re.fullmatch(value, path) is not None, 0, len(value)
    prefix = value.rstrip("/")
    # Element-wise: /v1 matches /v1 and /v1/chat, never /v10.
    ok = prefix == "" or path == prefix or path.startswith(prefix + "/")
    return ok, 0, len(value)


def _headers_match(match: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    for wanted in match.get("headers") or []:
        got = headers.get(str(wanted.get("name", "")).lower())
        if got is None:
            return False
        if wanted.get("type", "Exact") == "RegularExpression":
            if re.fullmatch(str(wanted.get("value", "")), got) is None:
                return False
        elif got != wanted.get("value"):
            return False
    return True


def _query_matches(match: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    for wanted in match.get("queryParams") or []:
        got = query.get(str(wanted.get("name", "")))
        if got is None:
            return False
        if wanted.get("type", "Exact") == "RegularExpression":
            if re.fullmatch(str(wanted.get("value", "")), got) is None:
                return False
        elif got != wanted.get("value"):
            return False
    return True


def _host_rank(hostnames: tuple[str, ...], host: str) -> int | None:
    """None when the route does not serve ``host``; else larger is more specific (exact > wildcard > any)."""
    if not hostnames:
        return 0
    best: int | None = None
    for name in hostnames:
        if name == host:
            rank = 2000 + len(name)
        elif name.startswith("*.") and host.endswith(name[1:]) and host.count(".") >= name.count("."):
            rank = 1000 + len(name)
        else:
            continue
        best = rank if best is None else max(best, rank)
    return best


class GatewayStandIn:
    """Start with ``with GatewayStandIn(rest, backends={...}) as gw:``; ``gw.url`` is the listener."""

    def __init__(self, rest: Rest, *, name: str = "kimi-gateway", namespace: str = "gateways", listener: str = "http",
                 backends: Mapping[ServiceKey, str] | None = None,
                 cohort_header: str | None = "x-kimi-cohort", model_header: str = "x-kimi-model",
                 seed: int | None = None,
                 poll_seconds: float = 0.05, host: str = "127.0.0.1", port: int = 0,
                 upstream_timeout: float = 300.0, changed: threading.Event | None = None) -> None:
        self.rest = rest
        self.name, self.namespace, self.listener = name, namespace, listener
        self.backends: dict[ServiceKey, str] = dict(backends or {})
        self.cohort_header = cohort_header.lower() if cohort_header else None
        self.poll_seconds = poll_seconds
        self.errors: list[str] = []
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self._table = _Table()
        self._sync_lock = threading.Lock()
        self._counts: Counter[Routed] = Counter()
        self._by_admission: Counter[tuple[str, Routed]] = Counter()
        self._labels: Counter[str] = Counter()
        self.model_header = model_header.lower()
        # A condition, not a bare lock: the demo waits for the first user taken under an admission (a ramp's "open").
        self._counts_lock = threading.Condition()
        self._stop = threading.Event()
        # Set by the emulator on every write (KubeStandIn.changes): then the stand-in reads routes when one may have
        # changed, and every ``poll_seconds`` only as a backstop, rather than listing them many times a second.
        self._changed = changed
        self._client = httpx.Client(timeout=httpx.Timeout(upstream_timeout, connect=2.0), follow_redirects=False)
        self._httpd = _Server((host, port), _Handler)
        self._httpd.gateway = self
        self._threads: list[threading.Thread] = []

    # -- life cycle -------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> GatewayStandIn:
        if self._threads:
            return self
        self.sync()
        serve = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                 name="gateway-stand-in", daemon=True)
        poll = threading.Thread(target=self._poll, name="gateway-stand-in-sync", daemon=True)
        self._threads = [serve, poll]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._changed is not None:
            self._changed.set()
        if self._threads:
            self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join(5)
        self._threads = []
        self._client.close()

    def __enter__(self) -> GatewayStandIn:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def add_backend(self, key: ServiceKey, url: str) -> None:
        """Where requests for a Service go (what a Service's endpoints are to a real gateway)."""
        self.backends[key] = url.rstrip("/")

    # -- counting ---------------------------------------------------------------------------------------------

    def counts(self) -> Counter[Routed]:
        with self._counts_lock:
            return Counter(self._counts)

    def counts_by_admission(self) -> Counter[tuple[str, Routed]]:
        """``(admission, Routed) → count``: the admission is the taking route's annotation ("" for no route)."""
        with self._counts_lock:
            return Counter(self._by_admission)

    def reset_counts(self) -> None:
        with self._counts_lock:
            self._counts.clear()
            self._by_admission.clear()
            self._labels.clear()

    def labels(self) -> Counter[str]:
        """How many answers carried each value of the model header (``x-kimi-model``): which model answered."""
        with self._counts_lock:
            return Counter(self._labels)

    def _label(self, values: list[str]) -> None:
        with self._counts_lock:
            self._labels[values[-1] if values else "(unlabelled)"] += 1

    def _count(self, target: str, cohort: bool, admission: str = "") -> None:
        with self._counts_lock:
            self._counts[Routed(target, cohort)] += 1
            self._by_admission[(admission, Routed(target, cohort))] += 1
            self._counts_lock.notify_all()

    def wait_for_admission(self, admission: str, since: Counter[tuple[str, Routed]], timeout: float) -> bool:
        """Whether a request was taken under ``admission`` beyond the counts ``since``, waiting up to ``timeout``."""
        def taken() -> bool:
            return any(n > since[key] for key, n in self._by_admission.items() if key[0] == admission)

        with self._counts_lock:
            return self._counts_lock.wait_for(taken, timeout)

    # -- the control plane: routes in, status out -------------------------------------------------------------

    def _poll(self) -> None:
        while not self._wait():
            try:
                self.sync()
            except Exception as exc:  # keep serving the last good table; a test can read the errors
                self.errors.append(repr(exc))
                log.debug("gateway stand-in sync failed", exc_info=True)

    def _wait(self) -> bool:
        """Wait for a write (or ``poll_seconds``); True once stopped."""
        if self._changed is None:
            return self._stop.wait(self.poll_seconds)
        self._changed.wait(self.poll_seconds)
        self._changed.clear()
        return self._stop.is_set()

    def _attached(self, route: Mapping[str, Any]) -> bool:
        namespace = route["metadata"].get("namespace")
        for ref in (route.get("spec") or {}).get("parentRefs") or []:
            if (ref.get("group", GATEWAY_GROUP) == GATEWAY_GROUP and ref.get("kind", "Gateway") == "Gateway"
                    and ref.get("name") == self.name and ref.get("namespace", namespace) == self.namespace):
                return True
        return False

    def _our_parent_refs(self, route: Mapping[str, Any]) -> list[dict[str, Any]]:
        namespace = route["metadata"].get("namespace")
        return [dict(ref) for ref in (route.get("spec") or {}).get("parentRefs") or []
                if ref.get("group", GATEWAY_GROUP) == GATEWAY_GROUP and ref.get("kind", "Gateway") == "Gateway"
                and ref.get("name") == self.name and ref.get("namespace", namespace) == self.namespace]

    def _compile(self, route: Mapping[str, Any]) -> tuple[_Route, list[str]]:
        meta = route["metadata"]
        namespace = str(meta.get("namespace") or "")
        unresolved: list[str] = []
        rules: list[_Rule] = []
        pools: set[tuple[str, str]] | None = None  # listed once a backendRef names an InferencePool (few routes do)
        for rule in (route.get("spec") or {}).get("rules") or []:
            backends: list[_Backend] = []
            for ref in rule.get("backendRefs") or []:
                weight = int(ref.get("weight", 1))
                filters = tuple(ref.get("filters") or [])
                unsupported = [f.get("type") for f in filters + tuple(rule.get("filters") or [])
                               if f.get("type") not in SUPPORTED_FILTERS]
                if unsupported:
                    unresolved.append(f"UnsupportedValue: filter {unsupported[0]} on {ref.get('name')}")
                    backends.append(_Backend(None, weight))
                    continue
                group, kind = ref.get("group", ""), ref.get("kind", "Service")
                ref_namespace = str(ref.get("namespace", namespace))
                if (group, kind) == (INFERENCE_GROUP, "InferencePool"):
                    # The extension's conformance: a pool that does not exist is BackendNotFound; one that does takes
                    # its share of the weights, sent to an endpoint of that pool.
                    key = ServiceKey(ref_namespace, str(ref.get("name")), 0)
                    pools = self._pools(namespace) if pools is None else pools
                    if (ref_namespace, key.name) not in pools or key not in self.backends:
                        unresolved.append(f"BackendNotFound: InferencePool {ref_namespace}/{key.name}")
                        backends.append(_Backend(None, weight, filters))
                    else:
                        backends.append(_Backend(key, weight, filters))
                    continue
                if group != "" or kind != "Service":
                    unresolved.append(f"InvalidKind: {ref.get('kind')} {ref.get('name')}")
                    backends.append(_Backend(None, weight, filters))
                    continue
                key = ServiceKey(ref_namespace, str(ref.get("name")), int(ref.get("port", 0)))
                if key not in self.backends:
                    unresolved.append(f"BackendNotFound: Service {key.namespace}/{key.name}:{key.port}")
                    backends.append(_Backend(None, weight, filters))
                else:
                    backends.append(_Backend(key, weight, filters))
            rules.append(_Rule(tuple(rule.get("matches") or [{}]), tuple(backends), tuple(rule.get("filters") or [])))
        compiled = _Route(namespace, str(meta.get("name")), str(meta.get("creationTimestamp") or ""),
                          tuple((route.get("spec") or {}).get("hostnames") or []), tuple(rules),
                          str((meta.get("annotations") or {}).get(ADMISSION_ANNOTATION) or ""))
        return compiled, unresolved

    def _pools(self, namespace: str) -> set[tuple[str, str]]:
        """The InferencePools the emulator has in ``namespace`` (none when it does not serve the kind)."""
        try:
            return {(namespace, str(p["metadata"].get("name")))
                    for p in self.rest.items(collection_path("InferencePool", namespace))}
        except Exception:
            return set()

    def add_pool(self, namespace: str, name: str, url: str) -> None:
        """Where requests for an InferencePool go (its endpoints; the pool object itself must exist too)."""
        self.backends[ServiceKey(namespace, name, 0)] = url.rstrip("/")

    def sync(self) -> None:
        """Read the routes now, serve the attached ones and write their status (what the poll thread does)."""
        with self._sync_lock:
            served: list[_Route] = []
            statuses: list[tuple[Mapping[str, Any], list[dict[str, Any]], bool, list[str]]] = []
            for route in self.rest.items(collection_path("HTTPRoute")):
                if not self._attached(route):
                    continue
                refs = self._our_parent_refs(route)
                listener_ok = [r for r in refs if r.get("sectionName") in (None, self.listener)]
                compiled, unresolved = self._compile(route)
                if listener_ok:
                    served.append(compiled)
                statuses.append((route, refs, bool(listener_ok), unresolved))
            # Serve first, then say so: a route reported Accepted already routes every new request its way.
            self._table = _Table(served)
            for taken, parents, accepted, unresolved_refs in statuses:
                self._write_status(taken, parents, accepted=accepted, unresolved=unresolved_refs)

    def _write_status(self, route: Mapping[str, Any], refs: list[dict[str, Any]], *, accepted: bool,
                      unresolved: list[str]) -> None:
        meta = route["metadata"]
        generation = int(meta.get("generation", 1))
        existing = list((route.get("status") or {}).get("parents") or [])
        ours_before = {repr(p.get("parentRef")): p for p in existing if p.get("controllerName") == CONTROLLER}
        ours: list[dict[str, Any]] = []
        for ref in refs:
            parent_ref = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": self.name, "namespace": self.namespace}
            if ref.get("sectionName"):
                parent_ref["sectionName"] = ref["sectionName"]
            ok = accepted and ref.get("sectionName") in (None, self.listener)
            wanted = [
                ("Accepted", ok, "Accepted" if ok else "NoMatchingParent",
                 "Route is accepted" if ok else f"Gateway {self.namespace}/{self.name} has no listener {ref.get('sectionName')}"),
                ("ResolvedRefs", not unresolved, "ResolvedRefs" if not unresolved else unresolved[0].split(":", 1)[0],
                 "Resolved all the Object references for the Route" if not unresolved else "; ".join(unresolved)),
            ]
            before = {c.get("type"): c for c in (ours_before.get(repr(parent_ref)) or {}).get("conditions") or []}
            conditions = []
            for type_, holds, reason, message in wanted:
                status = "True" if holds else "False"
                old = before.get(type_) or {}
                since = old.get("lastTransitionTime") if old.get("status") == status else None
                conditions.append({"type": type_, "status": status, "reason": reason, "message": message,
                                   "observedGeneration": generation, "lastTransitionTime": since or _now()})
            ours.append({"parentRef": parent_ref, "controllerName": CONTROLLER, "conditions": conditions})
        others = [p for p in existing if p.get("controllerName") != CONTROLLER]
        if sorted(map(repr, ours)) == sorted(map(repr, ours_before.values())):
            return
        path = object_path("HTTPRoute", str(meta["name"]), str(meta["namespace"])) + "/status"
        self.rest.merge_patch(path, {"status": {"parents": others + ours}}, manager="gateway-stand-in")

    # -- the data plane ---------------------------------------------------------------------------------------

    def choose(self, host: str, method: str, path: str, query: Mapping[str, str],
               headers: Mapping[str, str]) -> tuple[_Rule, _Route] | None:
        """The rule that takes the request, by the Gateway API's precedence; None when none matches."""
        best: tuple[tuple[Any, ...], _Rule, _Route] | None = None
        for route in self._table.routes:
            host_rank = _host_rank(route.hostnames, host)
            if host_rank is None:
                continue
            for index, rule in enumerate(route.rules):
                for match in rule.matches:
                    ok, exact, length = _path_matches(match, path)
                    if not ok or (match.get("method") not in (None, method)):
                        continue
                    if not _headers_match(match, headers) or not _query_matches(match, query):
                        continue
                    rank = (-host_rank, -exact, -length, 0 if match.get("method") else 1,
                            -len(match.get("headers") or []), -len(match.get("queryParams") or []),
                            route.created, f"{route.namespace}/{route.name}", index)
                    if best is None or rank < best[0]:
                        best = (rank, rule, route)
        return None if best is None else (best[1], best[2])

    def pick(self, rule: _Rule) -> _Backend | None:
        """A weighted random backend; None when every weight is 0."""
        total = sum(b.weight for b in rule.backends)
        if total <= 0:
            return None
        with self._rng_lock:
            roll = self._rng.random() * total
        for backend in rule.backends:
            if roll < backend.weight:
                return backend
            roll -= backend.weight
        return rule.backends[-1]

    def is_cohort(self, rule: _Rule | None, headers: Mapping[str, str]) -> bool:
        """Counted as the cohort's: taken by a rule that matches the cohort header (a forged or stale value is taken
        by the rule for everyone else, as it is on a real gateway); with no rule, carrying the header at all."""
        if self.cohort_header is None:
            return False
        if rule is None:
            return self.cohort_header in headers
        return any(str(h.get("name", "")).lower() == self.cohort_header
                   for match in rule.matches for h in match.get("headers") or [])


def _modified(headers: list[tuple[str, str]], filters: tuple[dict[str, Any], ...], kind: str) -> list[tuple[str, str]]:
    """Headers after the filters of ``kind``, as the Gateway API says: ``set`` replaces (or adds), ``add`` appends,
    ``remove`` drops; names compare case-insensitively."""
    out = list(headers)
    key = kind[0].lower() + kind[1:]
    for spec in (f.get(key) or {} for f in filters if f.get("type") == kind):
        for header in spec.get("set") or []:
            name = str(header["name"])
            out = [(k, v) for k, v in out if k.lower() != name.lower()] + [(name, str(header["value"]))]
        for header in spec.get("add") or []:
            out.append((str(header["name"]), str(header["value"])))
        dropped = {str(n).lower() for n in spec.get("remove") or []}
        out = [(k, v) for k, v in out if k.lower() not in dropped]
    return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    gateway: GatewayStandIn


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes: without TCP_NODELAY, Nagle and the client's delayed ACK
    # would add ~40 ms to every answer, which a real proxy does not.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("gateway stand-in: " + format, *args)

    def _plain(self, status: int, text: str) -> None:
        body = text.encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        gateway = self.server.gateway
        split = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        host = headers.get("host", "").lower().split(":", 1)[0]  # route hostnames are DNS names, never IPv6
        length = int(headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        chosen = gateway.choose(host, self.command, split.path or "/", dict(parse_qsl(split.query)), headers)
        cohort = gateway.is_cohort(chosen[0] if chosen else None, headers)
        if chosen is None:
            gateway._count(NO_ROUTE, cohort)
            self._plain(404, "no route matches this request")
            return
        rule, route = chosen
        backend = gateway.pick(rule)
        if backend is None or backend.key is None:
            gateway._count(UNAVAILABLE, cohort, route.admission)
            # The Gateway API: all weights 0, or an invalid backend, is answered 500.
            self._plain(500, f"route {route.namespace}/{route.name} has no backend to send this request to")
            return
        # Rule filters apply to every request the rule takes, a backendRef's only when that backend is chosen.
        filters = rule.filters + backend.filters
        self._forward(gateway, backend.key, body, headers, cohort, route.admission, filters)

    def _forward(self, gateway: GatewayStandIn, key: ServiceKey, body: bytes, headers: Mapping[str, str],
                 cohort: bool, admission: str = "", filters: tuple[dict[str, Any], ...] = ()) -> None:
        upstream = gateway.backends[key] + self.path
        forwarded = _modified([(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP],
                              filters, "RequestHeaderModifier")
        try:
            request = gateway._client.build_request(self.command, upstream, headers=forwarded, content=body)
            response = gateway._client.send(request, stream=True)
        except httpx.TransportError:
            gateway._count(UNAVAILABLE, cohort, admission)
            # A Service without ready endpoints: the specification's 503.
            self._plain(503, f"Service {key.namespace}/{key.name}:{key.port} has no ready endpoint")
            return
        gateway._count(key.name, cohort, admission)
        answered = _modified([(k, v) for k, v in response.headers.multi_items() if k.lower() not in HOP_BY_HOP],
                             filters, "ResponseHeaderModifier")
        gateway._label([v for k, v in answered if k.lower() == gateway.model_header])
        try:
            self.send_response(response.status_code)
            for name, value in answered:
                self.send_header(name, value)
            sized = "content-length" in response.headers
            if sized:
                self.send_header("Content-Length", response.headers["content-length"])
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in response.iter_raw():
                if not chunk:
                    continue
                if sized:
                    self.wfile.write(chunk)
                else:
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            if not sized:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except httpx.HTTPError:
            self.close_connection = True  # the upstream broke off mid-answer: so does the client's stream
        finally:
            response.close()

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()
