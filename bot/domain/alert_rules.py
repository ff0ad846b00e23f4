"""The metrics watch's pages as Prometheus rules, rendered from the same objectives (pure).

For an endpoint with ``alerting: prometheus`` the pages after go-live come from Prometheus and Alertmanager
instead of the built-in watch (:mod:`bot.services.metrics_watch`), so they fire while kimi-ops is down. The rules
follow slok/sloth and Pyrra (SRE workbook, ch. 5), with :mod:`bot.domain.slo`'s numbers:

* recording rules ``kimi_ops:slo_bad:ratio_rate<window>`` (the share of bad events, per objective) for every
  window of :data:`~bot.domain.slo.PAIRS`, and ``kimi_ops:slo_events:increase<long window>`` (how many events
  the long window saw: a pair alerts only past ``min_requests``, as the watch does);
* one ``KimiOpsErrorBudgetBurn`` alert per objective and severity: a pair fires when its long and short
  windows both burn faster than its factor (the pairs of one severity joined with ``or``);
* ``KimiOpsKvCachePressure``, ``KimiOpsGpuFault``, ``KimiOpsNodeFault`` and ``KimiOpsCrashLoop``, the watch's
  direct pages (:mod:`bot.domain.health`), on vLLM's, the DCGM exporter's and kube-state-metrics' series.
* for a pair service, its own burn rates (:func:`service_target`): the same rules over both sides' series, the
  requests summed before the ratio is taken, recorded by ``service`` alone; the built-in watch has no twin of
  these (it judges each side alone).

A latency objective counts a request as bad above its bound the way :func:`bot.domain.slo.count_within` does:
interpolated inside vLLM's histogram bucket around the bound (:data:`LATENCY_BUCKETS`), so both judge the same
requests bad. Every alert carries ``endpoint``, ``release`` (the live release when rendered; the rules are
applied again after each go-live and rollback), ``service`` for a side of a pair, ``severity`` and
``kimi_ops_kind`` — the incident kind of the built-in watch (``burn-page:ttft``, ``gpu``…), which the
Alertmanager receiver opens incidents by.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from bot.domain.health import BAD_NODE_CONDITIONS, HARDWARE_XIDS
from bot.domain.slo import PAIRS, TITLES, Objective, WindowPair

# vLLM v1's bucket boundaries (seconds); its queue-time histogram uses the end-to-end layout.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
LATENCY_BUCKETS: dict[str, tuple[float, ...]] = {"ttft": TTFT_BUCKETS, "queue": E2E_BUCKETS, "e2e": E2E_BUCKETS}
HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "queue": "vllm:request_queue_time_seconds",
              "e2e": "vllm:e2e_request_latency_seconds"}
REQUESTS = "http_requests_total"
ERROR_STATUS = "5.."  # "5xx" where vLLM's instrumentator groups statuses, 500/503… where it does not
REJECT_STATUS = "429|4xx"  # the overflow answer; grouped, every 4xx (as the watch reads it)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
NVLINK = ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
          "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")
BAD = "kimi_ops:slo_bad:ratio_rate"
EVENTS = "kimi_ops:slo_events:increase"
BURN_ALERT = "KimiOpsErrorBudgetBurn"
DIRECT_ALERTS = {"kv-pressure": "KimiOpsKvCachePressure", "gpu": "KimiOpsGpuFault", "node": "KimiOpsNodeFault",
                 "crashloop": "KimiOpsCrashLoop"}
KIND_LABEL = "kimi_ops_kind"
SCOPE_LABEL = "kimi_ops_scope"  # "service" on a pair service's own alerts (absent on an endpoint's)
RECENT = "5m"  # how far back a direct page looks for new rejects, NVLink errors or restarts (a few scrapes)


@dataclass(frozen=True)
class RuleTarget:
    """One endpoint as its rules see it: what it is called, where its pods run, and what it promises.

    With ``sides``, a pair service's own rules instead: its burn rates over both sides' series together, its
    recording rules labelled by ``service`` alone; its alerts name ``endpoint`` (the side users are on, where
    the page goes) and carry ``kimi_ops_scope: service``.
    """

    endpoint: str
    namespace: str
    objectives: tuple[Objective, ...]
    window_days: float
    min_requests: int
    kv_cache_pressure: float
    gpus: int
    release: str | None = None
    service: str | None = None
    selector: str | None = None  # PromQL label matchers of the endpoint's series; default: its pods by name
    sides: tuple[RuleTarget, ...] = ()  # a pair service's own rules: over both sides' series

    @property
    def name(self) -> str:
        """What its rule groups are named after: the endpoint, or the service."""
        return self.service if self.sides and self.service else self.endpoint

    @property
    def matchers(self) -> str:
        return self.selector or f'namespace="{self.namespace}", pod=~"{self.endpoint}-.*"'

    @property
    def selectors(self) -> tuple[str, ...]:
        """The series' label matchers; for a service one per side unless both are found by pod name."""
        if not self.sides:
            return (self.matchers,)
        if all(side.selector is None for side in self.sides):
            pods = "|".join(side.endpoint for side in self.sides)
            return (f'namespace="{self.namespace}", pod=~"({pods})-.*"',)
        return tuple(dict.fromkeys(side.matchers for side in self.sides))

    @property
    def labels(self) -> dict[str, str]:
        """The labels of every rule of this endpoint (the release only on alerts: see :meth:`alert_labels`)."""
        if self.sides:
            return {"service": self.service or self.endpoint}
        found = {"endpoint": self.endpoint}
        if self.service:
            found["service"] = self.service
        return found

    @property
    def recorded(self) -> dict[str, str]:
        """The labels that pick its recorded series: a service's have no ``endpoint`` (its sides' have one)."""
        return {**self.labels, "endpoint": ""} if self.sides else self.labels

    def alert_labels(self, kind: str, severity: str) -> dict[str, str]:
        found = {"endpoint": self.endpoint, **self.labels, "release": self.release or "none", "severity": severity,
                 KIND_LABEL: kind}
        if self.sides:
            found[SCOPE_LABEL] = "service"
        return found


