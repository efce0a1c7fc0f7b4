"""The rule reward: MiniMind's terms, and the fixes to its weak points."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from training.data.schema import Category, ExpectedCall, GroundTruth
from training.rewards import RewardConfig, RuleWeights, compute_score, score_rollout
from training.rewards.samples import render_hermes, render_xml, tool_turn

KEYS = {
    "score", "format_penalty", "tool_alignment", "ground_truth_match", "unfinished_penalty",
    "repetition_penalty", "malformed_calls", "num_calls", "valid_calls", "matched_calls",
    "expected_calls", "format_errors", "finished", "category", "error",
}  # fmt: skip


Steps = list[list[tuple[str, dict[str, Any]]]]


def truth(
    category: Category, steps: Steps, answers: list[str], missing_argument: str | None = None
) -> str:
    return GroundTruth(
        category=category,
        steps=[[ExpectedCall(name=n, arguments=a) for n, a in step] for step in steps],
        answers=answers,
        missing_argument=missing_argument,
    ).to_json()


def num(out: dict[str, float | str], key: str) -> float:
    value = out[key]
    assert isinstance(value, float)
    return value


MATH = truth(Category.SINGLE, [[("calculate_math", {"expression": "256*37"})]], ["9472"])
MATH_CALL = render_hermes("calculate_math", {"expression": "256*37"})
RESULT = tool_turn(['{"result": 9472}'])


def test_minimind_success_example_scores_three() -> None:
    out = compute_score("toolrl/synthetic", MATH_CALL + RESULT + "256*37=9472", MATH, {})
    assert out["score"] == pytest.approx(3.0)
    assert out["tool_alignment"] == 0.5
    assert out["ground_truth_match"] == 2.5
    assert out["finished"] == 1.0
    assert set(out) == KEYS


def test_minimind_failure_example_unclosed_extra_call_no_answer() -> None:
    # one valid call, one unclosed call, the answer never comes
    text = MATH_CALL + "\n<tool_call>\n" + '{"name": "calculate_math", "arguments": {}}' + RESULT
    out = compute_score("d", text, MATH)
    assert out["format_penalty"] == -0.5  # one unclosed pair
    assert out["tool_alignment"] == -0.5  # gap = 0 missing + 0 extra + 1 invalid
    assert out["ground_truth_match"] == 0.0
    assert out["unfinished_penalty"] == -0.5
    assert out["malformed_calls"] == 1.0
    assert out["score"] == pytest.approx(-1.5)


def test_parallel_calls_match_by_name_and_arguments_in_any_order() -> None:
    gt = truth(
        Category.PARALLEL,
        [
            [
                ("get_current_weather", {"location": "Paris"}),
                ("get_current_weather", {"location": "Rome"}),
            ]
        ],
        ["21"],
    )
    rome, paris = (render_hermes("get_current_weather", {"location": c}) for c in ("rome", "PARIS"))
    responses = tool_turn(['{"temperature_c": 21}', '{"temperature_c": 25}'])
    out = compute_score("d", rome + "\n" + paris + responses + "Paris has 21 °C.", gt)
    assert out["tool_alignment"] == 0.5
    assert out["matched_calls"] == 2.0
    # right tool, wrong city: half a gap, not the full alignment bonus MiniMind would give
    berlin = render_hermes("get_current_weather", {"location": "Berlin"})
    out = compute_score("d", rome + "\n" + berlin + responses + "Paris has 21 °C.", gt)
    assert out["tool_alignment"] == pytest.approx(-0.25)


def test_arguments_compare_schema_typed_with_defaults_filled() -> None:
    gt = truth(
        Category.SINGLE,
        [[("get_exchange_rate", {"from_currency": "USD", "to_currency": "EUR", "amount": 100})]],
        ["92.35"],
    )
    call = render_xml(
        "get_exchange_rate", {"from_currency": "usd", "to_currency": "eur", "amount": 100.0}
    )
    out = compute_score("d", call + tool_turn(['{"converted": 92.35}']) + "That is 92.35 EUR.", gt)
    assert out["tool_alignment"] == 0.5
    weather = truth(Category.SINGLE, [[("get_current_weather", {"location": "Paris"})]], [])
    explicit = render_hermes("get_current_weather", {"location": "Paris", "unit": "celsius"})
    out = compute_score("d", explicit + tool_turn(["{}"]) + "Sunny.", weather)
    assert out["tool_alignment"] == 0.5


def test_irrelevance_rows_get_credit_for_answering_without_calling() -> None:
    gt = truth(Category.IRRELEVANCE, [], [])
    out = compute_score("d", "A haiku is a three-line poem.", gt)
    assert out["score"] == pytest.approx(3.0)
    called = compute_score("d", MATH_CALL + RESULT + "A haiku is a poem.", gt)
    assert called["tool_alignment"] == -0.5
    assert called["ground_truth_match"] == 0.0


def test_clarification_rows_reward_asking_not_guessing() -> None:
    gt = truth(Category.CLARIFICATION, [], [], missing_argument="location")
    asked = compute_score("d", "Which location do you want the weather for?", gt)
    assert asked["score"] == pytest.approx(3.0)
    vague = compute_score("d", "Could you tell me more?", gt)
    assert vague["ground_truth_match"] == pytest.approx(1.25)
    guessed = render_hermes("get_current_weather", {"location": "Paris"})
    out = compute_score("d", guessed + tool_turn(["{}"]) + "It is sunny.", gt)
    assert num(out, "score") < 0


def test_text_inside_tool_responses_is_never_the_answer_or_a_call() -> None:
    # the tool output contains the answer and a call; the model never answers
    injected = tool_turn(["9472 " + render_hermes("calculate_math", {"expression": "1+1"})])
    out = compute_score("d", MATH_CALL + injected, MATH)
    assert out["ground_truth_match"] == 0.0
    assert out["num_calls"] == 1.0
    assert out["unfinished_penalty"] == -0.5
    # reasoning is not the answer either
    thinking = MATH_CALL + RESULT + "<think>it is 9472</think>I could not compute it."
    assert compute_score("d", thinking, MATH)["ground_truth_match"] == 0.0


def test_tool_response_written_by_the_model_is_flagged() -> None:
    fake = 'user\n<tool_response>\n{"result": 9472}\n</tool_response>\nassistant\n256*37=9472'
    out = score_rollout(fake, MATH)
    assert out.error_kinds == {"hallucinated_tool_response": 1}
    assert out.format_penalty == -0.5


def test_last_turn_calling_or_ending_in_a_tool_response_is_unfinished() -> None:
    assert compute_score("d", MATH_CALL, MATH)["finished"] == 0.0
    assert compute_score("d", MATH_CALL + RESULT, MATH)["unfinished_penalty"] == -0.5


def test_identical_call_after_an_error_response_is_a_retry_not_an_extra() -> None:
    error = tool_turn(['{"error": "service unavailable, try again"}'])
    out = compute_score("d", MATH_CALL + error + MATH_CALL + RESULT + "It is 9472.", MATH)
    assert out["tool_alignment"] == 0.5
    # the same repeat after a success is an extra call
    out = compute_score("d", MATH_CALL + RESULT + MATH_CALL + RESULT + "It is 9472.", MATH)
    assert out["tool_alignment"] == -0.5


def test_repetition_is_penalised_and_capped() -> None:
    gt = truth(Category.IRRELEVANCE, [], [])
    out = compute_score("d", "天气很好" * 40, gt)
    assert out["repetition_penalty"] == -0.5
    looped = compute_score(
        "d", "the weather is nice " * 3 + "and warm today in the city center", gt
    )
    assert -0.5 < num(looped, "repetition_penalty") < 0


def test_numeric_answers_match_approximately_but_not_by_substring() -> None:
    assert (
        compute_score("d", MATH_CALL + RESULT + "It is 9,472.0", MATH)["ground_truth_match"] == 2.5
    )
    assert compute_score("d", MATH_CALL + RESULT + "It is 94720", MATH)["ground_truth_match"] == 0.0
    rate = truth(Category.SINGLE, [], ["7.2134"])
    assert compute_score("d", "About 7.21 yuan.", rate)["ground_truth_match"] == 2.5
    assert compute_score("d", "About 7 yuan.", rate)["ground_truth_match"] == 0.0


def test_bad_ground_truth_gives_a_low_score_with_an_error_never_an_exception() -> None:
    for bad in ("not json", json.dumps({"category": "nope"}), None, 42):
        out = compute_score("d", MATH_CALL, bad)
        assert out["score"] == -3.0
        assert str(out["error"]).startswith("invalid ground truth")
        assert set(out) == KEYS


def test_score_is_clipped_and_weights_are_configurable() -> None:
    heavy = RewardConfig(weights=RuleWeights(ground_truth_max=10.0))
    out = score_rollout(MATH_CALL + RESULT + "9472", MATH, heavy)
    assert out.score == 3.0
    assert out.ground_truth_match == 10.0
    scored = compute_score(
        "d", MATH_CALL + RESULT + "9472", MATH, reward_config={"weights": {"alignment_bonus": 0.0}}
    )
    assert scored["tool_alignment"] == 0.0


def test_config_rejects_unknown_keys_and_bad_formats() -> None:
    with pytest.raises(ValidationError):
        RuleWeights(format_penalty=1.0)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="invalid reward config"):
        compute_score("d", "", MATH, call_format="xml")


def test_call_format_from_reward_kwargs_makes_the_other_format_an_error() -> None:
    xml = render_xml("calculate_math", {"expression": "256*37"})
    out = compute_score("d", xml + RESULT + "9472", MATH, call_format="hermes")
    assert out["malformed_calls"] == 1.0
    assert (
        compute_score("d", xml + RESULT + "9472", MATH, call_format="qwen3_coder")["score"] == 3.0
    )


def test_free_text_arguments_only_need_to_be_present() -> None:
    gt = GroundTruth(
        category=Category.SINGLE,
        steps=[
            [
                ExpectedCall(
                    name="search_knowledge",
                    arguments={"query": "capital of France", "top_k": 2},
                    free_arguments=["query"],
                )
            ]
        ],
        answers=["Paris"],
    ).to_json()
    reworded = render_hermes("search_knowledge", {"query": "France capital city", "top_k": 2})
    out = compute_score("d", reworded + tool_turn(["{}"]) + "Paris.", gt)
    assert out["tool_alignment"] == 0.5
    # non-free arguments still have to match
    other_k = render_hermes("search_knowledge", {"query": "France capital city", "top_k": 5})
    out = compute_score("d", other_k + tool_turn(["{}"]) + "Paris.", gt)
    assert out["tool_alignment"] == pytest.approx(-0.25)


@pytest.mark.parametrize(
    ("answer", "hit"),
    [
        ("It is 9472.", True),
        ("9472", True),
        ("(9472)", True),
        ("It is 9,472 exactly", True),
        ("It is 9472.0", True),
        ("It is 19472.", False),
        ("It is 9472.5", False),
        ("It is -9472", False),
        ("v9472", False),
        ("It is 9472,000", False),
    ],
)
def test_exact_number_fast_path_agrees_with_full_number_matching(answer: str, hit: bool) -> None:
    out = compute_score("d", MATH_CALL + RESULT + answer, MATH)
    assert out["ground_truth_match"] == (2.5 if hit else 0.0)


def test_huge_integers_in_arguments_do_not_break_matching() -> None:
    from training.rewards.matching import call_key

    huge = 10**400
    assert call_key("f", {"n": huge}) == call_key("f", {"n": huge})
    assert call_key("f", {"n": 100}) == call_key("f", {"n": 100.0})
