"""Chat-message completions (TRL, the agent loop) score like the verl transcript."""

from __future__ import annotations

from typing import Any

from training.data.schema import Category, ExpectedCall, GroundTruth
from training.rewards import compute_score
from training.rewards.messages import transcript_from_messages
from training.rewards.samples import render_hermes, tool_turn

GT = GroundTruth(
    category=Category.SINGLE,
    steps=[[ExpectedCall(name="calculate_math", arguments={"expression": "256*37"})]],
    answers=["9472"],
).to_json()


def test_parsed_tool_calls_are_rendered_back_and_score_like_verl_text() -> None:
    messages: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "calculate_math", "arguments": '{"expression": "256*37"}'},
                }
            ],
        },
        {"role": "tool", "content": '{"result": 9472}'},
        {"role": "assistant", "content": "256*37 = 9472"},
    ]
    text = transcript_from_messages(messages)
    verl_text = (
        render_hermes("calculate_math", {"expression": "256*37"})
        + tool_turn(['{"result": 9472}'])
        + "256*37 = 9472"
    )
    assert text == verl_text
    assert compute_score("d", text, GT) == compute_score("d", verl_text, GT)
    assert compute_score("d", text, GT)["score"] == 3.0


def test_xml_rendering_and_unparsed_arguments_are_kept() -> None:
    messages: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [{"function": {"name": "calculate_math", "arguments": "{bad"}}],
        },
    ]
    text = transcript_from_messages(messages, "qwen3_coder")
    assert text.startswith("Let me compute.\n<tool_call>\n<function=calculate_math>")
    out = compute_score("d", text, GT, call_format="qwen3_coder")
    assert out["malformed_calls"] == 1.0
    assert out["finished"] == 0.0
