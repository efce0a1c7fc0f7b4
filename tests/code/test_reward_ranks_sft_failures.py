"""The rule reward ranks what an SFT'd small model gets wrong below what it gets right.

GRPO can only fix a failure its reward scores lower than the correct rollout of the same
prompt (the group advantage is the difference). The failure kinds are the ones the demo's
SFT checkpoint makes (issue 31, `benchmarks/results/cpu_training*.json` by category):
an extra call added to a single question, wrong arguments, a final answer that ignores the
tool's result, a call where none is needed, and no recovery after a tool error (the mock
server's faults). Each is scored against the correct rollout of the same ground truth, and
the component that carries the difference is named, so a reweighting that silently made a
failure free would fail here.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serving.toolcalls.registry import active_registry
from training.data.schema import Category, ExpectedCall, GroundTruth
from training.rewards import compute_score
from training.rewards.config import RewardConfig, RuleWeights
from training.rewards.rule import score_rollout
from training.rewards.samples import render_hermes, tool_turn

MATH = GroundTruth(
    category=Category.SINGLE,
    steps=[[ExpectedCall(name="calculate_math", arguments={"expression": "256*37"})]],
    answers=["9472"],
).to_json()
NO_CALL = GroundTruth(category=Category.IRRELEVANCE, steps=[], answers=[]).to_json()
CALL = render_hermes("calculate_math", {"expression": "256*37"})
RESULT = tool_turn(['{"result": 9472}'])
FAULT = tool_turn(['{"error": "service unavailable, try again"}'])
CORRECT = CALL + RESULT + "256 x 37 = 9472."

#: failure -> (rollout, ground truth, the component that must be lower than when correct)
FAILURES = {
    "extra call on a single question": (
        CALL + render_hermes("calculate_math", {"expression": "37*256"}) + RESULT + RESULT
        + "256 x 37 = 9472.",
        MATH,
        "tool_alignment",
    ),
    "wrong arguments": (
        render_hermes("calculate_math", {"expression": "256*38"})
        + tool_turn(['{"result": 9728}']) + "256 x 37 = 9728.",
        MATH,
        "tool_alignment",
    ),
    "answer ignores the tool's result": (CALL + RESULT + "It is about 9000.", MATH,
                                         "ground_truth_match"),
    "no recovery after a tool error": (CALL + FAULT + "Sorry, the tool failed.", MATH,
                                       "ground_truth_match"),
    "missing call (answers from memory)": ("256 x 37 = 9472.", MATH, "tool_alignment"),
}  # fmt: skip


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_each_failure_scores_below_the_correct_rollout(failure: str) -> None:
    text, truth, component = FAILURES[failure]
    right, wrong = compute_score("d", CORRECT, truth), compute_score("d", text, truth)
    assert float(wrong["score"]) < float(right["score"]), failure
    assert float(wrong[component]) < float(right[component]), (failure, component)


def test_a_call_where_none_is_needed_scores_below_answering() -> None:
    answer = "I can't check flights, but I can help with maths, weather or time."
    called = CALL + RESULT + answer
    right, wrong = compute_score("d", answer, NO_CALL), compute_score("d", called, NO_CALL)
    assert float(wrong["score"]) < float(right["score"])
    assert float(wrong["tool_alignment"]) < float(right["tool_alignment"])
    assert float(wrong["ground_truth_match"]) < float(right["ground_truth_match"])


def test_recovering_from_a_tool_error_scores_as_high_as_no_error() -> None:
    """The retry after a fault is not an extra call: recovery is worth the full score."""
    recovered = CALL + FAULT + CORRECT
    assert (
        compute_score("d", recovered, MATH)["score"] == compute_score("d", CORRECT, MATH)["score"]
    )


CHAIN = GroundTruth(
    category=Category.MULTI_STEP,
    steps=[
        [ExpectedCall(name="calculate_math", arguments={"expression": "256*37"})],
        [ExpectedCall(name="calculate_math", arguments={"expression": "9472/4"})],
    ],
    answers=["2368"],
).to_json()
STOPPED = CALL + RESULT + "256 x 37 = 9472."
TRIED_NEXT = (
    CALL + RESULT + render_hermes("calculate_math", {"expression": "9472/5"})
    + tool_turn(['{"result": 1894.4}']) + "Each gets 1894.4."
)  # fmt: skip
CHAIN_DONE = (
    CALL + RESULT + render_hermes("calculate_math", {"expression": "9472/4"})
    + tool_turn(['{"result": 2368}']) + "Each gets 2368."
)  # fmt: skip


def _alignment(text: str, weights: RuleWeights) -> float:
    config = RewardConfig(weights=weights)
    return score_rollout(text, CHAIN, config, active_registry()).tool_alignment


def test_missing_call_gap_makes_stopping_a_chain_early_cost_more_than_trying_its_next_call() -> (
    None
):
    """The 16-step GRPO run learned to answer multi-step questions after one call
    (`docs/parts/cpu_backend.md`): a call left out costs as much as a call too many by
    default. `missing_call_gap` above 1 charges the early stop more than a next call with
    the right tool and wrong arguments; the default leaves every score as pinned."""
    default, doubled = RuleWeights(), RuleWeights(missing_call_gap=2.0)
    assert _alignment(STOPPED, default) == -0.5  # one missing call
    assert _alignment(TRIED_NEXT, default) == -0.25  # one right-tool-wrong-arguments call
    assert _alignment(STOPPED, doubled) == -1.0
    assert _alignment(TRIED_NEXT, doubled) == -0.25
    assert _alignment(CHAIN_DONE, doubled) == _alignment(CHAIN_DONE, default) == 0.5


def test_missing_call_gap_refuses_out_of_range_values() -> None:
    for bad in (-1.0, 5.0):
        with pytest.raises(ValidationError, match="missing_call_gap"):
            RuleWeights(missing_call_gap=bad)
