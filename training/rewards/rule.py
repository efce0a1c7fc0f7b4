"""The rule-based reward: one verl-delivered rollout + its ground truth -> score and parts.

Terms (weights in `RuleWeights`), summed then clipped:

- format: -w per syntax error (unclosed/stray tags, stray attributes, bad JSON, garbage in a
  name, prose after a call, a hallucinated tool response), capped;
- tool alignment: +bonus when the valid calls equal the expected ones by name AND arguments
  (order-free), else -w x gap, gap = missing + extra + invalid + name_only_gap x right-tool-
  wrong-arguments; an identical call repeated after an error response is a retry, not extra;
  rows that expect no call (irrelevance, clarification) get the bonus for not calling;
- ground truth: up to +max for the share of `answers` found in the final answer (numbers
  approximately); irrelevance rows earn it by answering without calling, clarification rows by
  asking for the missing argument without calling;
- unfinished: -w when the rollout ends without a final answer (last turn calls a tool, ends in
  a tool response, or says nothing);
- repetition: -(share of repeated 3-grams in the model's own prose), capped.

Only text the model wrote is read: tool responses are split off first (see
`training.parsing.transcript`), and the final answer excludes reasoning and calls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from training.data.schema import Category, GroundTruth
from training.parsing import (
    SYNTAX_KINDS,
    ParsedCall,
    ParseResult,
    ToolRegistry,
    catalog_registry,
    parse_tool_calls,
    split_transcript,
    visible_text,
)
from training.rewards.config import RewardConfig, RuleWeights
from training.rewards.matching import (
    CallKey,
    PreparedAnswer,
    call_key,
    count_answer_hits,
    match_calls,
    prepare_answer,
    repetition_rate,
)

logger = logging.getLogger(__name__)

_NO_CALL_CATEGORIES = (Category.IRRELEVANCE, Category.CLARIFICATION)
_QUESTION_MARKS = ("?", "？")
#: Prose longer than this is judged for repetition on its head and tail only (time bound).
_MAX_PROSE_CHARS = 40_000


@dataclass(frozen=True, slots=True)
class _Truth:
    truth: GroundTruth | None
    expected: tuple[CallKey, ...] = ()
    free: Mapping[str, frozenset[str]] = field(default_factory=dict)
    missing_words: tuple[str, ...] = ()
    answers: tuple[PreparedAnswer, ...] = ()
    error: str = ""


@dataclass(slots=True)
class RewardBreakdown:
    """The score and every part of it; `as_dict()` is what verl gets (same keys always)."""

    score: float = 0.0
    format_penalty: float = 0.0
    tool_alignment: float = 0.0
    ground_truth_match: float = 0.0
    unfinished_penalty: float = 0.0
    repetition_penalty: float = 0.0
    malformed_calls: int = 0
    num_calls: int = 0
    valid_calls: int = 0
    matched_calls: int = 0
    expected_calls: int = 0
    format_errors: int = 0
    finished: bool = False
    category: str = ""
    error: str = ""
    error_kinds: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float | str]:
        return {
            "score": self.score,
            "format_penalty": self.format_penalty,
            "tool_alignment": self.tool_alignment,
            "ground_truth_match": self.ground_truth_match,
            "unfinished_penalty": self.unfinished_penalty,
            "repetition_penalty": self.repetition_penalty,
            "malformed_calls": float(self.malformed_calls),
            "num_calls": float(self.num_calls),
            "valid_calls": float(self.valid_calls),
            "matched_calls": float(self.matched_calls),
            "expected_calls": float(self.expected_calls),
            "format_errors": float(self.format_errors),
            "finished": float(self.finished),
            "category": self.category,
            "error": self.error,
        }


def _expected_key(
    name: str, arguments: Mapping[str, Any], free: frozenset[str], registry: ToolRegistry
) -> CallKey:
    """Expected calls come from the generator, which executed them, so they are valid: only
    the schema defaults are filled in (what validation would add), which is all the key
    needs (numbers compare by value either way) and a third of validation's cost."""
    properties = registry.properties(name)
    missing = [
        key
        for key, prop in properties.items()
        if key not in arguments and isinstance(prop, Mapping) and "default" in prop
    ]
    if missing:
        arguments = {**arguments, **{key: properties[key]["default"] for key in missing}}
    return call_key(name, arguments, free)


