"""Availability drills: asked for by a deployer, approved by someone else, run against a live endpoint, recorded.

A drill (:mod:`bot.domain.drills` has the kinds and the verdict) is a row of ``drills``:

1. :func:`request_drill` (the ``drill`` action, deployers) records it ``waiting``. It is refused on an endpoint
   with no live release, while a deployment or another drill holds the endpoint, and while users are admitted
   (the endpoint's admission is open, or a share of it) unless the requester accepts the impact
   (``accept_user_impact``).
2. :func:`decide_drill` (the ``approve_drill`` action, approvers; never the requester, whatever the
   environment: a drill breaks a serving endpoint on purpose) approves it (``running``) or rejects it with
   a reason. The admission rule is checked again at approval.
3. :func:`run_drill` injects the fault through the cluster adapter (``DrillActions`` and ``Cluster.apply``),
   then looks at the endpoint every ``drill_poll_seconds`` — a readiness completion through the endpoint
   client, the pods and nodes through the cluster's ``WorkloadReader`` — and applies the alert rules the
   watch and the probe apply (``crashloop`` and ``node`` page on the first look that sees them, ``readiness``
   after ``readiness_failures_to_alert`` failed completions in a row), through the metrics watch's
   :class:`~bot.services.incidents.Incidents`, so the pages are real. A fault kimi-ops lifts itself is
   lifted once an alert fired (the on-call person's move), or at half the time limit when none did; a
   fault is always lifted before the drill ends, whatever happens. Detection, recovery, the alerts and the
   verdict are stored, audited and posted to the endpoint's channel.

Every state change is one transaction with an audit row (``drill.requested``, ``drill.approved``,
``drill.rejected``, ``drill.started``, ``drill.lifted``, ``drill.ended``) and a :class:`DrillNotice`.

One module per step: :mod:`.records` (what the steps share), :mod:`.asking` (ask and decide), :mod:`.running`
(run and judge), :mod:`.reads` (what people read).
"""

from bot.domain.drills import DrillView
from bot.services.drills.asking import decide_drill, request_drill
from bot.services.drills.reads import drill_check_reason, list_drills
from bot.services.drills.records import ACTOR, check_kind
from bot.services.drills.running import run_drill

__all__ = ["ACTOR", "DrillView", "check_kind", "decide_drill", "drill_check_reason", "list_drills", "request_drill", "run_drill"]
