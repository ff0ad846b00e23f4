"""Reserved capacity as the domain sees it: a Capacity Block or a training plan with an end."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

ReservationKind = Literal["capacity-block", "training-plan"]
HYPERPOD_TARGET = "hyperpod-cluster"


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
    # What AWS says the capacity may be used by; None where the source did not say (stored rows, older records).
    target_resources: tuple[str, ...] | None = None  # a training plan's TargetResources, e.g. ("hyperpod-cluster",)
    platform: str | None = None  # a Capacity Block's InstancePlatform, e.g. "Linux/UNIX"

    def unusable_for(self, endpoint_kind: str) -> str | None:
        """Why this capacity cannot carry an endpoint of ``endpoint_kind`` (beyond kind, type and zone), or None.

        A training plan bought for training jobs cannot back a HyperPod cluster's instances; a Capacity Block
        reserved for a Windows platform cannot run EKS's Linux GPU nodes.
        """
        targets = self.target_resources
        if (endpoint_kind == "hyperpod" and self.kind == "training-plan" and targets is not None
                and HYPERPOD_TARGET not in targets):
            return f"the training plan is reserved for {', '.join(targets) or 'no resource'}, not {HYPERPOD_TARGET}"
        platform = self.platform
        if (endpoint_kind == "eks" and self.kind == "capacity-block" and platform is not None
                and not any(word in platform.lower() for word in ("linux", "unix", "rhel", "ubuntu"))):
            return f"the Capacity Block is for {platform} instances, not the Linux nodes EKS runs"
        return None

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
