"""Score one trajectory against its ground truth: the per-case facts every metric sums.

This is the one definition of what a case got right. The evaluation harness, the CPU
backend's quick eval, the demo's table and the benchmarks all score trajectories of the one
agent loop here and aggregate them with `metrics.summarise`, so "right tool" means the same
thing in every table:

- selection: the called tools, as a multiset, equal the expected ones: the right tools,
  each as often as the task needs (a second call a one-call question did not ask for, or
  one parallel call where two were needed, is a wrong selection);
- exact call: every expected call matched by name and schema-typed arguments, and no
  other call attempt at all (a repeated call, an extra call or a malformed one fails it).

Matching reuses the reward's rules (`training.rewards.matching`): arguments compared
schema-typed after the catalog's validator fills defaults, parallel calls order-free,
free-text arguments only required to be present, numbers in answers matched approximately.
So the evaluation and the reward agree on what "the right call" means.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from serving.agent import Trajectory
from serving.toolcalls import ToolRegistry
from training.rewards.matching import CallKey, answer_matches, call_key, numbers_in
from training.rewards.rule import load_truth

NUMERIC_REL_TOL = 1e-6
ROUNDING_REL_TOL = 0.01
_CALLING = ("single", "parallel", "multi_step")
_QUESTION_MARKS = ("?", "？")


class CaseResult(BaseModel):
    """Everything the report needs about one (case, sample); one JSONL line when resuming."""

    model_config = ConfigDict(extra="forbid")

    case_id: str
    sample: int = 0
    category: str
    language: str = ""
    expected_tools: list[str] = Field(default_factory=list)
    called_tools: list[str] = Field(default_factory=list)
    call_attempts: int = 0
    malformed_kinds: list[str] = Field(default_factory=list)
    """One kind per malformed call attempt (its first error), plus turn-level kinds."""
    malformed_calls: int = 0
    selection_ok: bool | None = None
    expected_matched: list[tuple[str, bool]] = Field(default_factory=list)
    """(tool, matched by name and arguments) per expected call."""
    exact_calls: bool | None = None
    answer_share: float | None = None
    answer_ok: bool | None = None
    no_call_ok: bool | None = None
    passed: bool = False
    turns: int = 0
    fallback_turns: int = 0
    latency_s: float = 0.0
    model_latencies_s: list[float] = Field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stop: str = "answer"
    error: str | None = None
    final_answer: str = ""

    @property
    def exact_call_share(self) -> float | None:
        """Share of the expected calls made with the right tool and arguments (None on a
        case that expects none). Per call, where `exact_calls` is all-or-nothing: on a
        two-call case a model that drops a wrong second call loses right tool and keeps this,
        one that loses a right call loses this."""
        if not self.expected_matched:
            return None
        return sum(1 for _, matched in self.expected_matched if matched) / len(
            self.expected_matched
        )

    @property
    def parseable(self) -> bool | None:
        """A case that expects a call made at least one and no malformed one (None on a case
        that expects none): the per-case view of `parseable_rate`, and the one definition of
        it (`metrics.headline_counts` counts this)."""
        if self.selection_ok is None:
            return None
        return self.call_attempts > 0 and self.malformed_calls == 0


def _actual_keys(
    trajectory: Trajectory, registry: ToolRegistry, free: dict[str, frozenset[str]]
) -> tuple[list[CallKey], list[str], int]:
    """Valid call keys, malformed kinds, malformed count (the catalog's validator decides
    unknown tools and schema violations for calls the server parsed)."""
    keys: list[CallKey] = []
    kinds: list[str] = []
    malformed = 0
    for turn in trajectory.turns:
        kinds.extend(turn.error_kinds)
        for call in turn.calls:
            problem = call.error_kinds[0] if call.error_kinds else None
            cleaned: dict[str, Any] = call.arguments
            if problem is None and call.name not in registry:
                problem = "unknown_function"
            elif problem is None:
                cleaned, problems = registry.validate(call.name, call.arguments)
                if problems:
                    problem = "schema_violation"
            if problem is not None:
                malformed += 1
                kinds.append(problem)
                continue
            keys.append(call_key(call.name, cleaned, free.get(call.name, frozenset())))
    return keys, kinds, malformed


def score_case(
    case_id: str,
    ground_truth_json: str,
    trajectory: Trajectory,
    registry: ToolRegistry,
    sample: int = 0,
) -> CaseResult:
    """The facts of one episode. A transport error makes the case fail (never hidden)."""
    truth_info = load_truth(ground_truth_json, registry)
    truth = truth_info.truth
    if truth is None:
        raise ValueError(truth_info.error)
    free = dict(truth_info.free)
    keys, kinds, malformed = _actual_keys(trajectory, registry, free)
    expected = list(truth_info.expected)
    expected_names = [call.name for call in truth.expected_calls]
    called = [call.name for call in trajectory.calls if call.name]
    category = truth.category.value
    answer = trajectory.final_answer
    result = CaseResult(
        case_id=case_id,
        sample=sample,
        category=category,
        expected_tools=expected_names,
        called_tools=called,
        call_attempts=len(trajectory.calls),
        malformed_kinds=kinds,
        malformed_calls=malformed,
        turns=len(trajectory.turns),
        fallback_turns=sum(1 for t in trajectory.turns if t.source == "raw_fallback"),
        latency_s=round(trajectory.latency_s, 6),
        model_latencies_s=[round(t.latency_s, 6) for t in trajectory.turns],
        prompt_tokens=trajectory.prompt_tokens,
        completion_tokens=trajectory.completion_tokens,
        stop=trajectory.stop,
        error=trajectory.error,
        final_answer=answer[:500],
    )
    if category in _CALLING:
        remaining = Counter(keys)
        matched = []
        for key, name in zip(expected, expected_names, strict=True):
            hit = remaining[key] > 0
            remaining[key] -= hit
            matched.append((name, hit))
        result.expected_matched = matched
        result.selection_ok = Counter(called) == Counter(expected_names)
        attempts = len(trajectory.calls)
        result.exact_calls = all(hit for _, hit in matched) and attempts == len(expected)
    else:
        no_call = not trajectory.calls
        if category == "clarification":
            lowered = answer.casefold()
            asks = any(mark in answer for mark in _QUESTION_MARKS) or any(
                word in lowered for word in truth_info.missing_words
            )
            result.no_call_ok = no_call and asks and bool(answer)
        else:
            result.no_call_ok = no_call and bool(answer)
    if truth.answers and category in _CALLING:
        found = numbers_in(answer)
        hits = sum(
            answer_matches(answer, value, found, NUMERIC_REL_TOL, ROUNDING_REL_TOL)
            for value in truth.answers
        )
        result.answer_share = hits / len(truth.answers)
        result.answer_ok = hits == len(truth.answers)
    if trajectory.error is None and trajectory.stop == "answer":
        if category in _CALLING:
            result.passed = bool(result.exact_calls) and result.answer_ok is not False
        else:
            result.passed = bool(result.no_call_ok)
    return result
