"""The protocol applied to a variant's run, and the choice of the best: only among the variants that
succeeded (the run completed, every required check passed, no supervisor stopped it). None succeeded:
no winner, the experiment fails."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from genworker.experiments.models import Check, Evaluation, Protocol, VariantResult

__all__ = ["RunFacts", "best", "evaluate"]

_STOPPING = frozenset({"pause", "stop"})


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a variant's run left: its state, answer and usage, and its supervision record's decisions."""

    state: str
    output: str
    tool_calls: int
    tokens: int
    run_ms: float
    error: str | None = None
    decisions: tuple[Mapping[str, Any], ...] = ()


def evaluate(protocol: Protocol, facts: RunFacts) -> Evaluation:
    metrics = {
        "output_chars": float(len(facts.output)),
        "tool_calls": float(facts.tool_calls),
        "tokens": float(facts.tokens),
        "run_ms": round(facts.run_ms, 1),
    }
    results = [(check, _passes(check, facts)) for check in protocol.checks]
    total = sum(c.weight for c in protocol.checks)
    score = sum(c.weight for c, ok in results if ok) / total if total else 1.0
    supervisor = [{k: d.get(k) for k in ("action", "check", "reason", "cites", "policy")} for d in facts.decisions]
    reason = ""
    if facts.state != "completed":
        reason = f"its run ended {facts.state}" + (f": {facts.error}" if facts.error else "")
    elif stopped := [d for d in supervisor if d["action"] in _STOPPING]:
        reason = f"the supervisor's {stopped[0]['check']} check asked to {stopped[0]['action']} it"
    elif missed := [c for c, ok in results if c.required and not ok]:
        reason = "required checks failed: " + ", ".join(f"{c.kind} {c.value!r}" for c in missed)
    return Evaluation(
        success=not reason,
        score=round(score, 4),
        checks=[{"kind": c.kind, "value": c.value, "required": c.required, "passed": ok} for c, ok in results],
        metrics=metrics,
        supervisor=supervisor,
        reason=reason,
    )


def best(results: Sequence[VariantResult]) -> VariantResult | None:
    """The best variant among those that succeeded: highest score, then fewest supervisor comments,
    fewest tokens, fastest, then by name; None when none succeeded."""
    succeeded = [r for r in results if r.evaluation is not None and r.evaluation.success]
    if not succeeded:
        return None

    def rank(r: VariantResult) -> tuple[float, int, float, float, str]:
        e = r.evaluation
        assert e is not None
        return (-e.score, len(e.supervisor), e.metrics["tokens"], e.metrics["run_ms"], r.name)

    return min(succeeded, key=rank)


def _passes(check: Check, facts: RunFacts) -> bool:
    value, output = check.value, facts.output
    match check.kind:
        case "contains":
            return str(value).casefold() in output.casefold()
        case "not_contains":
            return str(value).casefold() not in output.casefold()
        case "regex":
            try:
                return re.search(str(value), output) is not None
            except re.error:  # the schema cannot say which patterns compile: one that does not never passes
                return False
        case "max_chars":
            return len(output) <= int(value)
        case "max_tool_calls":
            return facts.tool_calls <= int(value)
        case "max_tokens":
            return facts.tokens <= int(value)
        case _:
            assert_never(check.kind)
