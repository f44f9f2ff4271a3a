"""Model supervision: a cheap-tier model reads what the run showed (the task, tool calls and their
results, the answer; never hidden reasoning) and may comment or ask a person to look. Each comment
must cite a step the reviewer was shown; one that cites nothing it was shown is dropped."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from genworker.llm.client import LLMClient
from genworker.llm.intent import LLMCallIntent, Purpose, Tier
from genworker.supervision.decisions import Action, Decision

__all__ = ["CONCERNS", "Reviewer", "Step"]

log = logging.getLogger("genworker.supervision")

CONCERNS = ("goal_drift", "missing_step", "no_evidence", "ambiguity")
_CLIP = 1_000
_PROMPT = f"""You supervise a digital worker's run. You see the user's task, the tool calls the worker
made with their results (each with an id) and its answer. Look only for: {", ".join(CONCERNS)}.
Answer with JSON only: {{"comments": [{{"concern": one of those, "text": one sentence,
"cites": [ids of the steps, "task" or "output" the comment is about], "attention": true when a person
should look}}]}}. No comment when nothing is wrong. You cannot approve tools or change the policy."""


@dataclass(frozen=True, slots=True)
class Step:
    id: str  # the tool call id
    tool: str
    arguments: str
    result: str


class Reviewer:
    """At most `max_calls` model calls per run; `calls` and `ms` count what it spent."""

    def __init__(self, llm: LLMClient, tier: str, max_calls: int, policy: str) -> None:
        self.llm, self.tier, self.max_calls, self.policy = llm, Tier(tier), max_calls, policy
        self.calls = 0
        self.ms = 0.0

    async def review(self, task: str, steps: Sequence[Step], output: str | None) -> list[Decision]:
        if self.calls >= self.max_calls:
            return []
        self.calls += 1
        shown = {
            "task": task[:_CLIP],
            "steps": [
                {"id": s.id, "tool": s.tool, "arguments": s.arguments[:_CLIP], "result": s.result[:_CLIP]}
                for s in steps
            ],
            "answer": None if output is None else output[: _CLIP * 4],
        }
        messages = [
            {"role": "system", "content": _PROMPT},
            {"role": "user", "content": json.dumps(shown, ensure_ascii=False)},
        ]
        started = time.perf_counter()
        try:
            completion = await self.llm.complete(LLMCallIntent(Purpose.CLASSIFY, tier=self.tier), messages)
        except Exception as exc:  # the reviewer is advisory: its failure never fails the run
            log.warning("[Supervisor] %s: the model review failed: %s", self.policy, exc)
            return []
        finally:
            self.ms += (time.perf_counter() - started) * 1000
        known = {s.id for s in steps} | {"task"} | ({"output"} if output is not None else set())
        return parse_comments(completion.text, known, self.policy)


def parse_comments(text: str, known: set[str], policy: str) -> list[Decision]:
    """The reviewer's comments as decisions (comment, or request_review for attention); comments
    without a known citation or with an unknown concern are dropped."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    try:
        data: Any = json.loads(match.group(0)) if match else {}
    except json.JSONDecodeError:
        return []
    out: list[Decision] = []
    for item in data.get("comments", []) if isinstance(data, dict) else []:
        if not isinstance(item, dict) or item.get("concern") not in CONCERNS:
            continue
        cites = tuple(c for c in item.get("cites", ()) if isinstance(c, str) and c in known)
        comment = str(item.get("text", "")).strip()
        if not cites or not comment:
            continue
        action: Action = "request_review" if item.get("attention") is True else "comment"
        out.append(Decision(action, f"model:{item['concern']}", comment[:500], cites, policy=policy))
    return out
