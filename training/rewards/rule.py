"""The rule-based reward: one verl-delivered rollout + its ground truth -> score and parts.

Terms (weights in `RuleWeights`), summed then clipped:

- format: -w per syntax error (unclosed/stray tags, stray attributes, bad JSON, garbage in a
  name, prose after a call, a hallucinated tool response), capped;
- tool alignment: +bonus when the valid calls equal the expected ones by name AND arguments
  (order-free), else -w x gap, gap = missing_call_gap x missing + extra + invalid +
  name_only_gap x right-tool-wrong-arguments; an identical call repeated after an error
  response is a retry, not extra; rows that expect no call (irrelevance, clarification)
  get the bonus for not calling;
- ground truth: up to +max for the share of `answers` found in the final answer (numbers
  approximately); irrelevance rows earn it by answering without calling, clarification rows by
  asking for the missing argument without calling;
- unfinished: -w when the rollout ends without a final answer (last turn calls a tool, ends in
  a tool response, or says nothing);
- repetition: -(share of repeated 3-grams in the model's own prose), capped.

Only text the model wrote is read: tool responses are split off first (see
`serving.toolcalls.transcript`), and the final answer excludes reasoning and calls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from serving.toolcalls import (
    SYNTAX_KINDS,
    ParsedCall,
    ToolRegistry,
    active_registry,
    parse_tool_calls,
    split_transcript,
    visible_text,
)
from serving.toolcalls.calls import CLOSE, FUNC_OPEN, OPEN
from training.data.schema import Category, GroundTruth
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
    """A ground truth in the form the reward reads: built once per distinct ground truth
    (cached), so everything derived from it alone is computed here, not per rollout."""

    model: GroundTruth | None
    """The parsed ground truth when it was handed over parsed; None when read from JSON (see
    `source`) or invalid."""
    expected: tuple[CallKey, ...] = ()
    free: Mapping[str, frozenset[str]] = field(default_factory=dict)
    missing_words: tuple[str, ...] = ()
    answers: tuple[PreparedAnswer, ...] = ()
    error: str = ""
    category: str = ""
    no_call: bool = False
    """Irrelevance and clarification rows: the right behaviour is not to call."""
    clarification: bool = False
    valid: bool = False
    source: str = ""
    """The JSON a cached truth was read from. The cache keeps only what the reward reads,
    not the pydantic model: its ~20 objects per ground truth would stay alive for the
    garbage collector to walk on every full collection (measured: a third of the survivors
    of a cold benchmark pass). `truth` re-reads it on demand (evaluation, once per case)."""

    @property
    def truth(self) -> GroundTruth | None:
        """The ground truth (None when invalid)."""
        if self.model is not None or not self.valid:
            return self.model
        return GroundTruth.from_json(self.source)


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
        return _result_dict(
            self.score,
            self.format_penalty,
            self.tool_alignment,
            self.ground_truth_match,
            self.unfinished_penalty,
            self.repetition_penalty,
            self.malformed_calls,
            self.num_calls,
            self.valid_calls,
            self.matched_calls,
            self.expected_calls,
            self.format_errors,
            self.finished,
            self.category,
            self.error,
        )


def _result_dict(
    score: float,
    fmt: float,
    align: float,
    gt: float,
    unfinished: float,
    rep: float,
    malformed: int,
    num: int,
    valid: int,
    matched: int,
    expected: int,
    nerr: int,
    finished: bool,
    category: str,
    error: str,
) -> dict[str, float | str]:
    """The dict verl receives: one definition of its keys for `as_dict` and `score_dict`."""
    return {
        "score": score,
        "format_penalty": fmt,
        "tool_alignment": align,
        "ground_truth_match": gt,
        "unfinished_penalty": unfinished,
        "repetition_penalty": rep,
        "malformed_calls": float(malformed),
        "num_calls": float(num),
        "valid_calls": float(valid),
        "matched_calls": float(matched),
        "expected_calls": float(expected),
        "format_errors": float(nerr),
        "finished": float(finished),
        "category": category,
        "error": error,
    }


@lru_cache(maxsize=1024)
def _schema_defaults(registry: ToolRegistry, name: str) -> tuple[tuple[str, Any], ...]:
    """(argument, default) for every parameter of `name` whose schema has a default, in
    schema order. Per registry and tool name (the registry is hashed by identity)."""
    return tuple(
        (key, prop["default"])
        for key, prop in registry.properties(name).items()
        if isinstance(prop, Mapping) and "default" in prop
    )


def _expected_key(
    name: str, arguments: Mapping[str, Any], free: frozenset[str], registry: ToolRegistry
) -> CallKey:
    """Expected calls come from the generator, which executed them, so they are valid: only
    the schema defaults are filled in (what validation would add), which is all the key
    needs (numbers compare by value either way) and a third of validation's cost."""
    missing = [
        (key, value) for key, value in _schema_defaults(registry, name) if key not in arguments
    ]
    if missing:
        arguments = {**arguments, **dict(missing)}
    return call_key(name, arguments, free)


