"""Services: a name users call, one HTTPRoute, backed by a pair of endpoints; and how each side learns its pair."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bot.config.endpoint import EndpointSettings, PairSide, RampSettings
from bot.route_config import DNS_LABEL, MODEL_PORT, Backend, CohortHeader, GatewayParent, RouteSettings


class ServiceSide(BaseModel):
    """One side of a service: an endpoint (its own node and reservation) and the Service the route sends to."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(description="The side's endpoint.")
    backend: Backend | None = Field(default=None, description="Default: named after the endpoint, port 8000.")


class ServiceRoute(BaseModel):
    """The service's one HTTPRoute: where it attaches and who the internal cohort is (the sides are its backends)."""

    model_config = ConfigDict(extra="forbid")

    gateway: GatewayParent = Field(description="The Gateway the route attaches to.")
    hostnames: list[str] = Field(default_factory=list, max_length=16,
                                 description="Host headers the route answers; empty: every hostname of the listener.")
    cohort_header: CohortHeader = Field(default_factory=CohortHeader, description="The header of the internal cohort.")
    fallback: Backend | None = Field(
        default=None, description="A smaller fallback model: while the side users are on stops answering, kimi-ops "
                                  "moves them there (never to the other side) until its readiness passes again.")


class ServiceSettings(BaseModel):
    """A name users call, one HTTPRoute, backed by a pair of endpoints (blue/green; DESIGN.md, "Pairs")."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL,
                      description="What users call the service; also the name of its HTTPRoute.")
    sides: list[str | ServiceSide] = Field(min_length=2, max_length=2,
                                           description="The two endpoints, each its own node and reservation.")
    route: ServiceRoute = Field(description="The service's one HTTPRoute.")
    ramp: RampSettings = Field(default_factory=lambda: RampSettings(steps=[1, 5, 25, 50]),
                               description="Weight steps (1-99 %) shifted to the candidate side, each soaked.")

    @property
    def side_list(self) -> list[ServiceSide]:
        return [ServiceSide(endpoint=s) if isinstance(s, str) else s for s in self.sides]

    @property
    def endpoints(self) -> tuple[str, str]:
        first, second = (s.endpoint for s in self.side_list)
        return first, second

    def side_route(self, side: ServiceSide, partner: ServiceSide) -> RouteSettings:
        """The route as one side writes it: its Service is the model, the other side's is where the rest goes."""
        def backend(s: ServiceSide) -> Backend:
            return s.backend or Backend(name=s.endpoint, port=MODEL_PORT)

        return RouteSettings(name=self.name, gateway=self.route.gateway, hostnames=list(self.route.hostnames),
                             backend=backend(side), fallback=backend(partner), cohort_header=self.route.cohort_header)


def with_pair_sides(endpoints: list[EndpointSettings], services: list[ServiceSettings]) -> list[EndpointSettings]:
    """The endpoints, each side of a service given the service's route (its Service first), ramp and partner."""
    by_name = {e.name: e for e in endpoints}
    taken: dict[str, str] = {}
    for service in services:
        if service.name in by_name:
            raise ValueError(f"service {service.name} has the name of an endpoint; names users call must be distinct")
        sides = service.side_list
        first, second = service.endpoints
        if first == second:
            raise ValueError(f"service {service.name}: its two sides must be two endpoints, not {first} twice")
        for side, partner in ((sides[0], sides[1]), (sides[1], sides[0])):
            endpoint = by_name.get(side.endpoint)
            if endpoint is None:
                raise ValueError(f"service {service.name}: no endpoint named {side.endpoint}; declare it under endpoints:")
            if side.endpoint in taken and taken[side.endpoint] != service.name:
                raise ValueError(f"endpoint {side.endpoint} is a side of both {taken[side.endpoint]} and {service.name}")
            taken[side.endpoint] = service.name
            other = by_name[partner.endpoint]
            if (endpoint.namespace, endpoint.cluster_context) != (other.namespace, other.cluster_context):
                raise ValueError(f"service {service.name}: {side.endpoint} and {partner.endpoint} must share a cluster "
                                 "and namespace (one HTTPRoute sends to both Services)")
            route = service.side_route(side, partner)
            fallback = service.route.fallback
            if fallback is not None and any(fallback.same(s.backend or Backend(name=s.endpoint, port=MODEL_PORT))
                                            for s in sides):
                raise ValueError(f"service {service.name}: route.fallback {fallback.name} is one of its sides; name the "
                                 "smaller fallback model's Service")
            pair = PairSide(service=service.name, partner=partner.endpoint, fallback=fallback)
            if endpoint.route is not None and endpoint.route != route:
                raise ValueError(f"endpoint {side.endpoint} is a side of service {service.name}: its route comes "
                                 "from the service; remove its own route: block")
            by_name[side.endpoint] = endpoint.model_copy(update={"route": route, "ramp": service.ramp, "pair": pair})
    return [by_name[e.name] for e in endpoints]
