"""Who pages after go-live: each endpoint's watcher, and a pair service's one watcher.

An endpoint is watched by kimi-ops's own metrics watch (``slo.alerting: builtin``) or by Prometheus and
Alertmanager (``prometheus``), never both. A pair service has one watcher for both sides, because its sides swap
roles at every deploy and rollback: with one side on each, the service's pages would move between Alertmanager's
routes and silences and kimi-ops's at every go-live, and Prometheus, holding only one side's series, could not
judge the service as a whole. So a side's ``slo.alerting: prometheus`` takes effect only once the other side has
it too; until then kimi-ops's metrics watch keeps both sides' pages (each side judged alone, as for any pair on
the built-in watch), kimi-ops applies neither side's rules nor the service's, and status says which setting waits
for which side. With both sides on Prometheus, it pages for each side and for the service as a whole (its burn
rates over both sides' requests, the rule object ``kimi-ops-slo-<service>``).
"""

from __future__ import annotations

from dataclasses import dataclass

PROMETHEUS = "prometheus"
BUILTIN = "builtin"


def watcher(alerting: str) -> str:
    """An endpoint's watcher, in a few words."""
    return "Prometheus and Alertmanager" if alerting == PROMETHEUS else "kimi-ops's metrics watch (built in)"


@dataclass(frozen=True)
class ServiceWatch:
    """A pair service's sides, each with its ``slo.alerting`` as set, in the settings' order."""

    service: str
    sides: tuple[tuple[str, str], ...]

    @property
    def effective(self) -> str:
        """The one watcher of both sides: Prometheus only when both sides have it."""
        return PROMETHEUS if all(alerting == PROMETHEUS for _, alerting in self.sides) else BUILTIN

    @property
    def waiting(self) -> tuple[str, ...]:
        """The sides whose ``slo.alerting: prometheus`` waits for the other side to have it too."""
        if self.effective == PROMETHEUS:
            return ()
        return tuple(side for side, alerting in self.sides if alerting == PROMETHEUS)

    def _others(self, endpoint: str) -> str:
        return " and ".join(side for side, _ in self.sides if side != endpoint)

    def _wait_words(self) -> str:
        waiting = self.waiting[0]
        return (f"{waiting}'s `slo.alerting: prometheus` takes effect once {self._others(waiting)} has it too "
                "(a service has one watcher)")

    @property
    def words(self) -> str:
        """The service's "pages after go-live": its watcher and what it judges."""
        if self.effective == PROMETHEUS:
            return (f"Prometheus and Alertmanager, for each side and for {self.service} as a whole (its burn rates "
                    f"over both sides: `kimi-ops slo rules {self.service}`)")
        words = f"{watcher(BUILTIN)}, for both sides, each judged alone"
        return f"{words}; {self._wait_words()}" if self.waiting else words

    def side_words(self, endpoint: str) -> str:
        """What a side's "pages after go-live" adds after its watcher."""
        if self.effective == PROMETHEUS:
            return f"; and {self.service} as a whole, with {self._others(endpoint)} (its burn rates over both sides)"
        if endpoint in self.waiting:
            return (f": its `slo.alerting: prometheus` takes effect once {self._others(endpoint)}, the other side of "
                    f"{self.service}, has it too (a service has one watcher)")
        if self.waiting:
            return (f"; {self._others(endpoint)}'s `slo.alerting: prometheus` waits for this side to have it too "
                    "(a service has one watcher)")
        return ""
