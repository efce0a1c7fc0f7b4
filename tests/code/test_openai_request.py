"""serving/openai_request.py: one rule and one sentence per OpenAI request field, the ones
the front door and the engine server both answer with."""

from __future__ import annotations

import json
from typing import Any

import pytest

import serving.openai_request as fields
from serving.openai_request import OpenAIRequestError, StreamFlags


def refused(check: Any, *args: Any) -> str:
    with pytest.raises(OpenAIRequestError) as caught:
        check(*args)
    assert caught.value.status == 400 and caught.value.kind == "invalid_request_error"
    return caught.value.message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"temperature": "hot"}, "temperature must be a number between 0 and 2"),
        ({"temperature": 2.5}, "temperature must be a number between 0 and 2"),
        ({"temperature": True}, "temperature must be a number between 0 and 2"),
        ({"temperature": float("nan")}, "temperature must be a number between 0 and 2"),
    ],
)
def test_temperature_is_a_number_from_0_to_2(body: dict[str, Any], message: str) -> None:
    assert refused(fields.temperature, body) == message


def test_sampling_numbers_pass_through_or_are_absent() -> None:
    assert fields.temperature({"temperature": 0}) == 0.0
    assert fields.temperature({"temperature": None}) is None
    assert fields.top_p({"top_p": 1}) == 1.0
    assert fields.top_p({}) is None
    assert refused(fields.top_p, {"top_p": 0}) == "top_p must be a number in (0, 1]"
    assert fields.seed({"seed": 7}) == 7
    assert refused(fields.seed, {"seed": 1.5}) == "seed must be an integer"


def test_the_newer_token_budget_name_wins_and_both_are_checked() -> None:
    assert fields.max_tokens({"max_tokens": 5, "max_completion_tokens": 9}) == 9
    assert fields.max_tokens({"max_tokens": 5}) == 5
    assert fields.max_tokens({}) is None
    assert fields.max_tokens({"max_tokens": 10**9}) == 10**9  # no limit: the caller caps
    message = refused(fields.max_tokens, {"max_completion_tokens": 9, "max_tokens": 0}, 100)
    assert message == "max_tokens must be an integer between 1 and 100"
    assert refused(fields.max_tokens, {"max_tokens": 101}, 100).startswith("max_tokens must be")
    assert refused(fields.max_tokens, {"max_tokens": -3}) == "max_tokens must be a positive integer"
    assert refused(fields.max_tokens, {"max_completion_tokens": 2.5}, 100).startswith(
        "max_completion_tokens must be an integer"
    )


def test_stop_is_a_string_or_up_to_four_non_empty_strings() -> None:
    assert fields.stop({"stop": "END"}) == ["END"]
    assert fields.stop({"stop": []}) == []
    assert fields.stop({}) == []
    for bad in ([1], ["a", ""], ["a", "b", "c", "d", "e"], {"a": 1}):
        assert refused(fields.stop, {"stop": bad}).startswith("stop must be a string or a list")


def test_n_must_be_one_with_the_endpoints_reason() -> None:
    fields.single_choice({})
    fields.single_choice({"n": 1})
    assert refused(fields.single_choice, {"n": 2}) == "n must be 1"
    why = "the front door runs one episode per request"
    assert refused(fields.single_choice, {"n": 2}, why) == f"n must be 1: {why}"
    assert refused(fields.single_choice, {"n": "2"}) == "n must be an integer"


def test_stream_flags() -> None:
    assert fields.stream_flags({}) == StreamFlags(False, False)
    assert fields.stream_flags({"stream": None}) == StreamFlags(False, False)
    assert fields.stream_flags({"stream": True}) == StreamFlags(True, False)
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    assert fields.stream_flags(usage) == StreamFlags(True, True)
    assert refused(fields.stream_flags, {"stream": "yes"}) == "stream must be a boolean"
    assert refused(fields.stream_flags, {"stream_options": {}}) == (
        "stream_options is only allowed when stream is true"
    )
    assert refused(fields.stream_flags, {"stream": True, "stream_options": []}) == (
        "stream_options must be an object"
    )
    assert refused(
        fields.stream_flags, {"stream": True, "stream_options": {"include_usage": 1}}
    ) == ("stream_options.include_usage must be a boolean")


def test_tool_choice_is_a_mode_or_one_named_function() -> None:
    assert fields.tool_choice({}) == "auto"
    assert fields.tool_choice({"tool_choice": "required"}) == "required"
    named = {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    assert fields.tool_choice(named) == "get_weather"
    for bad in (7, "always", {"type": "function"}, {"type": "function", "function": {"name": ""}}):
        assert refused(fields.tool_choice, {"tool_choice": bad}).startswith("tool_choice must be")


def test_messages_must_be_a_non_empty_list_under_the_cap() -> None:
    assert fields.message_list({"messages": [{"role": "user"}]}) == [{"role": "user"}]
    bodies: list[dict[str, Any]] = [{}, {"messages": []}, {"messages": "hi"}]
    for body in bodies:
        assert refused(fields.message_list, body) == "messages must be a non-empty list"
    assert refused(fields.message_list, {"messages": [{}, {}]}, 1) == "at most 1 messages"


def test_the_body_must_be_a_json_object_and_deep_nesting_is_a_400() -> None:
    assert fields.json_object(json.dumps({"a": 1}).encode()) == {"a": 1}
    for raw in (b"{not json", b"\xff\xfe\xfa", b"[" * 100_000 + b"]" * 100_000):
        assert refused(fields.json_object, raw) == "the request body is not valid JSON"
    assert refused(fields.json_object, b"[1, 2]") == "the request body must be a JSON object"