def _build_truth(truth: GroundTruth, registry: ToolRegistry, source: str = "") -> _Truth:
    """Everything the reward reads of `truth`; with `source` (its JSON) the model itself is
    not kept (see `_Truth.source`)."""
    calls = truth.expected_calls
    free: dict[str, frozenset[str]] = {}
    for call in calls:
        if call.free_arguments:
            free[call.name] = free.get(call.name, frozenset()) | frozenset(call.free_arguments)
    expected = tuple(
        _expected_key(call.name, call.arguments, free.get(call.name, frozenset()), registry)
        for call in calls
    )
    missing = truth.missing_argument or ""
    words = tuple(
        word for word in missing.casefold().replace("-", "_").split("_") if len(word) >= 3
    )
    category = truth.category
    return _Truth(
        None if source else truth,
        expected,
        free,
        words or ((missing.casefold(),) if missing else ()),
        tuple(prepare_answer(answer) for answer in truth.answers),
        category=category.value,
        no_call=category in _NO_CALL_CATEGORIES,
        clarification=category is Category.CLARIFICATION,
        valid=True,
        source=source,
    )


#: Distinct ground truths kept per registry (the whole cache is dropped when full).
MAX_CACHED_TRUTHS = 16_384
_TRUTHS: dict[ToolRegistry, dict[str, _Truth]] = {}


def _truth_from_json(text: str, registry: ToolRegistry) -> _Truth:
    """Ground truths repeat (n rollouts per prompt), so parsing is cached by content: the
    JSON string, per registry. A plain dict rather than `lru_cache`: a lookup is cheaper and
    an entry leaves no key tuple or list node for the garbage collector to walk; the bound
    is kept by dropping the cache when full (the call parse cache does the same).
    `clear_truth_cache` empties it (benchmarks measuring a first pass)."""
    cache = _TRUTHS.get(registry)
    if cache is None:
        if len(_TRUTHS) >= 64:  # registries built on the fly (tests, other catalogs)
            _TRUTHS.clear()
        cache = _TRUTHS[registry] = {}
    truth = cache.get(text)
    if truth is None:
        try:
            truth = _build_truth(GroundTruth.from_json(text), registry, text)
        except (ValidationError, ValueError) as exc:
            truth = _Truth(None, error=f"invalid ground truth: {str(exc).splitlines()[0][:200]}")
        if len(cache) >= MAX_CACHED_TRUTHS:
            cache.clear()
        cache[text] = truth
    return truth


def clear_truth_cache() -> None:
    """Empty the ground-truth cache (benchmarks measuring a first pass, tests)."""
    _TRUTHS.clear()


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


