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


def two_call_case(case_id: str, called: list[str], matched: list[bool]) -> CaseResult:
    tool = "get_current_weather"
    return CaseResult(
        case_id=case_id,
        category="parallel",
        expected_tools=[tool, tool],
        called_tools=called,
        selection_ok=sorted(called) == [tool, tool],
        expected_matched=[(tool, ok) for ok in matched],
        exact_calls=all(matched),
        passed=all(matched),
    )


def test_the_call_share_tells_a_dropped_wrong_call_from_a_lost_right_one() -> None:
    """Two-call cases where the start made a right first call and a wrong second one: a model
    that stops after the right call loses "right tool" but no right call; one that loses the
    right call too loses the share."""
    tool = "get_current_weather"
    fields = {"tool_selection": "selection_ok", "exact_call_share": "exact_call_share"}
    before = [two_call_case(f"p{i}", [tool, tool], [True, False]) for i in range(4)]
    stops = [two_call_case(f"p{i}", [tool], [True, False]) for i in range(4)]
    loses = [two_call_case(f"p{i}", [tool], [False, False]) for i in range(4)]
    dropped = paired_against(before, stops, fields)
    assert dropped["tool_selection"]["difference"] == -1.0
    assert dropped["exact_call_share"]["before"] == dropped["exact_call_share"]["after"] == 0.5
    assert dropped["exact_call_share"]["difference"] == 0.0
    lost = paired_against(before, loses, fields)
    assert lost["exact_call_share"]["difference"] == -0.5
    assert lost["exact_call_share"]["ci90_high"] == -0.5
    # a case that expects no call has no share: it is left out, not counted as 0
    no_call = CaseResult(case_id="n", category="irrelevance", no_call_ok=True, passed=True)
    assert no_call.exact_call_share is None
    assert paired_against([no_call], [no_call], fields)["exact_call_share"] == {"cases": 0}
