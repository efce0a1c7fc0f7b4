"""Aggregate per-case facts into the report's metrics (overall, per category, per tool).

Definitions (denominators in brackets; a metric whose denominator is empty is `null`):

- tool_call_rate: cases with at least one call attempt [all cases]
- tool_selection_accuracy: the called tools, as a multiset, equal the expected ones
  [calling cases]
- argument_accuracy: expected calls matched by name AND schema-typed arguments, order-free
  within a turn [expected calls]; exact_call_accuracy: every expected call matched and no
  other call attempt [calling cases] (`scoring.py` says why both are this strict)
- answer_accuracy: every ground-truth value found in the final answer [calling cases with
  answers]; answer_share_mean: mean share found
- irrelevance_accuracy: no call and an answer [irrelevance cases]; clarification_accuracy:
  no call and a question about the missing argument [clarification cases]
- malformed_call_rate: malformed call attempts [call attempts]; malformed_by_kind: count
  per error kind (turn-level kinds included)
- pass_rate: the case passed as a whole [all cases]; error_rate: transport failure [all]
- mean_turns, latency p50/p95 (episode and per model request), mean tokens per case.
- pass^k over k samples (tau-bench): mean over cases of C(c, k) / C(n, k), c successes of n.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from training.evaluation.scoring import CaseResult

HEADLINE_METRICS: tuple[tuple[str, str], ...] = (
    ("parseable_rate", "parseable calls"),
    ("tool_selection_accuracy", "right tools"),
    ("exact_call_accuracy", "exact calls"),
    ("abstention_rate", "abstention"),
    ("answer_accuracy", "answer"),
    ("pass_rate", "pass"),
)
"""The rates a model is judged by, in the order every table and plot lists them (key,
label). Every consumer (the harness report, the quick eval, the demo's table, the plots,
the benchmarks) reads these keys from a `summarise` block."""


def _rate(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 6) if denominator else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1], 6)


def headline_counts(results: Sequence[CaseResult]) -> dict[str, tuple[int, int]]:
    """(hits, cases) behind each headline rate: the one place they are counted, so a
    report's rate and a benchmark's interval around it come from the same numbers."""
    calling = [r for r in results if r.selection_ok is not None]
    with_answers = [r for r in calling if r.answer_ok is not None]
    no_call = [r for r in results if r.category in ("irrelevance", "clarification")]
    return {
        "parseable_rate": (sum(bool(r.parseable) for r in calling), len(calling)),
        "tool_selection_accuracy": (sum(bool(r.selection_ok) for r in calling), len(calling)),
        "exact_call_accuracy": (sum(bool(r.exact_calls) for r in calling), len(calling)),
        "abstention_rate": (sum(bool(r.no_call_ok) for r in no_call), len(no_call)),
        "answer_accuracy": (sum(bool(r.answer_ok) for r in with_answers), len(with_answers)),
        "pass_rate": (sum(r.passed for r in results), len(results)),
    }


def summarise(results: Sequence[CaseResult]) -> dict[str, Any]:
    """The metric block of one group of cases."""
    counts = headline_counts(results)
    calling = [r for r in results if r.selection_ok is not None]
    with_answers = [r for r in calling if r.answer_ok is not None]
    irrelevance = [r for r in results if r.category == "irrelevance"]
    clarification = [r for r in results if r.category == "clarification"]
    expected_calls = [hit for r in calling for _, hit in r.expected_matched]
    attempts = sum(r.call_attempts for r in results)
    kinds: dict[str, int] = defaultdict(int)
    for r in results:
        for kind in r.malformed_kinds:
            kinds[kind] += 1
    model_latencies = [x for r in results for x in r.model_latencies_s]
    n = len(results)
    return {
        "cases": n,
        "tool_call_rate": _rate(sum(r.call_attempts > 0 for r in results), n),
        "parseable_rate": _rate(*counts["parseable_rate"]),
        "tool_selection_accuracy": _rate(*counts["tool_selection_accuracy"]),
        "argument_accuracy": _rate(sum(expected_calls), len(expected_calls)),
        "exact_call_accuracy": _rate(*counts["exact_call_accuracy"]),
        "answer_accuracy": _rate(*counts["answer_accuracy"]),
        "answer_share_mean": (
            round(sum(r.answer_share or 0.0 for r in with_answers) / len(with_answers), 6)
            if with_answers
            else None
        ),
        "irrelevance_accuracy": _rate(
            sum(bool(r.no_call_ok) for r in irrelevance), len(irrelevance)
        ),
        "clarification_accuracy": _rate(
            sum(bool(r.no_call_ok) for r in clarification), len(clarification)
        ),
        "abstention_rate": _rate(*counts["abstention_rate"]),
        "malformed_call_rate": _rate(sum(r.malformed_calls for r in results), attempts),
        "malformed_by_kind": dict(sorted(kinds.items())),
        "pass_rate": _rate(*counts["pass_rate"]),
        "error_rate": _rate(sum(r.error is not None for r in results), n),
        "fallback_turn_rate": _rate(
            sum(r.fallback_turns for r in results), sum(r.turns for r in results)
        ),
        "mean_turns": round(sum(r.turns for r in results) / n, 6) if n else None,
        "latency_p50_s": percentile([r.latency_s for r in results], 50),
        "latency_p95_s": percentile([r.latency_s for r in results], 95),
        "model_latency_p50_s": percentile(model_latencies, 50),
        "model_latency_p95_s": percentile(model_latencies, 95),
        "mean_prompt_tokens": round(sum(r.prompt_tokens for r in results) / n, 3) if n else None,
        "mean_completion_tokens": (
            round(sum(r.completion_tokens for r in results) / n, 3) if n else None
        ),
    }


def per_tool(results: Iterable[CaseResult]) -> dict[str, dict[str, Any]]:
    """Per expected tool: how often it was called when expected, its argument accuracy,
    and how often it was called when NOT expected (a false positive)."""
    stats: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        expected = set(r.expected_tools)
        for tool in expected:
            stats[tool]["cases"] += 1
            stats[tool]["called"] += tool in r.called_tools
        for tool, hit in r.expected_matched:
            stats[tool]["expected_calls"] += 1
            stats[tool]["matched_calls"] += hit
        for tool in set(r.called_tools) - expected:
            stats[tool]["unexpected_calls"] += 1
    return {
        tool: {
            "cases": s["cases"],
            "selection_recall": _rate(s["called"], s["cases"]),
            "argument_accuracy": _rate(s["matched_calls"], s["expected_calls"]),
            "unexpected_calls": s["unexpected_calls"],
        }
        for tool, s in sorted(stats.items())
    }


def pass_hat_k(successes: Sequence[Sequence[bool]], k_max: int) -> dict[str, float]:
    """pass^k for k = 1..k_max over cases with at least k_max samples each."""
    usable = [s for s in successes if len(s) >= k_max]
    out: dict[str, float] = {}
    for k in range(1, k_max + 1):
        if not usable:
            break
        total = sum(math.comb(sum(s), k) / math.comb(len(s), k) for s in usable)
        out[str(k)] = round(total / len(usable), 6)
    return out


def aggregate(results: Sequence[CaseResult], k_max: int) -> dict[str, Any]:
    """Overall, by category, by tool (sample 0 only) and pass^k (all samples)."""
    main = [r for r in results if r.sample == 0]
    by_category: dict[str, list[CaseResult]] = defaultdict(list)
    by_language: dict[str, list[CaseResult]] = defaultdict(list)
    for r in main:
        by_category[r.category].append(r)
        by_language[r.language or "unknown"].append(r)
    samples: dict[str, list[bool]] = defaultdict(list)
    for r in sorted(results, key=lambda r: r.sample):
        samples[r.case_id].append(r.passed)
    multi = [s for s in samples.values() if len(s) > 1]
    return {
        "overall": summarise(main),
        "by_category": {c: summarise(rs) for c, rs in sorted(by_category.items())},
        "by_language": {lang: summarise(rs) for lang, rs in sorted(by_language.items())},
        "by_tool": per_tool(main),
        "pass_hat_k": pass_hat_k(multi, k_max) if k_max > 1 and multi else {},
        "pass_hat_k_cases": len(multi),
    }