def _count_retries(parsed: Sequence[Sequence[ParsedCall]], responses: list[list[str]]) -> int:
    """Valid calls repeating a call whose turn got an error response: retries, not extras.
    A response reports an error (mock mode injects realistic ones) when its lowercased head
    names one; lowercasing a short head and testing substrings is ~7x faster than a
    case-insensitive regex."""
    failed_turns: set[int] = set()
    for index, block in enumerate(responses):
        for response in block:
            head = response[:200].lower()
            if "error" in head or "invalid" in head or "unknown function" in head:
                failed_turns.add(index)
                break
    if not failed_turns:
        return 0
    failed: set[CallKey] = set()
    retries = 0
    for index, turn_calls in enumerate(parsed):
        keys = [_key(c, c.cleaned) for c in turn_calls if c.cleaned is not None]
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
    valid: list[CallKey] = []
    for c in calls:
        cleaned = c.cleaned
        if cleaned is None:
            continue
        if free and c.name in free:
            valid.append(call_key(c.name, cleaned, free[c.name]))
        else:  # `_key`, inlined (per call)
            key: CallKey | None = c.shared.get("key")
            if key is None:
                key = c.shared["key"] = call_key(c.name, cleaned)
            valid.append(key)
    invalid = len(calls) - len(valid)
    full, name_only = match_calls(valid, truth.expected)
    missing = len(truth.expected) - full - name_only
    extra = max(0, len(valid) - full - name_only - retries)
    gap = weights.missing_call_gap * missing + extra + invalid + weights.name_only_gap * name_only
    if gap == 0:
        return weights.alignment_bonus, full
    return max(weights.alignment_floor, -weights.alignment_penalty_per_gap * gap), full


def _ground_truth_credit(
    answer: str, called: bool, full: int, truth: _Truth, weights: RuleWeights
) -> float:
    """`answer` is stripped (the final turn's visible text)."""
    if not truth.valid or not answer:
        return 0.0
    if truth.no_call:
        if called:
            return 0.0
        if truth.clarification:
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
    if truth.no_call:
        return weights.ground_truth_max
    return weights.ground_truth_max * full / len(truth.expected) if truth.expected else 0.0


#: (score, format, alignment, ground truth, unfinished, repetition, malformed calls, calls,
#: matched calls, format errors, finished)
_Terms = tuple[float, float, float, float, float, float, int, int, int, int, bool]
_NO_CALLS: tuple[ParsedCall, ...] = ()
_Fields = tuple[
    float, float, float, float, float, float, int, int, int, int, int, int, bool, str, str
]


def _fields(terms: _Terms, truth: _Truth) -> _Fields:
    """A valid ground truth's terms as `RewardBreakdown`'s fields in order (without
    `error_kinds`), so `score_rollout` and `score_dict` cannot list them differently."""
    score, fmt, align, gt, unfinished, rep, malformed, num, matched, nerr, finished = terms
    return (
        score,
        fmt,
        align,
        gt,
        unfinished,
        rep,
        malformed,
        num,
        num - malformed,
        matched,
        len(truth.expected),
        nerr,
        finished,
        truth.category,
        "",
    )