def _build_truth(truth: GroundTruth, registry: ToolRegistry) -> _Truth:
    free: dict[str, frozenset[str]] = {}
    for call in truth.expected_calls:
        if call.free_arguments:
            free[call.name] = free.get(call.name, frozenset()) | frozenset(call.free_arguments)
    expected = tuple(
        _expected_key(call.name, call.arguments, free.get(call.name, frozenset()), registry)
        for call in truth.expected_calls
    )
    missing = truth.missing_argument or ""
    words = tuple(
        word for word in missing.casefold().replace("-", "_").split("_") if len(word) >= 3
    )
    return _Truth(
        truth,
        expected,
        free,
        words or ((missing.casefold(),) if missing else ()),
        tuple(prepare_answer(answer) for answer in truth.answers),
    )


@lru_cache(maxsize=16_384)
def _truth_from_json(text: str, registry: ToolRegistry) -> _Truth:
    """Ground truths repeat (n rollouts per prompt), so parsing is cached by content."""
    try:
        return _build_truth(GroundTruth.from_json(text), registry)
    except (ValidationError, ValueError) as exc:
        return _Truth(None, error=f"invalid ground truth: {str(exc).splitlines()[0][:200]}")


def load_truth(ground_truth: object, registry: ToolRegistry) -> _Truth:
    if isinstance(ground_truth, str):
        return _truth_from_json(ground_truth, registry)
    try:
        if isinstance(ground_truth, GroundTruth):
            return _build_truth(ground_truth, registry)
        if isinstance(ground_truth, Mapping):
            return _build_truth(GroundTruth.model_validate(dict(ground_truth)), registry)
    except (ValidationError, ValueError) as exc:
        return _Truth(None, error=f"invalid ground truth: {str(exc).splitlines()[0][:200]}")
    return _Truth(None, error=f"invalid ground truth: got {type(ground_truth).__name__}")


def _looks_like_error(response: str) -> bool:
    """A tool response reporting a failure (mock mode injects realistic ones). Lowercasing
    a short head and testing substrings is ~7x faster than a case-insensitive regex."""
    head = response[:200].lower()
    return "error" in head or "invalid" in head or "unknown function" in head


def _count_retries(parsed: list[ParseResult], responses: list[list[str]]) -> int:
    """Valid calls repeating a call whose turn got an error response: retries, not extras."""
    failed_turns: set[int] = set()
    for index, block in enumerate(responses):
        for response in block:
            if _looks_like_error(response):
                failed_turns.add(index)
                break
    if not failed_turns:
        return 0
    failed: set[CallKey] = set()
    retries = 0
    for index, result in enumerate(parsed):
        keys = [_key(c, c.cleaned) for c in result.calls if c.cleaned is not None]
        retries += sum(1 for key in keys if key in failed)
        if index in failed_turns:
            failed.update(keys)
    return retries


def _key(call: ParsedCall, cleaned: dict[str, Any]) -> CallKey:
    """The call's matching key, memoised on the call's shared memo (parse cache hits)."""
    key: CallKey | None = call.shared.get("key")
    if key is None:
        key = call.shared["key"] = call_key(call.name, cleaned)
    return key


def _alignment(
    calls: list[ParsedCall], retries: int, truth: _Truth, weights: RuleWeights
) -> tuple[float, int]:
    free = truth.free
    valid = [
        call_key(c.name, c.cleaned, free[c.name]) if free and c.name in free else _key(c, c.cleaned)
        for c in calls
        if c.cleaned is not None
    ]
    invalid = len(calls) - len(valid)
    full, name_only = match_calls(valid, truth.expected)
    missing = len(truth.expected) - full - name_only
    extra = max(0, len(valid) - full - name_only - retries)
    gap = missing + extra + invalid + weights.name_only_gap * name_only
    if gap == 0:
        return weights.alignment_bonus, full
    return max(weights.alignment_floor, -weights.alignment_penalty_per_gap * gap), full


