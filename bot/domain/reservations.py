"""Reserved capacity as the domain sees it: a Capacity Block or a training plan with an end."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

ReservationKind = Literal["capacity-block", "training-plan"]


@dataclass(frozen=True)
class ReservationInfo:
    id: str
    kind: ReservationKind
    region: str
    instance_type: str
    availability_zone: str | None
    instance_count: int
    start: dt.datetime | None
    end: dt.datetime | None
    state: str

    def covers(self, start: dt.datetime, end: dt.datetime) -> bool:
        """True when the reservation is usable for the whole window [start, end]."""
        if self.start is None or self.end is None:
            return False
        return self.start <= start and self.end >= end

    def remaining(self, now: dt.datetime) -> dt.timedelta | None:
        return None if self.end is None else self.end - now


def same_instance_type(reserved: str, wanted: str) -> bool:
    """``ml.p6-b300.48xlarge`` (SageMaker) and ``p6-b300.48xlarge`` (EC2) name the same host."""
    return reserved.removeprefix("ml.") == wanted.removeprefix("ml.")