def _terms(
    solution_str: object,
    truth: _Truth,
    config: RewardConfig,
    registry: ToolRegistry,
    error_kinds: dict[str, int] | None,
) -> _Terms:
    """Every term of a valid ground truth's score; counts error kinds into `error_kinds`.

    Written for speed (it runs on every rollout of every step, see `benchmarks/
    bench_reward.py`): one pass over the turns collects calls, errors and prose, turns
    without a tag skip the parser (what `parse_tool_calls` returns for them first), and every
    term's arithmetic is spelled out in the same order as before so scores stay identical
    to the last bit (`tests/code/test_rewards_pinned.py`)."""
    weights = config.weights
    if not isinstance(solution_str, str):
        solution_str = "" if solution_str is None else str(solution_str)
    transcript = split_transcript(solution_str)
    turns = transcript.turns
    call_format = config.call_format
    per_turn: list[Sequence[ParsedCall]] = []
    calls: list[ParsedCall] = []
    errors = transcript.errors[:]
    prose_parts: list[str] = []
    for turn in turns:
        if OPEN not in turn and CLOSE not in turn and FUNC_OPEN not in turn:
            per_turn.append(_NO_CALLS)
            prose_parts.append(turn)
            continue
        result = parse_tool_calls(turn, call_format, registry)
        if result.errors:
            errors.extend(result.errors)
        turn_calls = result.calls
        per_turn.append(turn_calls)
        if not turn_calls:
            prose_parts.append(turn)
            continue
        calls.extend(turn_calls)
        pos = 0  # the turn's prose: the text around its calls (all joined once, below)
        for call in turn_calls:
            if call.start >= pos:
                prose_parts.append(turn[pos : call.start])
                pos = call.end
        prose_parts.append(turn[pos:])
    syntax_errors = 0
    for error in errors:
        kind = error.kind
        if error_kinds is not None:
            error_kinds[kind.value] = error_kinds.get(kind.value, 0) + 1
        syntax_errors += kind in SYNTAX_KINDS

    answer = ""
    if not transcript.ended_in_tool_response and not per_turn[-1]:
        answer = visible_text(turns[-1]).strip()
    finished = bool(answer)

    retries = (
        _count_retries(per_turn, transcript.tool_responses) if transcript.tool_responses else 0
    )
    alignment, matched = _alignment(calls, retries, truth, weights)
    ground_truth_match = _ground_truth_credit(answer, bool(calls), matched, truth, weights)
    format_penalty = 0.0 - min(
        weights.format_penalty_cap, weights.format_penalty_per_error * syntax_errors
    )
    unfinished_penalty = 0.0 if finished else -weights.unfinished_penalty
    prose = " ".join(prose_parts)
    if len(prose) > _MAX_PROSE_CHARS:
        half = _MAX_PROSE_CHARS // 2
        prose = prose[:half] + " " + prose[-half:]
    rate = repetition_rate(prose, weights.repetition_ngram, weights.repetition_min_ngrams)
    repetition_penalty = 0.0 - min(weights.repetition_cap, rate)

    malformed = 0
    for call in calls:
        if call.errors:
            malformed += 1
    total = (
        format_penalty + alignment + ground_truth_match + unfinished_penalty + repetition_penalty
    )
    return (
        min(weights.clip_high, max(weights.clip_low, total)),
        format_penalty,
        alignment,
        ground_truth_match,
        unfinished_penalty,
        repetition_penalty,
        malformed,
        len(calls),
        matched,
        len(errors),
        finished,
    )


def score_rollout(
    solution_str: str,
    ground_truth: object,
    config: RewardConfig | None = None,
    registry: ToolRegistry | None = None,
) -> RewardBreakdown:
    """Score one rollout (the whole multi-turn response as verl decodes it)."""
    config = config or DEFAULT_CONFIG
    registry = registry or active_registry()
    truth = load_truth(ground_truth, registry)
    if not truth.valid:
        return RewardBreakdown(
            score=config.weights.clip_low, expected_calls=len(truth.expected), error=truth.error
        )
    error_kinds: dict[str, int] = {}
    terms = _terms(solution_str, truth, config, registry, error_kinds)
    return RewardBreakdown(*_fields(terms, truth), error_kinds)


def score_dict(
    solution_str: str, ground_truth: object, config: RewardConfig | None = None
) -> dict[str, float | str]:
    """`score_rollout(...).as_dict()` without building the breakdown (verl's entry point
    only needs the dict; same keys, same values)."""
    config = config or DEFAULT_CONFIG
    registry = active_registry()
    truth = load_truth(ground_truth, registry)
    if not truth.valid:
        return score_rollout(solution_str, ground_truth, config, registry).as_dict()
    return _result_dict(*_fields(_terms(solution_str, truth, config, registry, None), truth))


DEFAULT_CONFIG = RewardConfig()
