"""Prometheus rules for an endpoint or a pair service, from its objectives and its live release.

:func:`render_rules` resolves the objectives exactly as the built-in watch does
(:func:`bot.services.metrics_watch.endpoint_objectives`) and renders them (:mod:`bot.domain.alert_rules`) as a
``PrometheusRule`` and as a plain rules file (``kimi-ops slo rules NAME`` prints them).

The cluster's ``PrometheusRule`` of every endpoint Prometheus pages for (``slo.alerting: prometheus``; on both sides
of a pair, :mod:`bot.domain.watchers`) follows its live release (the ``release`` label) two ways, both by
server-side apply through the cluster port:

* :func:`apply_after_go_live`: the deployment itself applies them right after it goes live (a deploy's ramp, a
  rollback's or restore's reopening). A refusal is said in the deployment's thread and audited; it never
  undoes the go-live.
* :meth:`RulePublisher.publish`: each metrics-watch round (on the leader) applies a rule object whose rendering
  changed since this process last applied it: the retry after a refusal, a change of objectives, and the
  safety net for a go-live recorded by another replica. An unchanged rendering is applied again once
  :data:`REASSERT_AFTER` passed since this process last did: server-side apply leaves an intact object as it is,
  and brings back one deleted or edited by hand (said in the round's summary).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from bot.config import EndpointSettings, ServiceSettings
from bot.domain import alert_rules
from bot.domain.chat_text import literal
from bot.domain.events import RulesNotApplied
from bot.domain.watchers import PROMETHEUS
from bot.logs import logger_for
from bot.services import ports
from bot.services.context import Context
from bot.services.errors import NotFound
from bot.services.metrics_watch import endpoint_objectives
from bot.services.pair_sides import effective_alerting, service_watch, side_watch, users_side
from bot.services.transitions import live_deployment

log = logger_for(__name__)


@dataclass(frozen=True)
class RenderedRules:
    name: str  # the endpoint or service
    targets: tuple[alert_rules.RuleTarget, ...]
    rule_object: dict[str, Any]  # the PrometheusRule
    rules_file: dict[str, Any]  # the same groups for a plain Prometheus
    applied_by: EndpointSettings  # whose cluster and namespace the object goes to (a pair's sides share them)

    @property
    def release_words(self) -> str:
        releases = sorted({t.release for t in self.targets if t.release})
        return ", ".join(releases) or "no live release"

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


def _service_rules(ctx: Context, service: ServiceSettings) -> RenderedRules:
    """The service's own burn-rate rules over both sides' series, paging the side users are on."""
    specs = [spec for side in service.endpoints if (spec := ctx.settings.endpoint(side)) is not None]
    sides = tuple(rule_target(ctx, spec, None) for spec in specs)
    endpoint, release = specs[0].name, None
    with ctx.uow() as uow:
        if (row := users_side(uow, service)) is not None and (live := live_deployment(uow, row.id)) is not None:
            endpoint, release = row.name, live.release.name
    target = alert_rules.service_target(service.name, sides, endpoint=endpoint, release=release)
    rule_object = alert_rules.prometheus_rule(service.name, specs[0].namespace, [target],
                                              ctx.settings.prometheus_rule_labels)
    return RenderedRules(service.name, (target,), rule_object, alert_rules.rules_file([target]), specs[0])


def rules_note(ctx: Context, name: str) -> str:
    """Whether kimi-ops applies ``name``'s rule object (what :class:`RulePublisher` keeps applied) and, if not, who
    pages instead: ``kimi-ops slo rules`` prints it above the rules."""
    rule = alert_rules.rule_object_name(name)
    service = ctx.settings.service(name) if ctx.settings.endpoint(name) is None else None
    if name in watched_objects(ctx):
        follows = "paging the side users are on" if service is not None else f"following {name}'s live release"
        return f"kimi-ops applies this {rule} and keeps it {follows} (slo.alerting: prometheus)."
    if service is not None:
        return f"Not applied: {name}'s pages after go-live come from {service_watch(ctx, service).words}."
    spec = ctx.settings.endpoint(name)
    pair = side_watch(ctx, spec) if spec is not None else None
    if pair is not None and name in pair.waiting:
        return f"Not applied: {name}'s pages come from kimi-ops's metrics watch{pair.side_words(name)}."
    return (f"Not applied: {name}'s pages come from kimi-ops's metrics watch (slo.alerting: builtin); with "
            "slo.alerting: prometheus kimi-ops would apply these rules.")


def render_rules(ctx: Context, name: str) -> RenderedRules:
    """The rules of the endpoint ``name`` labelled with its live release, or the pair service ``name``'s own."""
    if (spec := ctx.settings.endpoint(name)) is not None:
        target = rule_target(ctx, spec, _live_release(ctx, spec.name))
        rule_object = alert_rules.prometheus_rule(name, spec.namespace, [target], ctx.settings.prometheus_rule_labels)
        return RenderedRules(name, (target,), rule_object, alert_rules.rules_file([target]), spec)
    if (service := ctx.settings.service(name)) is not None:
        return _service_rules(ctx, service)
    known = ", ".join(sorted([e.name for e in ctx.settings.endpoints] + [s.name for s in ctx.settings.services]))
    raise NotFound(f"no endpoint or service named {name}" + (f"; known: {known}" if known else ""))


