"""A model server's reply split into OpenAI `tool_calls` by the project's own parser
(`serving/toolcalls/openai_calls.py`): the CPU engine server answers with this, so what a
served model's calls are is decided by the same parser that scores them in training."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from serving.toolcalls import parse_tool_calls
from serving.toolcalls.openai_calls import split_tool_calls

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["location"],
            },
        },
    }
]


def test_hermes_calls_become_tool_calls_with_the_prose_before_them() -> None:
    content, calls = split_tool_calls(
        "Checking.\n<tool_call>\n"
        '{"name": "get_current_weather", "arguments": {"location": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Oslo"}}\n'
        "</tool_call>",
        WEATHER,
    )
    assert content == "Checking."
    assert [c["function"] for c in calls] == [
        {"name": "get_current_weather", "arguments": '{"location": "Paris"}'},
        {"name": "get_current_weather", "arguments": '{"location": "Oslo"}'},
    ]
    assert len({c["id"] for c in calls}) == 2 and all(c["type"] == "function" for c in calls)


def test_xml_calls_read_values_by_the_offered_schema() -> None:
    text = (
        "<tool_call>\n<function=get_current_weather>\n<parameter=location>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    _, calls = split_tool_calls(text, WEATHER, "qwen3_coder")
    assert json.loads(calls[0]["function"]["arguments"]) == {"location": "Paris", "days": 3}


def test_unknown_tools_and_schema_violations_are_still_calls() -> None:
    """The tool server's error message is what tells the model to fix them."""
    _, calls = split_tool_calls(
        '<tool_call>\n{"name": "no_such_tool", "arguments": {"a": 1}}\n</tool_call>', WEATHER
    )
    assert calls[0]["function"]["name"] == "no_such_tool"
    _, calls = split_tool_calls(
        '<tool_call>\n{"name": "get_current_weather", "arguments": {"days": "x"}}\n</tool_call>',
        WEATHER,
    )
    assert calls[0]["function"]["name"] == "get_current_weather"


def test_malformed_replies_stay_text_for_the_client_to_judge() -> None:
    for broken in (
        '<tool_call>\n{"name": "x", "arguments": {"a": 1\n</tool_call>',
        '<tool_call>\n{"arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "x", "arguments": [1]}\n</tool_call>',
        '<tool_call>\n{"name": "x"}\n</tool_call><tool_call>\n{"name": "y"',
        '<tool_call>\n{"name": "search web!", "arguments": {}}\n</tool_call>',
        "</tool_call> stray",
    ):
        text, none = split_tool_calls(broken, WEATHER)
        assert none == [] and text == broken


def test_a_reply_without_markers_is_untouched() -> None:
    assert split_tool_calls("The weather is fine.", WEATHER) == ("The weather is fine.", [])


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('<>/{}":, \n_=abtoolcal')), max_size=200))
def test_never_raises_and_agrees_with_the_parser_on_any_text(text: str) -> None:
    content, calls = split_tool_calls(text, WEATHER)
    parsed = parse_tool_calls(text, "hermes")
    if calls:
        assert [c["function"]["name"] for c in calls] == [c.name for c in parsed.calls]
    else:
        assert content == text
