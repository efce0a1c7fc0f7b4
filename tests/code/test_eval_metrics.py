"""Metric arithmetic (pass^k, percentiles, per-tool) and the HTML report's escaping."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from training.evaluation.metrics import aggregate, pass_hat_k, percentile, summarise
from training.evaluation.report import EvalReport, EvalSource, render_html
from training.evaluation.scoring import CaseResult


def test_pass_hat_k_is_the_tau_bench_estimator() -> None:
    # case A: 3 of 4 samples pass; case B: all 4 pass
    result = pass_hat_k([[True, True, True, False], [True] * 4], 4)
    assert result["1"] == pytest.approx((3 / 4 + 1) / 2)
    assert result["2"] == pytest.approx((math.comb(3, 2) / math.comb(4, 2) + 1) / 2)
    assert result["4"] == pytest.approx(0.5)


@given(st.lists(st.lists(st.booleans(), min_size=3, max_size=3), min_size=1, max_size=20))
def test_pass_hat_k_never_increases_with_k(samples: list[list[bool]]) -> None:
    values = list(pass_hat_k(samples, 3).values())
    assert all(a >= b - 1e-9 for a, b in itertools.pairwise(values))
    assert all(0.0 <= v <= 1.0 for v in values)


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile([], 50) is None


def case(case_id: str, sample: int = 0, **fields: object) -> CaseResult:
    base: dict[str, object] = {"case_id": case_id, "sample": sample, "category": "single"}
    return CaseResult.model_validate(base | fields)


def test_summary_denominators_and_per_tool() -> None:
    results = [
        case("a", expected_tools=["t"], called_tools=["t"], call_attempts=1, selection_ok=True,
             expected_matched=[("t", True)], exact_calls=True, passed=True, turns=2),
        case("b", expected_tools=["t"], called_tools=["u"], call_attempts=2, malformed_calls=1,
             malformed_kinds=["bad_json"], selection_ok=False, expected_matched=[("t", False)],
             exact_calls=False, turns=3),
        case("c", category="irrelevance", no_call_ok=True, passed=True, turns=1),
    ]  # fmt: skip
    summary = summarise(results)
    assert summary["tool_call_rate"] == pytest.approx(2 / 3, abs=1e-6)
    assert summary["tool_selection_accuracy"] == 0.5
    assert summary["argument_accuracy"] == 0.5
    assert summary["malformed_call_rate"] == pytest.approx(1 / 3, abs=1e-6)
    assert summary["malformed_by_kind"] == {"bad_json": 1}
    assert summary["irrelevance_accuracy"] == 1.0
    assert summary["clarification_accuracy"] is None
    assert summary["answer_accuracy"] is None
    metrics = aggregate([*results, case("a", sample=1, passed=False)], k_max=2)
    tool = metrics["by_tool"]["t"]
    assert (tool["cases"], tool["selection_recall"], tool["argument_accuracy"]) == (2, 0.5, 0.5)
    assert metrics["by_tool"]["u"]["unexpected_calls"] == 1
    assert metrics["pass_hat_k"] == {"1": 0.5, "2": 0.0}
    assert metrics["overall"]["cases"] == 3  # extra samples only feed pass^k


def test_html_report_escapes_everything_from_the_model_and_the_data() -> None:
    evil = "<script>alert(1)</script>"
    report = EvalReport(
        created_at="now",
        source=EvalSource(endpoint=evil, model=evil, mode="chat", data_path=evil,
                          data_sha256="x", max_turns=1),
        cases_total=1,
        metrics={"overall": {"pass_rate": 0.5}, "by_category": {evil: {"pass_rate": 1.0}},
                 "by_tool": {evil: {"argument_accuracy": 0.2}}},
        failures=[{"answer": evil}],
    )  # fmt: skip
    page = render_html(report)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_html_report_gives_each_headline_rate_its_cases_and_a_90_percent_interval() -> None:
    from training.evaluation.report import rate_denominators, wilson_interval

    metrics = {
        "overall": {"cases": 96, "pass_rate": 0.395833, "tool_selection_accuracy": 0.619048},
        "by_category": {
            "single": {"cases": 30},
            "parallel": {"cases": 16},
            "multi_step": {"cases": 38},
            "irrelevance": {"cases": 7},
            "clarification": {"cases": 5},
        },
    }
    counts = rate_denominators(metrics)
    assert (counts["pass_rate"], counts["tool_selection_accuracy"]) == (96, 84)
    assert (counts["irrelevance_accuracy"], counts["clarification_accuracy"]) == (7, 5)
    low, high = wilson_interval(0.395833, 96)
    assert 0.31 < low < 0.32 and 0.47 < high < 0.49  # about +-8 points at 96 cases
    assert wilson_interval(0.0, 5) == (0.0, pytest.approx(0.351, abs=1e-3))
    assert wilson_interval(0.5, 0) == (0.0, 1.0)
    report = EvalReport(
        created_at="now",
        source=EvalSource(endpoint="e", model="m", mode="chat", data_path="d",
                          data_sha256="x", max_turns=1),
        cases_total=96,
        metrics=metrics,
    )  # fmt: skip
    page = render_html(report)
    assert f"0.396 [{low:.2f}, {high:.2f}] of 96" in page
    assert "of 84" in page
