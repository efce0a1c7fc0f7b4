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

from training.data.schema import Category, ExpectedCall, GroundTruth
from training.rewards import compute_score
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
