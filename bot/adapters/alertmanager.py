"""Alertmanager's HTTP API v2, for the Silence button of pages Prometheus raised (the ``AlertSilences`` port).

``POST /api/v2/silences`` with equality matchers, the person as ``createdBy`` and their reason as ``comment``;
Alertmanager answers ``{"silenceID": …}``. ``GET /api/v2/alerts`` lists the alerts it holds (active, silenced or
inhibited; a resolved alert is gone from it). Any failure raises :class:`AlertmanagerUnavailable` with one line
saying why (unreachable, timed out, or Alertmanager's own refusal text).
"""

from __future__ import annotations

import datetime as dt

import httpx

from bot.adapters.endpoint.tls import tls_context
from bot.domain.alertmanager import silence_matchers

TIMEOUT = httpx.Timeout(10.0, connect=5.0)


class AlertmanagerUnavailable(Exception):
    """Alertmanager did not do what was asked; the message says why in one line."""


def _iso(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


class HttpAlertmanager:
    def __init__(self, base_url: str, *, timeout: httpx.Timeout = TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _request(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        url = f"{self.base_url}{path}"
        try:
            # The process's one TLS context: httpx would load the CA bundle again for every call.
            response = httpx.request(method, url, timeout=self.timeout, verify=tls_context(),
                                     **kwargs)  # type: ignore[arg-type]
        except httpx.TimeoutException:
            raise AlertmanagerUnavailable(f"timed out asking {url}") from None
        except httpx.RequestError as exc:
            raise AlertmanagerUnavailable(f"cannot reach {url}: {exc}") from None
        if response.status_code != 200:
            said = " ".join(response.text.split())[:200]
            raise AlertmanagerUnavailable(f"{url} answered HTTP {response.status_code}: {said}")
        return response

    def active_fingerprints(self, matchers: dict[str, str]) -> set[str]:
        params = [("filter", f'{name}="{value}"') for name, value in sorted(matchers.items())]
        params += [("active", "true"), ("silenced", "true"), ("inhibited", "true"), ("unprocessed", "true")]
        try:
            return {str(alert["fingerprint"]) for alert in self._request("GET", "/api/v2/alerts", params=params).json()}
        except (ValueError, KeyError, TypeError):
            raise AlertmanagerUnavailable(f"{self.base_url}/api/v2/alerts answered no list of alerts") from None

    def create_silence(self, matchers: dict[str, str], starts: dt.datetime, ends: dt.datetime, created_by: str,
                       comment: str) -> str:
        body = {"matchers": silence_matchers(matchers), "startsAt": _iso(starts), "endsAt": _iso(ends),
                "createdBy": created_by, "comment": comment}
        response = self._request("POST", "/api/v2/silences", json=body)
        try:
            return str(response.json()["silenceID"])
        except (ValueError, KeyError, TypeError):
            raise AlertmanagerUnavailable(f"{self.base_url}/api/v2/silences answered without a silenceID") from None
