"""The App Home tab: per endpoint, the live release, what the cluster runs and users get, drift, the deployment in flight
and its gate, reservation left, last readiness."""

from __future__ import annotations

from bot.services.access import Identity, is_allowed
from bot.services.context import Context
from bot.services.readiness import endpoint_status
from bot.views.deployments import deployment_title
from bot.views.parts import Divider, Heading, Note, Part, Text
from bot.views.status import cluster_rows
from commands.base import at


def parts(ctx: Context, identity: Identity) -> tuple[Part, ...]:
    if not is_allowed(ctx, identity, "view"):
        return (Heading("kimi-ops"), Text("You need the viewer role to see endpoints here; ask a kimi-ops admin."))
    out: list[Part] = [Heading("kimi-ops endpoints")]
    for s in endpoint_status(ctx, None, history=1):
        last = s.last_probe
        lines = [
            f"*live release:* {s.live_release or 'none'}" + (f" since {at(s.live_since)}" if s.live_since else ""),
            *[f"*{field}:* {value}" for field, value in cluster_rows(
                s.cluster, configured=s.request_limits.model_dump(mode="json"), accepted_source=s.limits_accepted)],
            f"*reservation:* {s.reservation_left} left" if s.reservation else "*reservation:* none seen",
            f"*last readiness:* {at(last.at)} — {last.summary}" if last else "*last readiness:* never probed",
        ]
        dep = s.in_flight
        if dep is None:
            lines.append("*in flight:* nothing")
        else:
            lines.append("*in flight:* " + deployment_title(dep.id, dep.kind, dep.release, dep.endpoint, dep.state))
            if dep.pending is not None:
                checks = "approvable" if dep.pending.approvable else "blocked"
                lines.append(f"*pending gate:* {dep.pending.gate} (checks {checks}) — `/kimi gates` to decide")
        out += [Text(f"*{s.name}* ({s.kind}, {s.environment})\n" + "\n".join(lines)), Divider()]
    out.append(Note(f"Updated {at(ctx.clock.now())}"))
    return tuple(out)
