"""The quick eval's rates: right-tool over rows that need tools (as the full eval's
tool_selection_accuracy), abstention over rows that need none, so a model that never calls
scores 0% right tool instead of the no-call rows' share."""

from __future__ import annotations

import json
from typing import Any

import pytest

from training.cpu_backend.metrics import _Conversation, _summarise
from training.rewards.config import RewardConfig

DATE_TRUTH = {
    "answers": ["2026-06-22"],
    "category": "single",
    "missing_argument": None,
    "results": [[{"days": 832, "result": "2026-06-22", "start_date": "2024-03-12"}]],
    "schema_version": 1,
    "steps": [
        [
            {
                "arguments": {"days": 832, "operation": "add_days", "start_date": "2024-03-12"},
                "free_arguments": [],
                "name": "date_calculator",
            }
        ]
    ],
}
NO_TOOL_TRUTH = {"answers": [], "category": "irrelevance", "results": [], "steps": []}
RIGHT = (
    '<tool_call>\n{"name": "date_calculator", "arguments": {"days": 832, '
    '"operation": "add_days", "start_date": "2024-03-12"}}\n</tool_call>'
)
WRONG = '<tool_call>\n{"name": "get_current_time", "arguments": {"timezone": "UTC"}}\n</tool_call>'


def conversation(truth: dict[str, Any], turns: list[str]) -> _Conversation:
    row = {"reward_model": {"ground_truth": json.dumps(truth)}, "extra_info": {"index": 0}}
    responses = [['{"result": "2026-06-22"}'] if "<tool_call>" in t else [] for t in turns]
    return _Conversation(row, [], turns=turns, responses=responses)


def summarise(conversations: list[_Conversation]) -> Any:
    return _summarise(conversations, RewardConfig(call_format="hermes"), 1.0, 0)


def test_right_tool_counts_tool_rows_and_abstention_no_call_rows() -> None:
    result = summarise(
        [
            conversation(DATE_TRUTH, [RIGHT, "The result is 2026-06-22."]),
            conversation(DATE_TRUTH, [WRONG, "It is noon."]),
            conversation(DATE_TRUTH, [WRONG, "It is noon."]),
            conversation(NO_TOOL_TRUTH, ["Rain taps the glass."]),
            conversation(NO_TOOL_TRUTH, ["Rain again."]),
            conversation(NO_TOOL_TRUTH, [WRONG, "Done."]),
        ]
    )
    assert result.tool_selection == pytest.approx(1 / 3)  # not (1 + 2) / 6
    assert result.abstention_rate == pytest.approx(2 / 3)
    assert result.exact_arguments == pytest.approx(1 / 3)
    assert result.parseable_rate == pytest.approx(1.0)


def test_a_model_that_never_calls_chooses_no_tool_right() -> None:
    result = summarise(
        [
            conversation(DATE_TRUTH, ["I cannot help."]),
            conversation(NO_TOOL_TRUTH, ["Rain taps the glass."]),
        ]
    )
    assert result.tool_selection == 0.0
    assert result.abstention_rate == 1.0


@pytest.mark.parametrize(
    "turn", ["<tool_call>\n{not json</tool_call>", "<tool_call>", "\x00<tool_call>\n[]\n"]
)
def test_malformed_calls_never_count_as_a_right_tool(turn: str) -> None:
    result = summarise([conversation(DATE_TRUTH, [turn])])
    assert result.tool_selection == 0.0
    assert result.parseable_rate == 0.0
