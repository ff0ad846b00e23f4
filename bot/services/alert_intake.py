"""Alertmanager's notifications into incidents: the pages of endpoints Prometheus watches, posted like the watch's.

Each of kimi-ops's alerts in a notification (:func:`bot.domain.alertmanager.signals`) opens or closes the incident
of its endpoint and kind through :class:`bot.services.incidents.Incidents` — the same row, audit entry and
``watch.alert`` event as the built-in watch, so the notifier posts it into the endpoint's channel with the live
release, the last deployment and its thread, and the Acknowledge / Silence… / Roll back buttons; a resolved alert
replies in the page's thread and edits the page.

Once, across repeats and replicas: Alertmanager repeats a firing group every ``group_interval`` and each member of
an Alertmanager cluster may send it, and every kimi-ops replica may receive one. An incident is open at most once
per endpoint and kind (a database rule): a firing alert whose kind is open already changes nothing, and a replica
that loses the race to open it finds the row there (the constraint refuses its copy, the transaction rolls back).
The incident keeps the alert's ``fingerprint``; only a resolved notification of that very alert closes it. After a
go-live the alert is raised anew with the new ``release`` label while the old one resolves: the incident follows the
firing one (firing alerts are read first), so the page neither recovers nor repeats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.adapters.store.repositories import Conflict
from bot.config import EndpointSettings
from bot.domain.alertmanager import AlertSignal, WebhookNotification, printable, signals
from bot.domain.watchers import PROMETHEUS
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.incidents import Incidents
from bot.services.metrics_watch import KINDS
from bot.services.pair_sides import effective_alerting

log = logger_for(__name__)

ACTOR = "alertmanager"


@dataclass
class Intake:
    """What one notification did, for Alertmanager's log and kimi-ops's."""

    opened: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    repeated: int = 0  # firing alerts whose incident was open already (a repeat, another replica's)
    ignored: list[str] = field(default_factory=list)  # not kimi-ops's, or for no endpoint it knows

    @property
    def summary(self) -> str:
        said = [f"opened {_some(self.opened)}" if self.opened else "", f"closed {_some(self.closed)}" if self.closed
                else "", f"{self.repeated} already open" if self.repeated else "",
                f"ignored {_some(self.ignored, '; ')}" if self.ignored else ""]
        return "; ".join(s for s in said if s) or "nothing to do"


SHOWN = 5  # names in the one-line answer; a notification may carry thousands of alerts


def _some(names: list[str], sep: str = ", ") -> str:
    more = f"{sep}and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return sep.join(names[:SHOWN]) + more


def receive_notification(ctx: Context, notification: WebhookNotification) -> Intake:
    """Open and close the incidents the notification's alerts say, each in its own transaction."""
    intake = Intake()
    found, others = signals(notification, frozenset(KINDS))
    if others:
        intake.ignored.append(f"{others} alert(s) without kimi-ops's endpoint and kind labels")
    known: set[str] = set()
    if found:  # one read: a notification naming thousands of unknown endpoints costs a query, not a transaction each
        with ctx.uow() as uow:
            known = {row.name for row in uow.endpoints.list()}
    # Firing first: after a go-live the alert is raised anew (its release label changed) in the same group that
    # resolves the old one, and the incident must follow the new alert before the old one's resolution is read.
    for signal in sorted(found, key=lambda f: not f.firing):
        try:
            _apply(ctx, signal, intake, known)
        except Conflict:  # another replica opened it between our read and our write: it posts, we do not
            intake.repeated += 1
    if intake.opened or intake.closed:
        log.info("Alertmanager notification %s: %s", notification.groupKey[:200], intake.summary)
    return intake


