"""Prometheus rules for an endpoint or a pair service, from its objectives and its live release.

:func:`render_rules` resolves the objectives exactly as the built-in watch does
(:func:`bot.services.metrics_watch.endpoint_objectives`) and renders them (:mod:`bot.domain.alert_rules`) as a
``PrometheusRule`` and as a plain rules file (``kimi-ops slo rules NAME`` prints them).

:func:`publish_rules` keeps the cluster's ``PrometheusRule`` of every endpoint with ``slo.alerting: prometheus``
current: it runs with each metrics-watch round (on the leader), and applies a rule object by server-side apply
only when its rendering changed since this process last applied it — after a go-live or a rollback (the
``release`` label), or a change of objectives — so the labels follow the live release within a round.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from bot.config import EndpointSettings
from bot.domain import alert_rules
from bot.logs import logger_for
from bot.services import ports
from bot.services.context import Context
from bot.services.errors import NotFound
from bot.services.metrics_watch import endpoint_objectives
from bot.services.transitions import live_deployment

log = logger_for(__name__)


@dataclass(frozen=True)
class RenderedRules:
    name: str  # the endpoint or service
    targets: tuple[alert_rules.RuleTarget, ...]
    rule_object: dict[str, Any]  # the PrometheusRule
    rules_file: dict[str, Any]  # the same groups for a plain Prometheus

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.rule_object, sort_keys=True).encode()).hexdigest()


def rule_target(ctx: Context, spec: EndpointSettings, release: str | None) -> alert_rules.RuleTarget:
    return alert_rules.RuleTarget(
        endpoint=spec.name, namespace=spec.namespace, objectives=endpoint_objectives(ctx, spec),
        window_days=spec.slo.window_days, min_requests=spec.slo.min_requests,
        kv_cache_pressure=spec.slo.kv_cache_pressure, gpus=spec.gpus, release=release,
        service=spec.pair.service if spec.pair else None, selector=spec.slo.selector)


def _live_release(ctx: Context, name: str) -> str | None:
    with ctx.uow() as uow:
        row = uow.endpoints.get(name)
        live = live_deployment(uow, row.id) if row is not None else None
        return live.release.name if live is not None else None


def _endpoints_of(ctx: Context, name: str) -> list[EndpointSettings]:
    if (spec := ctx.settings.endpoint(name)) is not None:
        return [spec]
    service = next((s for s in ctx.settings.services if s.name == name), None)
    if service is None:
        known = ", ".join(sorted([e.name for e in ctx.settings.endpoints] + [s.name for s in ctx.settings.services]))
        raise NotFound(f"no endpoint or service named {name}" + (f"; known: {known}" if known else ""))
    return [spec for side in service.endpoints if (spec := ctx.settings.endpoint(side)) is not None]


def render_rules(ctx: Context, name: str) -> RenderedRules:
    """The rules of the endpoint ``name``, or of both sides of the service ``name``, labelled with the live release."""
    specs = _endpoints_of(ctx, name)
    targets = tuple(rule_target(ctx, spec, _live_release(ctx, spec.name)) for spec in specs)
    rule_object = alert_rules.prometheus_rule(name, specs[0].namespace, targets, ctx.settings.prometheus_rule_labels)
    return RenderedRules(name, targets, rule_object, alert_rules.rules_file(targets))


class RulePublisher:
    """Applies each Prometheus-watched endpoint's rule object when its rendering changed (one per process)."""

    def __init__(self) -> None:
        self._applied: dict[str, str] = {}
        self._lock = threading.Lock()

    def publish(self, ctx: Context) -> list[str]:
        """One line per endpoint whose rules were applied or could not be."""
        watched = [spec for spec in ctx.settings.endpoints if spec.slo.alerting == "prometheus"]
        cluster: object = ctx.ports.cluster
        if not watched or not isinstance(cluster, ports.RuleApplier):
            return []
        said: list[str] = []
        for spec in watched:
            rendered = render_rules(ctx, spec.name)
            with self._lock:
                if self._applied.get(spec.name) == rendered.sha256:
                    continue
            try:
                changed = cluster.apply_rules(spec, rendered.rule_object)
            except Exception as exc:  # one endpoint's refused rule must not stop the others; said in the round's summary
                said.append(f"{spec.name}: Prometheus rules not applied ({str(exc).splitlines()[0][:200]})")
                continue
            with self._lock:
                self._applied[spec.name] = rendered.sha256
            if changed:
                release = rendered.targets[0].release or "no live release"
                said.append(f"{spec.name}: Prometheus rules applied ({release})")
        return said


PUBLISHER = RulePublisher()