def _watched_services(ctx: Context) -> list[ServiceSettings]:
    """Pair services Prometheus watches: both sides have ``slo.alerting: prometheus`` (a service has one watcher:
    :mod:`bot.domain.watchers`)."""
    return [service for service in ctx.settings.services if service_watch(ctx, service).effective == PROMETHEUS]


def watched_objects(ctx: Context) -> list[str]:
    """The names whose rule objects kimi-ops keeps applied: every endpoint Prometheus pages for (a side of a pair
    once both sides have ``slo.alerting: prometheus``), and every pair service both of whose sides have it."""
    endpoints = [spec.name for spec in ctx.settings.endpoints if effective_alerting(ctx, spec) == PROMETHEUS]
    return endpoints + [service.name for service in _watched_services(ctx)]


def objects_following(ctx: Context, endpoint: str) -> list[str]:
    """The rule objects whose labels move when ``endpoint`` goes live (its own; its service's, whose page follows
    the users to it); none unless Prometheus pages for it."""
    services = [s.name for s in _watched_services(ctx) if endpoint in s.endpoints]
    return [name for name in watched_objects(ctx) if name == endpoint] + services


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


REASSERT_AFTER = dt.timedelta(minutes=10)
"""How long an unchanged rule object goes without being applied again (a hand-deleted one is back within it)."""


