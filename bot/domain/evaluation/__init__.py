"""The fixed evaluation set of the model gate: its format, scoring, aggregation and comparison.

Pure: an :class:`EvalSet` is read from YAML text by the caller, expanded into
concrete :class:`EvalCase` values (the long-context case is generated here to a
configured token size), each :class:`Answer` the endpoint gave is scored against
its case's checks, and the per-kind pass rates and latency percentiles are
compared with the report of the release currently in production.

Prompts and answers never leave this module in a result unless the set turns
``sampling`` on: a :class:`CaseResult` holds only pass/fail, reasons, timings
and token counts.

One module per step: :mod:`.eval_set` (the format), :mod:`.long_context` (the generated case), :mod:`.scoring`
(each answer), :mod:`.summary` (a run's rates and percentiles), :mod:`.latency` (the latency comparison and its
second look at slow cases), :mod:`.verdicts` (the gate's judgement).
"""

from bot.domain.evaluation.eval_set import (
    DEFAULT_REFUSAL_PATTERNS,
    KINDS,
    CaseChecks,
    EvalCase,
    EvalSet,
    EvalSetError,
    Filler,
    ImagePart,
    ImageURL,
    Kind,
    Message,
    TextPart,
    Tolerances,
    ToolCallCheck,
    parse_eval_set,
)
from bot.domain.evaluation.latency import Remeasured, best_of_two, over_their_cap, to_remeasure
from bot.domain.evaluation.long_context import expand, filler_text
from bot.domain.evaluation.scoring import Answer, CaseResult, ToolCall, is_refusal, rounded, score
from bot.domain.evaluation.summary import KindSummary, Summary, percentile, summarise
from bot.domain.evaluation.verdicts import Verdict, compare, kind_verdicts

__all__ = [
    "DEFAULT_REFUSAL_PATTERNS",
    "KINDS",
    "Answer",
    "CaseChecks",
    "CaseResult",
    "EvalCase",
    "EvalSet",
    "EvalSetError",
    "Filler",
    "ImagePart",
    "ImageURL",
    "Kind",
    "KindSummary",
    "Message",
    "Remeasured",
    "Summary",
    "TextPart",
    "Tolerances",
    "ToolCall",
    "ToolCallCheck",
    "Verdict",
    "best_of_two",
    "compare",
    "expand",
    "filler_text",
    "is_refusal",
    "kind_verdicts",
    "over_their_cap",
    "parse_eval_set",
    "percentile",
    "rounded",
    "score",
    "summarise",
    "to_remeasure",
]