def duration(length_minutes: float) -> str:
    """A Prometheus duration (``5m``, ``6h``, ``3d``) of a whole number of minutes."""
    minutes = int(length_minutes)
    if minutes % (24 * 60) == 0:
        return f"{minutes // (24 * 60)}d"
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


def _span(length: dt.timedelta) -> str:
    return duration(length.total_seconds() / 60)


def _number(value: float) -> str:
    return f"{value:.6g}"


def le_matcher(bound: float) -> str:
    """Both spellings of a bucket bound: Python clients write ``1.0``, Go clients and Prometheus 3 write ``1``."""
    if math.isinf(bound):
        return "+Inf"
    text = repr(float(bound))
    return f"{text[:-2]}|{text}" if text.endswith(".0") else text


# ---------------------------------------------------------------------------- the bad share of one window


Matchers = str | Sequence[str]  # one selector's label matchers, or several (a pair service's sides)


def summed(function: str, name: str, matchers: Matchers, window: str, extra: str = "") -> str:
    """``sum(rate(name{…}[window]))``; over several selectors, the sum of their union (``or``: a series once)."""
    chosen = (matchers,) if isinstance(matchers, str) else tuple(matchers)
    return "sum(" + " or ".join(f"{function}({name}{{{m}{extra}}}[{window}])" for m in chosen) + ")"


def _bucket_rate(name: str, matchers: Matchers, bound: float, window: str) -> str:
    return summed("rate", f"{name}_bucket", matchers, window, f', le=~"{le_matcher(bound)}"')


def good_rate(objective: Objective, matchers: Matchers, window: str) -> str:
    """Requests at or under the bound per second, interpolated in the bucket around it (as ``count_within``)."""
    name, bound = HISTOGRAMS[objective.name], objective.bound / 1000
    bounds = LATENCY_BUCKETS[objective.name]
    below = [le for le in bounds if le <= bound]
    above = [le for le in bounds if le > bound]
    if below and below[-1] == bound:
        return _bucket_rate(name, matchers, bound, window)
    if not above:  # past the last finite bucket: nothing more is known to be fast
        return _bucket_rate(name, matchers, below[-1], window)
    upper = _bucket_rate(name, matchers, above[0], window)
    if not below:
        return f"{upper} * {_number(bound / above[0])}"
    lower = _bucket_rate(name, matchers, below[-1], window)
    share = (bound - below[-1]) / (above[0] - below[-1])
    return f"({lower} + ({upper} - {lower}) * {_number(share)})"


def bad_ratio(objective: Objective, matchers: Matchers, window: str) -> str:
    """The share of bad events over ``window``; no value without events (so no alert on an idle endpoint)."""
    if objective.name in HISTOGRAMS:
        total = summed("rate", f"{HISTOGRAMS[objective.name]}_count", matchers, window)
        return f"clamp_min(1 - {good_rate(objective, matchers, window)} / {total}, 0)"
    status = ERROR_STATUS if objective.name == "errors" else REJECT_STATUS
    bad = summed("rate", REQUESTS, matchers, window, f', status=~"{status}"')
    return f"{bad} / {summed('rate', REQUESTS, matchers, window)}"