def _apply(ctx: Context, signal: AlertSignal, intake: Intake, known: set[str]) -> None:
    now = ctx.clock.now()
    unknown = f"{signal.kind} for unknown endpoint {printable(signal.endpoint)[:63]}"
    if signal.endpoint not in known:  # a set's lookup: a label no endpoint's name (NUL included) never reaches SQL
        intake.ignored.append(unknown)
        return
    with ctx.uow() as uow:
        row = uow.endpoints.get(signal.endpoint)
        if row is None:  # removed since the names were read
            intake.ignored.append(unknown)
            return
        spec = ctx.settings.endpoint(row.name) or EndpointSettings.model_validate(row.settings)
        open_now = {i.kind: i for i in uow.incidents.open_of(row.id, [signal.kind])}
        incidents = Incidents(ctx, uow, row, spec, now, open_now, actor=ACTOR)
        label = f"{signal.endpoint} {signal.kind}"
        if signal.firing and (alerting := effective_alerting(ctx, spec)) != PROMETHEUS:
            # kimi-ops's own watch pages for it and closes what it finds healthy: an alert left firing in Prometheus
            # (its rule kept after a switch to builtin) would reopen that page at every Alertmanager repeat.
            why = (f"slo.alerting is {spec.slo.alerting}" if spec.slo.alerting == alerting else
                   "its slo.alerting: prometheus waits for the other side of its service to have it too")
            intake.ignored.append(f"{label} (kimi-ops's own watch pages for it: {why})")
            return
        if signal.firing:
            if (incident := open_now.get(signal.kind)) is not None:
                intake.repeated += 1
                if incident.fingerprint is not None and incident.fingerprint != signal.fingerprint:
                    incident.fingerprint = signal.fingerprint  # the same page, now raised by this alert
                    uow.commit()
                return
            incidents.open(signal.kind, "page" if signal.severity == "page" else "warn", signal.reason)
            open_now[signal.kind].fingerprint = signal.fingerprint
            intake.opened.append(label)
        else:
            incident = open_now.get(signal.kind)
            if incident is None or incident.fingerprint != signal.fingerprint:
                return  # not this alert's incident (closed already, or the watch's, or an older release's alert)
            incidents.close(signal.kind, "Alertmanager resolved the alert")
            intake.closed.append(label)
        uow.commit()


class Reconciler:
    """Closes the Alertmanager incidents whose alert Alertmanager no longer holds (one per process, the leader's round).

    Alertmanager sends nothing for a silenced alert, its resolution included: an incident whose alert resolved under
    a silence would stay open and hold back the next page of its kind. Each round asks Alertmanager which alerts it
    holds for each Prometheus-watched endpoint with such an incident; one missing from two rounds in a row (not one:
    a restarted Alertmanager holds nothing until Prometheus sends its alerts again) is closed. Alertmanager
    unreachable closes nothing.
    """

    MISSED_ROUNDS = 2

    def __init__(self) -> None:
        self._missed: dict[int, int] = {}

    def reconcile(self, ctx: Context) -> list[str]:
        silences = ctx.ports.silences
        watched = {spec.name: spec for spec in ctx.settings.endpoints if effective_alerting(ctx, spec) == PROMETHEUS}
        if silences is None or not watched:
            return []
        said: list[str] = []
        with ctx.uow() as uow:
            names = {row.id: row.name for row in uow.endpoints.list() if row.name in watched}
            held = {names[row_id]: [i.id for i in incidents if i.fingerprint]
                    for row_id, incidents in uow.incidents.open_by_endpoint(KINDS).items() if row_id in names}
        for name, incident_ids in held.items():
            if not incident_ids:
                continue
            try:
                active = silences.active_fingerprints({"endpoint": name})
            except Exception as exc:  # unreachable: close nothing on a guess
                said.append(f"{name}: Alertmanager not asked ({str(exc).splitlines()[0][:200]})")
                continue
            said += self._close_missing(ctx, name, incident_ids, active, watched[name])
        return said

    def _close_missing(self, ctx: Context, name: str, incident_ids: list[int], active: set[str],
                       spec: EndpointSettings) -> list[str]:
        closed: list[str] = []
        with ctx.uow() as uow:
            row = uow.endpoints.get(name)
            open_now = {i.kind: i for i in uow.incidents.open_of(row.id, KINDS)} if row is not None else {}
            for kind, incident in list(open_now.items()):
                if incident.id not in incident_ids or incident.fingerprint in active:
                    self._missed.pop(incident.id, None)
                    continue
                self._missed[incident.id] = self._missed.get(incident.id, 0) + 1
                if self._missed[incident.id] >= self.MISSED_ROUNDS and row is not None:
                    Incidents(ctx, uow, row, spec, ctx.clock.now(), open_now, actor=ACTOR).close(
                        kind, "Alertmanager no longer holds the alert (it resolved, perhaps while silenced)")
                    self._missed.pop(incident.id, None)
                    closed.append(f"{name}: {kind} closed (Alertmanager no longer holds its alert)")
            uow.commit()
        return closed


RECONCILER = Reconciler()
