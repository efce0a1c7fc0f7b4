"""Two models on the same cases (`training/evaluation/paired.py`): the figures every "did
this stage help" answer in the benchmarks and the demo's table is read from."""

from __future__ import annotations

from training.evaluation.paired import paired_against, paired_by_category
from training.evaluation.scoring import CaseResult


def case(case_id: str, category: str, exact: bool | None, passed: bool) -> CaseResult:
    return CaseResult(case_id=case_id, category=category, exact_calls=exact, passed=passed)


FIELDS = {"exact_call": "exact_calls", "pass": "passed"}


def test_a_category_that_falls_shows_although_the_overall_figure_rises() -> None:
    before = [case(f"s{i}", "single", False, False) for i in range(6)] + [
        case(f"m{i}", "multi_step", True, True) for i in range(4)
    ]
    after = [case(f"s{i}", "single", True, True) for i in range(6)] + [
        case(f"m{i}", "multi_step", i < 2, i < 2) for i in range(4)
    ]
    overall = paired_against(before, after, FIELDS)
    assert overall["exact_call"]["difference"] == 0.4  # (+6 - 2) / 10
    by_category = paired_by_category(before, after, FIELDS)
    assert by_category["single"]["exact_call"]["difference"] == 1.0
    falling = by_category["multi_step"]["exact_call"]
    assert (falling["before"], falling["after"], falling["ci90_high"]) == (1.0, 0.5, 0.0)


def test_only_cases_both_answered_and_the_field_applies_to_are_paired() -> None:
    before = [case("a", "single", True, True), case("b", "irrelevance", None, False)]
    after = [
        case("a", "single", False, False),
        case("b", "irrelevance", None, True),
        case("c", "single", True, True),  # the baseline never answered it: left out
    ]
    by_category = paired_by_category(before, after, FIELDS)
    assert by_category["single"]["exact_call"]["cases"] == 1
    assert "exact_call" not in by_category["irrelevance"]  # no tool expected: no exact call
    assert by_category["irrelevance"]["pass"]["difference"] == 1.0