def _ground_truth_credit(
    answer: str, called: bool, full: int, truth: _Truth, weights: RuleWeights
) -> float:
    gt = truth.truth
    if gt is None or not answer.strip():
        return 0.0
    if gt.category in _NO_CALL_CATEGORIES:
        if called:
            return 0.0
        if gt.category is Category.CLARIFICATION:
            lowered = answer.casefold()
            if any(word in lowered for word in truth.missing_words):
                return weights.ground_truth_max
            asks = any(mark in answer for mark in _QUESTION_MARKS)
            return weights.ground_truth_max * weights.clarification_question_share * asks
    if truth.answers:
        hits = count_answer_hits(
            answer, truth.answers, weights.numeric_rel_tol, weights.numeric_rounding_rel_tol
        )
        return weights.ground_truth_max * hits / len(truth.answers)
    if gt.category in _NO_CALL_CATEGORIES:
        return weights.ground_truth_max
    return weights.ground_truth_max * full / len(truth.expected) if truth.expected else 0.0


def _prose(turn: str, calls: list[ParsedCall]) -> str:
    if not calls:
        return turn
    pieces, pos = [], 0
    for call in calls:
        if call.start >= pos:
            pieces.append(turn[pos : call.start])
            pos = call.end
    pieces.append(turn[pos:])
    return " ".join(pieces)


def score_rollout(
    solution_str: str,
    ground_truth: object,
    config: RewardConfig | None = None,
    registry: ToolRegistry | None = None,
) -> RewardBreakdown:
    """Score one rollout (the whole multi-turn response as verl decodes it)."""
    config = config or DEFAULT_CONFIG
    weights = config.weights
    registry = registry or catalog_registry()
    truth = load_truth(ground_truth, registry)
    result = RewardBreakdown(expected_calls=len(truth.expected))
    if truth.truth is None:
        result.score, result.error = weights.clip_low, truth.error
        return result
    result.category = truth.truth.category.value
    if not isinstance(solution_str, str):
        solution_str = "" if solution_str is None else str(solution_str)

    transcript = split_transcript(solution_str)
    parsed = [parse_tool_calls(turn, config.call_format, registry) for turn in transcript.turns]
    errors = list(transcript.errors)
    calls: list[ParsedCall] = []
    for p in parsed:
        if p.errors:
            errors.extend(p.errors)
        if p.calls:
            calls.extend(p.calls)
    syntax_errors = 0
    for error in errors:
        result.error_kinds[error.kind.value] = result.error_kinds.get(error.kind.value, 0) + 1
        syntax_errors += error.kind in SYNTAX_KINDS

    last_turn = transcript.turns[-1] if transcript.turns else ""
    answer = ""
    if not transcript.ended_in_tool_response and not parsed[-1].calls:
        answer = visible_text(last_turn).strip()
    result.finished = bool(answer)

    retries = _count_retries(parsed, transcript.tool_responses) if transcript.tool_responses else 0
    result.tool_alignment, result.matched_calls = _alignment(calls, retries, truth, weights)
    result.ground_truth_match = _ground_truth_credit(
        answer, bool(calls), result.matched_calls, truth, weights
    )
    result.format_penalty = 0.0 - min(
        weights.format_penalty_cap, weights.format_penalty_per_error * syntax_errors
    )
    result.unfinished_penalty = 0.0 if result.finished else -weights.unfinished_penalty
    prose = " ".join(
        _prose(turn, p.calls) for turn, p in zip(transcript.turns, parsed, strict=True)
    )
    if len(prose) > _MAX_PROSE_CHARS:
        half = _MAX_PROSE_CHARS // 2
        prose = prose[:half] + " " + prose[-half:]
    rate = repetition_rate(prose, weights.repetition_ngram, weights.repetition_min_ngrams)
    result.repetition_penalty = 0.0 - min(weights.repetition_cap, rate)

    result.num_calls = len(calls)
    result.malformed_calls = sum(1 for call in calls if call.errors)
    result.valid_calls = result.num_calls - result.malformed_calls
    result.format_errors = len(errors)
    total = (
        result.format_penalty
        + result.tool_alignment
        + result.ground_truth_match
        + result.unfinished_penalty
        + result.repetition_penalty
    )
    result.score = min(weights.clip_high, max(weights.clip_low, total))
    return result


DEFAULT_CONFIG = RewardConfig()