class RulePublisher:
    """Applies the watched rule objects when their rendering changed, or went unasserted for
    :data:`REASSERT_AFTER` (one per process)."""

    def __init__(self) -> None:
        self._applied: dict[str, tuple[str, dt.datetime]] = {}  # name -> (rendering applied, when)
        self._lock = threading.Lock()

    def _apply(self, ctx: Context, name: str, *, force: bool) -> tuple[RenderedRules, bool] | None:
        """Render and apply ``name``'s object (unless this process applied the same rendering within
        :data:`REASSERT_AFTER` and not ``force``): the rendering and whether the server's copy changed; None when
        skipped. Raises what the cluster raised."""
        cluster: object = ctx.ports.cluster
        if not isinstance(cluster, ports.RuleApplier):
            return None
        rendered = render_rules(ctx, name)
        now = ctx.clock.now()
        with self._lock:
            sha, at = self._applied.get(name, ("", now))
            if not force and sha == rendered.sha256 and now - at < REASSERT_AFTER:
                return None
        try:
            changed = cluster.apply_rules(rendered.applied_by, rendered.rule_object)
        except Exception:
            with self._lock:  # what the server holds now is unknown: the next round applies it whatever it renders
                self._applied.pop(name, None)
            raise
        with self._lock:
            self._applied[name] = (rendered.sha256, now)
        return rendered, changed

    def publish(self, ctx: Context) -> list[str]:
        """One line per rule object that was applied or could not be (the metrics-watch round's summary)."""
        said: list[str] = []
        for name in watched_objects(ctx):
            with self._lock:
                known = self._applied.get(name, ("", None))[0]
            try:
                done = self._apply(ctx, name, force=False)
            except Exception as exc:  # one endpoint's refused rule must not stop the others; said in the round's summary
                said.append(f"{name}: Prometheus rules not applied ({_first_line(exc)})")
                continue
            if done is not None and done[1]:
                words = f"Prometheus rules applied ({done[0].release_words})"
                if known == done[0].sha256:  # the same rendering as last time, yet the server's copy changed
                    words = f"Prometheus rules applied again ({done[0].release_words}): the cluster's copy was missing or edited"
                said.append(f"{name}: {words}")
        return said

    def after_go_live(self, ctx: Context, endpoint: str, deployment_id: int | None,
                      reply_to: str | None = None, moment: str | None = None) -> list[str]:
        """Apply the rule objects ``endpoint``'s go-live relabelled, now; audit each, and say a refusal in the
        deployment's thread (else under the message ``reply_to`` names, else in the endpoint's channel), as happening
        after ``moment`` (default: ``endpoint`` went live). Never raises: the go-live stands either way."""
        said: list[str] = []
        for name in objects_following(ctx, endpoint):
            try:
                done = self._apply(ctx, name, force=True)
                failure = None
            except Exception as exc:  # the cluster refused or did not answer: the next metrics-watch round retries
                log.warning("Prometheus rules of %s not applied after a go-live: %s", name, _first_line(exc))
                done, failure = None, _first_line(exc)
            if done is None and failure is None:
                continue
            said.append(self._record(ctx, name, endpoint, deployment_id, done, failure, reply_to,
                                     moment or f"{endpoint} went live"))
        return said

    def _record(self, ctx: Context, name: str, endpoint: str, deployment_id: int | None,
                done: tuple[RenderedRules, bool] | None, failure: str | None, reply_to: str | None,
                moment: str) -> str:
        now = ctx.clock.now()
        subject = f"deployment:{deployment_id}" if deployment_id is not None else f"endpoint:{endpoint}"
        rule = alert_rules.rule_object_name(name)
        with ctx.uow() as uow:
            if done is not None:
                rendered, changed = done
                uow.audit.record(at=now, actor="kimi-ops", action="alert_rules.applied", subject=subject,
                                 details={"rule": rule, "release": rendered.release_words, "changed": changed,
                                          "sha256": rendered.sha256})
                line = f"{name}: Prometheus rules applied ({rendered.release_words})"
            else:
                uow.audit.record(at=now, actor="kimi-ops", action="alert_rules.not_applied", subject=subject,
                                 details={"rule": rule, "reason": failure})
                line = f"{name}: Prometheus rules not applied ({failure})"
                uow.events.emit(RulesNotApplied(
                    deployment_id=deployment_id, endpoint_name=endpoint, rule=rule, reason=failure or "",
                    reply_to=reply_to,
                    text=f":warning: The PrometheusRule `{rule}` was not applied after {moment} "
                         f"({literal(failure or '')}): "
                         "Prometheus's alerts still carry the release before it. The go-live stands; the next "
                         "metrics-watch round applies the rules again."), at=now)
            uow.commit()
        return line


PUBLISHER = RulePublisher()


def apply_after_go_live(ctx: Context, endpoint: str, deployment_id: int | None = None, *,
                        reply_to: str | None = None, moment: str | None = None) -> list[str]:
    """What :meth:`RulePublisher.after_go_live` does, for the engine and a service's rollback (:mod:`bot.services.pairs`)."""
    return PUBLISHER.after_go_live(ctx, endpoint, deployment_id, reply_to, moment)
