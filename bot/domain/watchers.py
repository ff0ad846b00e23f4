"""Who pages after go-live: each endpoint's watcher (its ``slo.alerting``), and what watches a pair service whole.

An endpoint is watched by kimi-ops's own metrics watch (``builtin``) or by Prometheus and Alertmanager
(``prometheus``), never both. A pair service's objectives are its sides', and each side is judged by its own
watcher. Prometheus also judges the service whole (its burn rates over both sides' requests, the rule object
``kimi-ops-slo-<service>``), but only when it watches both sides: the sum needs both sides' series, which
Prometheus is known to hold only for a side it watches, and Alertmanager's pages are taken only for such a side,
so a service rule paging a side the built-in watch keeps would page nobody while users are there. The built-in
watch judges each side alone. So a service whose sides have different watchers, or both the built-in one, is not
judged whole: status says so and names each side's watcher, and ``kimi-ops slo rules SERVICE`` says its rules
are not applied.
"""

from __future__ import annotations

from dataclasses import dataclass

PROMETHEUS = "prometheus"


def watcher(alerting: str) -> str:
    """An endpoint's watcher, in a few words."""
    return "Prometheus and Alertmanager" if alerting == PROMETHEUS else "kimi-ops's metrics watch (built in)"


@dataclass(frozen=True)
class ServiceWatch:
    """A pair service's sides and each one's ``slo.alerting``, in the settings' order."""

    service: str
    sides: tuple[tuple[str, str], ...]

    @property
    def whole(self) -> bool:
        """Whether Prometheus judges the service whole (kimi-ops applies the service's own rule object)."""
        return all(alerting == PROMETHEUS for _, alerting in self.sides)

    @property
    def split(self) -> bool:
        """Whether the sides have different watchers."""
        return len({alerting == PROMETHEUS for _, alerting in self.sides}) > 1

    @property
    def sides_words(self) -> str:
        """Who pages for the sides: one watcher, or each side's."""
        if not self.split:
            return watcher(self.sides[0][1])
        return "; ".join(f"{side}: {watcher(alerting)}" for side, alerting in self.sides)

    @property
    def whole_words(self) -> str:
        """Whether anything judges the service whole (its burn rates over both sides' requests), and why not."""
        if self.whole:
            return f"Prometheus, its burn rates over both sides (`kimi-ops slo rules {self.service}`)"
        if self.split:
            builtin = " and ".join(side for side, alerting in self.sides if alerting != PROMETHEUS)
            return (f"not watched: its sides have different watchers, so each is judged alone (`slo.alerting: "
                    f"prometheus` on {builtin} too gives {self.service} rules of its own)")
        return ("not watched: kimi-ops's metrics watch judges each side alone (`slo.alerting: prometheus` on both "
                f"sides gives {self.service} rules of its own)")

    def side_words(self, endpoint: str) -> str:
        """What a side's "pages after go-live" adds after its own watcher: what judges its service whole."""
        if self.whole:
            return f"; {self.service} as a whole too (its burn rates over both sides)"
        others = ", ".join(f"{side}: {watcher(alerting)}" for side, alerting in self.sides if side != endpoint)
        if self.split:
            return f"; {self.service} as a whole: not watched (its other side, {others}, has another watcher)"
        return f"; {self.service} as a whole: not watched (each side judged alone)"
