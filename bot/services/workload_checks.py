"""What the traffic gate's report says of the workload it replayed: the mix used beside production's, the tail.

Checks only (no I/O): ``traffic.mix`` names the mix replayed and production's, so an approver sees what was
measured; ``traffic.prefix_unique`` warns where the configuration left the unique-prefix run out (never on
prod, where the settings refuse it); ``traffic.long_context`` reports the tail each level opened with.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.config import EndpointSettings
from bot.domain.checks import Check
from bot.domain.sweep import LevelStats, SweepPlan
from bot.domain.workload import Workload


def workload_words(workload: Workload) -> list[str]:
    """The mix used, and production's, a line each (the report and the plot)."""
    used = workload.as_dict()
    prompts = used["prompt_tokens"]
    line = (f"replayed: {used['source']} mix, prompts {prompts['min']:,}–{prompts['max']:,} tokens "
            f"(median {prompts['median']:,}), {used['image_requests']}/{used['cycle']} with an image, "
            f"{used['tool_calls']}/{used['cycle']} with a tool")
    if workload.tail:
        line += "; tail " + " and ".join(f"{s.prompt_tokens:,}" for s in workload.tail) + " tokens every level"
    production = f"production: {workload.mix.words()}" if workload.mix else "production: no mix known yet (fixed prompt)"
    return [line, production]


def workload_checks(endpoint: EndpointSettings, plan: SweepPlan, workload: Workload,
                    levels: Sequence[LevelStats]) -> list[Check]:
    checks = [Check.passed("traffic.mix", "; ".join(workload_words(workload)), used=workload.as_dict())]
    if "unique" not in plan.prefix_modes:
        checks.append(Check.warned("traffic.prefix_unique",
                                   f"the unique-prefix run is left out by configuration on {endpoint.environment}: the "
                                   "knee may rest on a friendly prefix cache (prod always runs it)"))
    if workload.tail:
        slowest = max((lv.tail_ttft_ms for lv in levels if lv.tail_ttft_ms is not None), default=None)
        said = f"slowest first token {slowest:,.0f} ms" if slowest is not None else "no tail request was answered"
        checks.append(Check.passed("traffic.long_context",
                                   f"every level opened with {len(workload.tail)} long-context requests "
                                   f"({' and '.join(f'{s.prompt_tokens:,}' for s in workload.tail)} prompt tokens); "
                                   f"{said}"))
    return checks
