"""The tool-call parser: calls out of both formats, and each format-error kind it reports."""

from __future__ import annotations

import pytest

from serving.toolcalls import FormatErrorKind, ToolRegistry, parse_tool_calls
from training.rewards.samples import render_hermes, render_xml

K = FormatErrorKind


def kinds(text: str, fmt: str = "auto", registry: ToolRegistry | None = None) -> list[str]:
    return sorted(e.kind.value for e in parse_tool_calls(text, fmt, registry).errors)  # type: ignore[arg-type]


def test_hermes_call_is_parsed_and_validated_with_defaults() -> None:
    result = parse_tool_calls(render_hermes("get_current_weather", {"location": "Paris"}))
    assert [(c.name, c.arguments) for c in result.calls] == [
        ("get_current_weather", {"location": "Paris"})
    ]
    assert result.calls[0].cleaned == {"location": "Paris", "unit": "celsius"}
    assert result.errors == []
    assert result.malformed_count == 0


def test_xml_values_are_converted_by_the_tool_schema() -> None:
    text = render_xml("get_exchange_rate", {"from_currency": "USD", "to_currency": "EUR"})
    text = text.replace("</function>", "<parameter=amount>\n100\n</parameter>\n</function>")
    (call,) = parse_tool_calls(text, "qwen3_coder").calls
    assert call.arguments == {"from_currency": "USD", "to_currency": "EUR", "amount": 100}
    assert call.valid
    # an integer parameter keeps a non-numeric value as a string, which then fails the schema
    bad = render_xml("search_knowledge", {"query": "x"}).replace(
        "</function>", "<parameter=top_k>\nthree\n</parameter>\n</function>"
    )
    (call,) = parse_tool_calls(bad).calls
    assert call.arguments["top_k"] == "three"
    assert [e.kind for e in call.errors] == [K.SCHEMA_VIOLATION]


def test_multiline_string_values_keep_inner_newlines() -> None:
    text = render_xml("translate_text", {"text": "line one\nline two", "target_language": "french"})
    (call,) = parse_tool_calls(text).calls
    assert call.arguments["text"] == "line one\nline two"


def test_parallel_calls_and_leading_reasoning_are_fine() -> None:
    text = (
        "I will look both up.\n"
        + render_hermes("get_current_weather", {"location": "Paris"})
        + "\n"
        + render_hermes("get_current_time", {"timezone": "Europe/Paris"})
    )
    result = parse_tool_calls(text)
    assert [c.name for c in result.calls] == ["get_current_weather", "get_current_time"]
    assert result.errors == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '<tool_call>\n{"name": "calculate_math", "arguments": {"expression": "1"}}',
            ["unclosed_tag"],
        ),
        ("hello </tool_call>", ["stray_closing_tag"]),
        (
            '<tool_call>{"name": "calculate_math", "arguments": {"expression": 2*3}}</tool_call>',
            ["bad_json"],
        ),
        ('<tool_call>{"name": "calculate_math"}</tool_call>', ["bad_structure"]),
        ('<tool_call>{"name": "calculate_math", "arguments": "{}"}</tool_call>', ["bad_structure"]),
        ('<tool_call>{"name": "fly_to_moon", "arguments": {}}</tool_call>', ["unknown_function"]),
        (
            '<tool_call>{"name": "get_current_weather英文", "arguments": {}}</tool_call>',
            ["garbage_in_name"],
        ),
        (
            '<tool_call>{"name": "get_current_weather", "arguments": {"city": "X"}}</tool_call>',
            ["schema_violation"],
        ),
        ("<function=get_current_time>\n</function>", ["bare_call"]),
        ("<tool_call>\njust words\n</tool_call>", ["bad_structure"]),
        (
            '<tool_call id="1">{"name": "get_current_time", "arguments": {}}</tool_call>',
            ["stray_attribute"],
        ),
    ],
)
def test_each_error_kind_is_reported(text: str, expected: list[str]) -> None:
    assert kinds(text) == expected


def test_text_after_the_last_call_and_calls_after_answer_prose() -> None:
    call = render_hermes("get_current_time", {})
    assert kinds(call + "\nThe time is 9:30.") == ["text_after_call"]
    assert kinds(call + "\nSo the answer is 5.\n" + call) == ["call_after_answer"]


def test_wrong_format_is_an_error_only_when_a_format_is_required() -> None:
    hermes = render_hermes("get_current_time", {})
    xml = render_xml("get_current_time", {})
    assert kinds(hermes, "hermes") == []
    assert kinds(xml, "qwen3_coder") == []
    assert kinds(hermes, "qwen3_coder") == ["wrong_format"]
    assert kinds(xml, "hermes") == ["wrong_format"]
    assert kinds(xml, "auto") == []
    assert kinds(hermes, "auto") == []


def test_issue_6252_examples_with_their_own_tool_catalog() -> None:
    registry = ToolRegistry.from_openai_schemas(
        [
            {
                "name": "search_web",
                "parameters": {
                    "type": "object",
                    "properties": {"queries": {"type": "array"}},
                    "required": ["queries"],
                },
            }
        ]
    )
    garbage = (
        "need a source.</think><tool_call>\n<function=search_web英文明确>\n<parameter=queries>\n"
        '["Japan annual GDP latest year nominal GDP official statistic"]\n</parameter>\n'
        "</function>\n</tool_call>"
    )
    assert kinds(garbage, "qwen3_coder", registry) == ["garbage_in_name"]
    stray = (
        "<tool_call>\n<function=search_web>\n<parameter=queries>\n"
        '["XRP latest news January 2026"]\n</parameter v2="">\n</function v2="">\n</tool_call>'
    )
    result = parse_tool_calls(stray, "qwen3_coder", registry)
    assert sorted(e.kind.value for e in result.errors) == ["stray_attribute", "stray_attribute"]
    assert result.calls[0].arguments == {"queries": ["XRP latest news January 2026"]}
    clean = stray.replace(' v2=""', "")
    assert parse_tool_calls(clean, "qwen3_coder", registry).errors == []


def test_unclosed_parameter_and_function_are_reported() -> None:
    text = "<tool_call>\n<function=get_current_time>\n<parameter=timezone>\nUTC\n</tool_call>"
    assert kinds(text) == ["unclosed_tag", "unclosed_tag"]


def test_non_string_input_does_not_raise() -> None:
    result = parse_tool_calls(None)  # type: ignore[arg-type]
    assert result.calls == []
    assert result.errors[0].kind is K.BAD_STRUCTURE


def test_well_formed_turns_take_the_fast_path() -> None:
    from serving.toolcalls import catalog_registry, split_transcript
    from serving.toolcalls.fast_path import parse_well_formed
    from training.rewards.samples import make_samples

    for sample in make_samples(20, seed=5, malformed_share=0.0):
        for turn in split_transcript(sample.transcript).turns:
            if "<tool_call>" in turn:
                assert parse_well_formed(turn, "auto", catalog_registry()) is not None
    stray = render_xml("get_current_time", {}).replace("</function>", '</function v2="">')
    assert parse_well_formed(stray, "auto", catalog_registry()) is None
