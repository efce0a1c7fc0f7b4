"""Which model a CPU run hands to the gate (`training/cpu_backend/candidate_choice.py`):
GRPO's, unless on the quick eval's rows it is worse than its SFT start with the paired 90%
interval wholly below zero; and the per-row results the choice reads (`quick_eval.py`)."""

from __future__ import annotations

import pytest

from training.cpu_backend.candidate_choice import MIN_CASES, choose, continued
from training.cpu_backend.quick_eval import CASE_RESULTS, case_results, report_view
from training.evaluation.metrics import headline_counts
from training.evaluation.scoring import CaseResult


def tool_row(index: int, *, parseable: bool, right_tool: bool, passed: bool) -> CaseResult:
    return CaseResult(
        case_id=f"case-{index}",
        category="single",
        call_attempts=1,
        malformed_calls=0 if parseable else 1,
        selection_ok=right_tool,
        exact_calls=right_tool and passed,
        passed=passed,
    )


def no_tool_row(index: int, *, passed: bool) -> CaseResult:
    return CaseResult(
        case_id=f"none-{index}", category="irrelevance", no_call_ok=passed, passed=passed
    )


def stage(rows: int, broken: int, *, no_tool: int = 8) -> list[CaseResult]:
    """`rows` tool rows, the first `broken` of them malformed (so neither right nor passed),
    and `no_tool` abstentions, all passed."""
    tool = [
        tool_row(i, parseable=i >= broken, right_tool=i >= broken, passed=i >= broken)
        for i in range(rows)
    ]
    return tool + [no_tool_row(i, passed=True) for i in range(no_tool)]


def test_a_grpo_model_that_breaks_the_call_format_hands_over_the_sft_model() -> None:
    """The fresh-clone demo's case: parseable 75% -> 52% on the same rows."""
    choice = choose(stage(36, broken=9), stage(36, broken=17))
    assert choice.stage == "sft"
    assert "parseable" in choice.reason and "the candidate is the SFT model" in choice.reason
    parseable = choice.paired["parseable"]
    assert parseable["cases"] == 36 and parseable["ci90_high"] < 0
    assert parseable["difference"] == pytest.approx(-8 / 36, abs=1e-4)
    assert choice.as_dict()["stage"] == "sft"


def test_the_same_model_or_a_better_one_stays_grpos() -> None:
    same = choose(stage(36, broken=9), stage(36, broken=9))
    better = choose(stage(36, broken=9), stage(36, broken=2))
    assert same.stage == better.stage == "grpo"
    assert "not measurably worse" in same.reason and "pass +0.0 points" in same.reason
    assert better.paired["parseable"]["difference"] > 0


def test_one_row_worse_is_noise_not_a_reason() -> None:
    """One row worse of 36: its interval reaches zero, so the choice does not step back."""
    assert choose(stage(36, broken=9), stage(36, broken=10)).stage == "grpo"


def test_fewer_rows_than_the_floor_decide_nothing() -> None:
    few = MIN_CASES - 1
    choice = choose(stage(few, broken=0, no_tool=0), stage(few, broken=few, no_tool=0))
    assert choice.stage == "grpo"  # every row broken, but too few rows to say so
    assert choice.paired["parseable"]["cases"] == few


def test_a_worse_no_tool_side_shows_in_pass() -> None:
    """GRPO that starts calling tools on questions that need none: abstentions fail, and the
    pass rate (every row) is what carries it."""
    sft = stage(20, broken=0, no_tool=20)
    grpo = stage(20, broken=0, no_tool=0) + [no_tool_row(i, passed=i < 8) for i in range(20)]
    choice = choose(sft, grpo)
    assert (
        choice.stage == "sft" and choice.reason.count(" points [") == 1 and "pass" in choice.reason
    )


@pytest.mark.parametrize("missing", ["sft", "grpo", "both"])
def test_without_rows_of_both_stages_grpos_model_stays_and_says_why(missing: str) -> None:
    rows = stage(36, broken=9)
    sft, grpo = ([] if missing in ("sft", "both") else rows), ([] if missing != "sft" else rows)
    choice = choose(sft, grpo)
    assert choice.stage == "grpo" and "no quick-eval rows of both stages" in choice.reason


def test_rows_the_stages_do_not_share_are_not_compared() -> None:
    sft = stage(36, broken=0)
    grpo = [row.model_copy(update={"case_id": f"other-{row.case_id}"}) for row in stage(36, 36)]
    choice = choose(sft, grpo)
    assert choice.stage == "grpo" and choice.paired["pass"] == {"cases": 0}
    assert "no quick-eval rows of both stages" in choice.reason


def test_a_blocks_rows_round_trip_and_the_report_leaves_them_out() -> None:
    rows = stage(4, broken=1, no_tool=2)
    block = {
        "rows": 6,
        "examples": ["..."],
        CASE_RESULTS: [r.model_dump(mode="json") for r in rows],
    }
    assert case_results(block) == rows
    assert report_view(block) == {"rows": 6}


@pytest.mark.parametrize(
    "block",
    [None, {}, {CASE_RESULTS: "junk"}, {CASE_RESULTS: [{"case_id": 3, "nonsense": True}]}],
)
def test_a_block_without_readable_rows_gives_none(block: dict[str, object] | None) -> None:
    """An eval cache written before rows were kept, or a damaged one: no rows, no crash."""
    assert case_results(block) == []


def test_parseable_is_one_definition_per_case_and_in_the_rate() -> None:
    rows = [
        tool_row(0, parseable=True, right_tool=True, passed=True),
        tool_row(1, parseable=False, right_tool=False, passed=False),
        CaseResult(case_id="silent", category="single", selection_ok=False),  # no call made
        no_tool_row(0, passed=True),
    ]
    assert [r.parseable for r in rows] == [True, False, False, None]
    assert headline_counts(rows)["parseable_rate"] == (1, 3)


def test_a_run_continued_from_the_champion_keeps_grpos_model_and_says_why() -> None:
    choice = continued()
    assert choice.stage == "grpo" and "continued from the champion" in choice.reason
    assert choice.paired == {}
