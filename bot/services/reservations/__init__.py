"""Reservation watch: what reserved capacity exists, whose it is, and how long it has left.

``watch_reservations`` reads Capacity Blocks and training plans in every watched
region (``KIMI_AWS_REGIONS`` plus each endpoint's region) through the
``reservations`` adapter, stores what it saw in the ``reservations`` table and,
in the same transaction, writes one audit row and one outbox event for every
change:

* a reservation that appears, changes state, moves its end, or disappears;
* a reservation matched to an endpoint (the endpoint's ``reservation_id``,
  else the same region, kind, instance type and, when named, zone) whose
  instance type, kind or Availability Zone does not fit that endpoint;
* thresholds before the end (``KIMI_ALERT_THRESHOLDS_HOURS``): each fires once
  per reservation; the thresholds already sent are stored in ``alerts_sent`` so
  a restart neither repeats nor skips one. When several are crossed at once
  (the bot was down, or a reservation was shortened) one alert is sent for the
  smallest and the larger ones are marked as sent. An extension re-arms the
  thresholds that are no longer crossed;
* an escalation mentioning ``KIMI_ONCALL_GROUP`` when a live endpoint's
  reservation ends (or is cancelled or vanishes) and nothing tested can take
  over: no other endpoint with a live deployment (it passed its gates) whose
  reservation lasts longer. A bare reservation fitting the endpoint is not
  tested: it is named in the page as the place to deploy, never a reason to stay
  quiet.

A region the adapter could not read changes nothing: its reservations are
never declared gone because AWS did not answer. Instead each endpoint in that
region gets one warning (an open ``reservation-watch`` incident) that the watch
is blind, and one note when it reads AWS again. Likewise a live endpoint with
no usable reservation the watch can see (a ``no-reservation`` incident).

``alerts_sent`` holds the thresholds (numbers, in hours) already announced and
``"mismatch:…"`` strings for fit warnings already given, so neither repeats.
The pure rules (matching, fit, thresholds) live in :mod:`bot.domain.expiry`.

One module per idea: :mod:`.rows` (reading AWS, a run's report, a row's announced thresholds), :mod:`.watch` (one
run), :mod:`.reads` (what people read, and the reservation an endpoint deploys onto), :mod:`.rehearsal` (the
reservation-expiry drill).
"""

from bot.services.reservations.reads import ReservationView, reservation_for, reservation_overview, reservations_of
from bot.services.reservations.rehearsal import ExpiryRehearsal, rehearse_expiry
from bot.services.reservations.rows import ACTOR, MISSING_INCIDENT, WATCH_INCIDENT, WatchReport, read_all
from bot.services.reservations.watch import endpoints_with_tested_release, watch_reservations

__all__ = [
    "ACTOR",
    "MISSING_INCIDENT",
    "WATCH_INCIDENT",
    "ExpiryRehearsal",
    "ReservationView",
    "WatchReport",
    "endpoints_with_tested_release",
    "read_all",
    "rehearse_expiry",
    "reservation_for",
    "reservation_overview",
    "reservations_of",
    "watch_reservations",
]
