"""Local stand-ins used by tests and by `kimi-ops sandbox`."""

from bot.sandbox.aws import (
    MotoStandIn,
    seed_good_release,
    set_scan_findings,
    start_moto,
)

__all__ = ["MotoStandIn", "seed_good_release", "set_scan_findings", "start_moto"]
