"""``/kimi licence review ENDPOINT key=value …`` records a licence review (approvers); ``/kimi licence [ENDPOINT]`` lists."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.services.governance import ReviewRequest, list_reviews, record_licence_review
from bot.views.parts import Heading, Reply, Text, plain, reply
from commands.base import Usage, extra, q

NAME = "licence"
USAGE = ("/kimi licence review ENDPOINT version=V class=internal|third-party|maas third-party=yes|no "
         "maas-over-20m=yes|no attribution=TEXT expires=YYYY-MM-DD [agreement=REF]  ·  /kimi licence [ENDPOINT]")
HELP = "Record who reviewed the licence for an endpoint's exposure (approvers), or list the reviews."
KEYS = {"version", "class", "third-party", "maas-over-20m", "attribution", "expires", "agreement"}
YES, NO = {"yes", "y", "true"}, {"no", "n", "false"}


@dataclass(frozen=True)
class Args:
    endpoint: str | None
    review: ReviewRequest | None = None


def _flag(value: str, key: str) -> bool:
    if value.lower() in YES:
        return True
    if value.lower() in NO:
        return False
    raise Usage(f"{key}= takes yes or no: {USAGE}")


def parse(args: list[str]) -> Args:
    if not args or args[0].lower() != "review":
        if len(args) > 1:
            raise Usage(USAGE, extra(args[1:]) + " (one endpoint, or `review ENDPOINT key=value …`)")
        return Args(args[0].lower() if args else None)
    if len(args) < 2 or "=" in args[1]:
        raise Usage(USAGE, "name the endpoint after `review`, then its `key=value` pairs")
    pairs: dict[str, str] = {}
    for word in args[2:]:
        key, sep, value = word.partition("=")
        if not sep or key.lower() not in KEYS:
            raise Usage(USAGE, f"{q(word)} is not one of {', '.join(f'`{k}=…`' for k in sorted(KEYS))}")
        pairs[key.lower()] = value
    missing = sorted(KEYS - {"agreement"} - pairs.keys())
    if missing:
        raise Usage(f"missing {', '.join(k + '=' for k in missing)}: {USAGE}")
    try:
        day = dt.date.fromisoformat(pairs["expires"])
    except ValueError:
        raise Usage(f"expires= takes a date, YYYY-MM-DD: {USAGE}") from None
    return Args(args[1].lower(), ReviewRequest(
        endpoint=args[1].lower(), licence_version=pairs["version"], classification=pairs["class"].lower(),
        third_party_exposure=_flag(pairs["third-party"], "third-party"),
        maas_revenue_over_threshold=_flag(pairs["maas-over-20m"], "maas-over-20m"),
        attribution=pairs["attribution"], expires_at=dt.datetime.combine(day, dt.time.max, tzinfo=dt.UTC),
        separate_agreement=pairs.get("agreement"),
    ))


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    if parsed.review is not None:
        stored = record_licence_review(root.ctx, identity, parsed.review)
        return reply(f"Licence review #{stored.id} recorded for *{stored.endpoint}*: {stored.licence_version}, "
                     f"{stored.classification}, until {stored.expires_at:%Y-%m-%d}.")
    lines = [
        f"#{r.id} *{r.endpoint}* · {r.licence_version} · {r.classification} · by {r.reviewer} {r.reviewed_at:%Y-%m-%d} "
        f"· until {r.expires_at:%Y-%m-%d} · attribution: {r.attribution}"
        for r in list_reviews(root.ctx, identity, parsed.endpoint)[:20]
    ]
    parts = (Heading("Licence reviews"), Text("\n".join(lines) or "None recorded."))
    return Reply(parts=parts, text=plain(parts))
