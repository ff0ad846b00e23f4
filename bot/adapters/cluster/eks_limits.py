"""The endpoint's request limits on the EKS path, where vLLM has no ``requestLimits`` block.

The concurrency limit becomes vLLM's own ``--max-num-seqs`` (appended to the
release's arguments, replacing any the release sets: the endpoint's accepted
limit is the authority), and all three limits are written as Deployment
annotations for the application layer in front of vLLM and for read-back
(``Cluster.observe``).
"""

from __future__ import annotations

from bot.config import RequestLimits
from bot.domain.release import ReleaseManifest

MAX_NUM_SEQS = "--max-num-seqs"
MAX_CONCURRENT_ANNOTATION = "kimi-ops.io/max-concurrent-requests"
MAX_QUEUE_ANNOTATION = "kimi-ops.io/max-queue-size"
OVERFLOW_STATUS_ANNOTATION = "kimi-ops.io/overflow-status-code"


def eks_serving_args(release: ReleaseManifest, limits: RequestLimits) -> list[str]:
    """The release's vLLM arguments with ``--max-num-seqs`` set to the endpoint's concurrency limit.

    A ``--max-num-seqs`` the release carries is dropped rather than left for argparse's
    last-one-wins, so the container's arguments say one value, the one that runs.
    """
    args: list[str] = []
    skip_value = False
    for arg in release.serving.args:
        if skip_value:
            skip_value = False
            continue
        if arg == MAX_NUM_SEQS:
            skip_value = True
            continue
        if arg.startswith(MAX_NUM_SEQS + "="):
            continue
        args.append(arg)
    return [*args, MAX_NUM_SEQS, str(limits.max_concurrent_requests)]


def limit_annotations(limits: RequestLimits) -> dict[str, str]:
    """The EKS Deployment's request limits, for the application layer in front of vLLM and for read-back."""
    return {
        MAX_CONCURRENT_ANNOTATION: str(limits.max_concurrent_requests),
        MAX_QUEUE_ANNOTATION: str(limits.max_queue_size),
        OVERFLOW_STATUS_ANNOTATION: str(limits.overflow_status_code),
    }