def events(objective: Objective, matchers: Matchers, window: str) -> str:
    name = f"{HISTOGRAMS[objective.name]}_count" if objective.name in HISTOGRAMS else REQUESTS
    return summed("increase", name, matchers, window)


def windows() -> list[str]:
    lengths = sorted({w for p in PAIRS for w in (p.short, p.long)})
    return [_span(w) for w in lengths]


def recording_rules(target: RuleTarget) -> list[dict[str, Any]]:
    longs = {_span(p.long) for p in PAIRS}
    rules: list[dict[str, Any]] = []
    for objective in target.objectives:
        labels = {**target.labels, "objective": objective.name}
        for window in windows():
            rules.append({"record": f"{BAD}{window}", "expr": bad_ratio(objective, target.selectors, window),
                          "labels": labels})
            if window in longs:
                rules.append({"record": f"{EVENTS}{window}", "expr": events(objective, target.selectors, window),
                              "labels": labels})
    return rules


# ---------------------------------------------------------------------------- alerts


def _selected(target: RuleTarget, objective: Objective) -> str:
    parts = [f'{k}="{v}"' for k, v in {**target.recorded, "objective": objective.name}.items()]
    return "{" + ", ".join(parts) + "}"


def pair_condition(target: RuleTarget, objective: Objective, pair: WindowPair) -> str:
    threshold = _number(pair.factor(_days(target.window_days)) * objective.budget)
    chosen = _selected(target, objective)
    long, short = _span(pair.long), _span(pair.short)
    return (f"({BAD}{long}{chosen} > {threshold} and {BAD}{short}{chosen} > {threshold} "
            f"and {EVENTS}{long}{chosen} >= {target.min_requests})")


def _days(window_days: float) -> dt.timedelta:
    return dt.timedelta(days=window_days)


def burn_alerts(target: RuleTarget) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    budget_window = duration(target.window_days * 24 * 60)
    who = f"service {target.name} (both sides)" if target.sides else "{{ $labels.endpoint }}"
    for objective in target.objectives:
        for severity in ("page", "warn"):
            pairs = [p for p in PAIRS if p.severity == severity]
            factors = ", ".join(f"{_number(p.factor(_days(target.window_days)))}× over {_span(p.long)} and "
                                f"{_span(p.short)}" for p in pairs)
            rules.append({
                "alert": BURN_ALERT,
                "expr": "\n  or ".join(pair_condition(target, objective, p) for p in pairs),
                "labels": target.alert_labels(f"burn-{severity}:{objective.name}", severity),
                "annotations": {
                    "summary": f"{who}: {objective.words} is burning its {budget_window} error budget",
                    "description": (f"{TITLES[objective.name]}: {{{{ $value | humanizePercentage }}}} of requests bad "
                                    f"over the long window, budget {objective.budget:.2%}; alerts above {factors}."),
                },
            })
    return rules


def _kv_pressure(target: RuleTarget) -> str:
    usage = " or ".join(f"{name}{{{target.matchers}}}" for name in KV_USAGE)
    rejects = f'sum(increase({REQUESTS}{{{target.matchers}, status=~"{REJECT_STATUS}"}}[{RECENT}])) > 0'
    return f"max({usage}) >= {_number(target.kv_cache_pressure)}\nand on() {rejects}"


def _gpu(target: RuleTarget) -> str:
    xid = " or ".join(f"DCGM_FI_DEV_XID_ERRORS{{{target.matchers}}} == {code}" for code in sorted(HARDWARE_XIDS))
    nvlink = f'{{__name__=~"{"|".join(NVLINK)}", {target.matchers}}}'
    return (f"count(DCGM_FI_DEV_GPU_UTIL{{{target.matchers}}}) < {target.gpus}\n"
            f"or count({xid}) > 0\n"
            f"or sum(increase({nvlink}[{RECENT}])) > 0")


def _node(target: RuleTarget) -> str:
    pods = f'kube_pod_info{{namespace="{target.namespace}", pod=~"{target.endpoint}-.*"}}'
    conditions = "|".join(BAD_NODE_CONDITIONS)
    bad = (f'kube_node_status_condition{{condition="Ready", status="true"}} == 0 '
           f'or kube_node_status_condition{{condition=~"{conditions}", status="true"}} == 1')
    return f"count(max by (node) ({bad}) and on(node) max by (node) ({pods})) > 0"


