"""``/kimi status [ENDPOINT|SERVICE]``: what runs and what users get (drift from the record), deployment in flight, probes.

For a service (a pair of endpoints): both sides, each with its release, route weight and reservation time left.
"""

from __future__ import annotations

from bot.bootstrap import Root
from bot.domain.chat_text import literal
from bot.services.access import Identity, authorize
from bot.services.pair_sides import service_settings
from bot.services.pairs import ServiceStatus, service_status
from bot.services.readiness import ProbeView, endpoint_status
from bot.views.deployments import deployment_title
from bot.views.icons import Icon
from bot.views.parts import Divider, Heading, Part, Reply, Text, plain
from bot.views.status import cluster_rows
from commands.base import Usage, at, extra

NAME = "status"
USAGE = "/kimi status [ENDPOINT|SERVICE]"
HELP = ("Show each endpoint's live release, what the cluster runs and users get (drift from kimi-ops's record), "
        "the limits applied, deployment in flight, recent readiness probes and reservation time left.")
PROBES_SHOWN = 5


def parse(args: list[str]) -> str | None:
    if len(args) > 1:
        raise Usage(USAGE, extra(args[1:]) + " (one endpoint, or none for all)")
    return args[0] if args else None


def probe_history(probes: list[ProbeView]) -> str:
    """Newest first, one mark each: time and first-token latency, or the failure's kind."""
    return " · ".join(
        f"{Icon.PASS} {p.at:%H:%M:%S} {p.ttft_ms or 0:.0f} ms" if p.ok else f"{Icon.FAIL} {p.at:%H:%M:%S} {p.failure_kind}"
        for p in probes
    )


def service_parts(status: ServiceStatus) -> list[Part]:
    """Both sides of a service: who has the users, the split, the release and the reservation left on each."""
    parts: list[Part] = [Heading(f"{status.name} (service: {' + '.join(s.endpoint for s in status.sides)})")]
    hold = status.on_fallback
    if hold is not None:
        parts.append(Text(f":twisted_rightwards_arrows: *On the fallback:* {hold.words}. `/kimi admission close "
                          f"{hold.endpoint} --reason …` holds them there."))
    source = "read from the route" if status.split_source == "cluster" else "kimi-ops's record; the route was not read"
    for side in status.sides:
        weight = f"{side.weight}%" if side.weight is not None else "unknown"
        cohort = {True: ", internal cohort", False: "", None: ""}[side.cohort]
        lines = [
            f"*release:* {side.release or 'none live'}" + (
                f" — its users are on the fallback since {at(hold.since)}" if hold and hold.endpoint == side.endpoint
                else " — users are here" if side.users else " — kept warm" if side.release else ""),
            f"*route weight:* {weight} of ordinary traffic{cohort} ({source})",
            f"*reservation:* {side.reservation_left} left" if side.reservation_left else "*reservation:* none seen",
        ]
        if side.in_flight:
            lines.append(f"*in flight:* {side.in_flight}")
        parts += [Text(f"*{side.endpoint}*\n" + "\n".join(lines))]
    if status.watch is not None:
        parts.append(Text(f"*pages after go-live:* {status.watch.words}"))
    parts.append(Text(f"Fast path back: `/kimi rollback {status.name}` (one route change)."))
    return parts


def run(root: Root, identity: Identity, name: str | None) -> Reply:
    ctx = root.ctx
    if service_settings(ctx, name) is not None:
        authorize(ctx, identity, "view", f"service:{name}")
        pair = service_parts(service_status(ctx, str(name)))
        return Reply(parts=tuple(pair), text=plain(pair))
    authorize(ctx, identity, "view", f"endpoint:{name or '*'}")
    statuses = endpoint_status(ctx, name, history=PROBES_SHOWN)
    parts: list[Part] = []
    for s in statuses:
        last = s.last_probe
        admission = s.cluster.recorded.admission if s.cluster is not None else ("open" if s.admission_open else "closed")
        lines = [
            f"*live release:* {s.live_release} since {at(s.live_since)}" if s.live_release else "*live release:* none",
            f"*admission:* {admission} (kimi-ops's record)",
            *[f"*{field}:* {value}" for field, value in cluster_rows(
                s.cluster, configured=s.request_limits.model_dump(mode="json"), accepted_source=s.limits_accepted)],
            f"*last readiness:* {at(last.at)} — {last.summary}" if last else "*last readiness:* never probed",
            *([f"*recent probes:* {probe_history(s.recent_probes)}"] if len(s.recent_probes) > 1 else []),
            f"*reservation:* {s.reservation_left} left (ends {at(s.reservation.end)})" if s.reservation
            else "*reservation:* none seen",
            f"*pages after go-live:* {s.watched_by}",
        ]
        if s.cold_start is not None:
            lines.append(f"*last cold start:* {s.cold_start.words()} ({at(s.cold_start_at)})")
        lines += [f"*incident:* {i.kind} since {at(i.opened_at)} — {literal(i.reason)}" for i in s.incidents]
        dep = s.in_flight
        if dep is not None:
            lines.append("*in flight:* " + deployment_title(dep.id, dep.kind, dep.release, dep.endpoint, dep.state)
                         + (f" (waiting for the {dep.pending.gate} gate)" if dep.pending else ""))
        parts += [Heading(f"{s.name} ({s.kind}, {s.environment})"), Text("\n".join(lines)), Divider()]
    if not parts:
        parts = [Text("No endpoints are configured; declare them in the KIMI_CONFIG file.")]
    return Reply(parts=tuple(parts), text=plain(parts))
