"""The internal cohort's token: a random value made anew each time the route closes, kept only in a Secret.

A cohort header any client can set lets anyone onto a candidate. With
``cohort_header.source: token`` the value that marks the cohort is a
``secrets.token_urlsafe(32)`` made when the route closes (every deployment and
every restore starts by closing it), written to the Kubernetes Secret the
settings name (key ``token``) under kimi-ops's admission field manager, and
rendered into the route's ``Exact`` header match. The application layer reads
the Secret for its internal users; a request carrying the previous token, or a
guessed one, matches no cohort rule and is an ordinary request. kimi-ops itself
only writes the Secret (its Role reads no Secret): between closings it takes the
token back from the route it wrote. The token is returned to the route renderer
only: it is never logged, posted, audited or stored in kimi-ops's database (the
route object in the cluster carries it, as any header match must; who may read
HTTPRoutes there may read it).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from bot.adapters.cluster.errors import ClusterError
from bot.adapters.cluster.rest import Rest, api_error
from bot.adapters.cluster.route_names import ENDPOINT_LABEL, ROUTE_MANAGER, route_settings
from bot.config import EndpointSettings

TOKEN_KEY = "token"
TOKEN_BYTES = 32


def cohort_secret(endpoint: EndpointSettings) -> str:
    route = route_settings(endpoint)
    return route.cohort_header.secret_for(route.route_name(endpoint.name))


def _in_route(live: dict[str, Any] | None, header: str) -> str | None:
    """The token the route kimi-ops wrote last matches on (its first rule's ``Exact`` match on the cohort header)."""
    rules = ((live or {}).get("spec") or {}).get("rules") or []
    for match in (rules[0].get("matches") or []) if rules and isinstance(rules[0], dict) else []:
        for wanted in match.get("headers") or []:
            if str(wanted.get("name", "")).lower() == header.lower() and wanted.get("type", "Exact") == "Exact":
                value = wanted.get("value")
                return str(value) if value else None
    return None


def cohort_token(rest: Rest, endpoint: EndpointSettings, *, rotate: bool, live: dict[str, Any] | None) -> str | None:
    """The cohort's token: the one ``live`` (the route as the cluster has it) matches on, or a new one when ``rotate``
    or there is none; ``None`` for a jwt or static cohort."""
    route = route_settings(endpoint)
    if route.cohort_header.source != "token":
        return None
    name = cohort_secret(endpoint)
    try:
        token = None if rotate else _in_route(live, route.cohort_header.name)
        if token is not None:
            return token
        token = secrets.token_urlsafe(TOKEN_BYTES)
        rest.apply({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": endpoint.namespace,
                         "labels": {"app.kubernetes.io/managed-by": "kimi-ops", ENDPOINT_LABEL: endpoint.name}},
            "data": {TOKEN_KEY: base64.b64encode(token.encode("ascii")).decode("ascii")},
        }, manager=ROUTE_MANAGER, force=True)
    except Exception as exc:  # the message names the Secret, never its value
        raise ClusterError(f"the internal cohort's Secret {endpoint.namespace}/{name} could not be written: "
                           f"{api_error(exc)}") from exc
    return token