def _crashloop(target: RuleTarget) -> str:
    pods = f'namespace="{target.namespace}", pod=~"{target.endpoint}-.*"'
    waiting = f'kube_pod_container_status_waiting_reason{{{pods}, reason="CrashLoopBackOff"}} == 1'
    oom = (f"increase(kube_pod_container_status_restarts_total{{{pods}}}[{RECENT}]) > 0 "
           f'and on(namespace, pod, container) kube_pod_container_status_last_terminated_reason{{{pods}, '
           f'reason="OOMKilled"}} == 1')
    return f"count({waiting}) > 0\nor count({oom}) > 0"


DIRECT_WORDS = {
    "kv-pressure": "KV-cache usage at the pressure mark while requests are rejected",
    "gpu": "a GPU fell off the bus, raised a hardware XID or counts new NVLink errors",
    "node": "a node running the endpoint is not Ready or reports pressure",
    "crashloop": "a container is crash-looping or was OOM-killed and restarted",
}


def direct_alerts(target: RuleTarget) -> list[dict[str, Any]]:
    exprs = {"kv-pressure": _kv_pressure(target), "gpu": _gpu(target), "node": _node(target),
             "crashloop": _crashloop(target)}
    return [{"alert": DIRECT_ALERTS[kind], "expr": expr, "labels": target.alert_labels(kind, "page"),
             "annotations": {"summary": f"{{{{ $labels.endpoint }}}}: {DIRECT_WORDS[kind]}",
                             "description": f"{DIRECT_WORDS[kind]} (the built-in watch's {kind} page)."}}
            for kind, expr in exprs.items()]


def service_target(service: str, sides: Sequence[RuleTarget], *, endpoint: str, release: str | None) -> RuleTarget:
    """A pair service's own target over both ``sides``: for each objective the stricter side's bound and budget
    (the same when the sides promise the same), the shorter budget window and the smaller ``min_requests``.
    ``endpoint`` and ``release``: the side users are on and its live release (where the page goes)."""
    first = sides[0]
    objectives = tuple(Objective(o.name, min(x.bound for x in same), min(x.budget for x in same))
                       for o in first.objectives
                       if len(same := [x for side in sides for x in side.objectives if x.name == o.name]) == len(sides))
    return RuleTarget(endpoint=endpoint, namespace=first.namespace, objectives=objectives,
                      window_days=min(s.window_days for s in sides), min_requests=min(s.min_requests for s in sides),
                      kv_cache_pressure=min(s.kv_cache_pressure for s in sides), gpus=first.gpus, release=release,
                      service=service, sides=tuple(sides))


# ---------------------------------------------------------------------------- outputs


def rule_groups(target: RuleTarget) -> list[dict[str, Any]]:
    """A service's own groups hold its burn rates only: the direct pages are each side's."""
    alerts = burn_alerts(target) + ([] if target.sides else direct_alerts(target))
    return [{"name": f"kimi-ops.{target.name}.slo-recording", "rules": recording_rules(target)},
            {"name": f"kimi-ops.{target.name}.alerts", "rules": alerts}]


def rules_file(targets: Sequence[RuleTarget]) -> dict[str, Any]:
    """A plain Prometheus rules file (``rule_files:``) holding every target's groups."""
    return {"groups": [group for target in targets for group in rule_groups(target)]}


def rule_object_name(name: str) -> str:
    return f"kimi-ops-slo-{name}"


def prometheus_rule(name: str, namespace: str, targets: Sequence[RuleTarget],
                    extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The same groups as a Prometheus Operator ``PrometheusRule`` (``extra_labels``: what the ruleSelector picks)."""
    releases = sorted({t.release for t in targets if t.release})
    labels = {"app.kubernetes.io/managed-by": "kimi-ops", "kimi-ops.io/endpoint": name, **(extra_labels or {})}
    if len(releases) == 1:
        labels["kimi-ops.io/release"] = releases[0][:63]
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": rule_object_name(name), "namespace": namespace, "labels": labels},
            "spec": rules_file(targets)}


class _RulesDumper(yaml.SafeDumper):
    """Multi-line PromQL as a literal block and no anchors, so a person reviews the rules file as written."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_RulesDumper.add_representer(str, _string)


def rules_yaml(document: dict[str, Any]) -> str:
    """A rule object or rules file as YAML, keys in the order Prometheus documents them."""
    return yaml.dump(document, Dumper=_RulesDumper, sort_keys=False, width=1_000_000, allow_unicode=True)
