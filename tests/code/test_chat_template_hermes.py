"""The project's ChatML + hermes template (what a package model is prepared with): it renders
tools, assistant calls and tool results, round-trips through the project's parser, passes
TRL's training checks, and marks exactly the assistant turns for the loss.

The tokenizer here is the offline Qwen one (it has the same ChatML tokens), so the template
is tested without converting the 98 MB model; `tests/integration/test_smollm2_model.py`
runs the real one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.toolcalls import parse_tool_calls
from serving.tools import get_catalog
from training.model.prepare import chat_template
from training.model.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tok = build_tokenizer(tmp_path_factory.mktemp("tok"), "hermes", 8_192)
    tok.chat_template = chat_template()
    return tok


def calls(*pairs: tuple[str, dict[str, Any] | str]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in pairs]


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Weather in Paris and in 北京?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": calls(
            ("get_current_weather", {"location": "Paris"}),
            ("get_current_weather", '{"location": "北京", "unit": "celsius"}'),
        ),
    },
    {"role": "tool", "name": "get_current_weather", "content": '{"temperature_c": 18}'},
    {"role": "tool", "name": "get_current_weather", "content": '{"temperature_c": 25}'},
    {"role": "assistant", "content": "Paris 18 C, Beijing 25 C."},
]


def render(tokenizer: Any, messages: list[dict[str, Any]], **kw: Any) -> str:
    return str(
        tokenizer.apply_chat_template(
            messages, tools=get_catalog().openai_schemas(), tokenize=False, **kw
        )
    )


def test_every_tool_is_listed_with_required_and_optional_arguments(tokenizer: Any) -> None:
    text = render(tokenizer, CONVERSATION[:2], add_generation_prompt=True)
    for tool in get_catalog():
        assert f"\n- {tool.name}(" in text
    assert "get_current_weather(location: string, unit?: celsius|fahrenheit)" in text
    assert "  from_unit: Unit of the value, e.g. 'km', 'degF', 'pound'" in text
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n")
    assert text.endswith(
        "<|im_start|>user\nWeather in Paris and in 北京?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_the_tool_list_is_far_shorter_than_json_schemas(tokenizer: Any) -> None:
    compact = len(tokenizer(render(tokenizer, CONVERSATION[:2]))["input_ids"])
    schemas = "\n".join(json.dumps(t) for t in get_catalog().openai_schemas())
    assert compact < 0.6 * len(tokenizer(schemas)["input_ids"])


def test_calls_and_results_render_in_the_hermes_layout(tokenizer: Any) -> None:
    text = render(tokenizer, CONVERSATION)
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_current_weather", "arguments": '
        '{"location": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_current_weather", '
        '"arguments": {"location": "北京", "unit": "celsius"}}\n</tool_call><|im_end|>\n'
    ) in text
    assert (
        '<|im_start|>user\n<tool_response>\n{"temperature_c": 18}\n</tool_response>\n'
        '<tool_response>\n{"temperature_c": 25}\n</tool_response><|im_end|>\n'
    ) in text
    assert text.endswith("<|im_start|>assistant\nParis 18 C, Beijing 25 C.<|im_end|>\n")


def test_rendered_calls_round_trip_through_the_project_parser(tokenizer: Any) -> None:
    cases: list[list[tuple[str, dict[str, Any]]]] = [
        [("get_current_weather", {"location": "Paris"})],
        [("translate_text", {"text": 'say "hi"\nand <b>', "target_language": "french"})],
        [("calculate_math", {"expression": "sqrt(2)*10"})],
        [("lookup_price", {"product": "café ☕", "currency": "EUR"})],
        [("get_current_time", {"timezone": "Asia/Tokyo"}), ("get_current_time", {})],
    ]
    for expected in cases:
        turn_calls = calls(*expected)
        messages = [
            *CONVERSATION[:2],
            {"role": "assistant", "content": "", "tool_calls": turn_calls},
        ]
        text = render(tokenizer, messages)
        turn = text.rsplit("<|im_start|>assistant\n", 1)[1].removesuffix("<|im_end|>\n")
        parsed = parse_tool_calls(turn, "hermes")
        assert not parsed.errors, (expected, parsed.errors)
        assert [(c.name, dict(c.arguments)) for c in parsed.calls] == expected


def test_trl_accepts_it_for_training(tokenizer: Any) -> None:
    from trl.chat_template_utils import (
        get_training_chat_template,
        has_generation_markers,
        is_chat_template_prefix_preserving,
    )

    assert has_generation_markers(tokenizer.chat_template)
    assert is_chat_template_prefix_preserving(tokenizer)
    assert get_training_chat_template(tokenizer) is None  # usable as it is


def test_assistant_mask_covers_exactly_the_assistant_turns(tokenizer: Any) -> None:
    out = tokenizer.apply_chat_template(
        CONVERSATION,
        tools=get_catalog().openai_schemas(),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained.count("<tool_call>") == 2
    assert "Paris 18 C, Beijing 25 C." in trained
    assert "<tool_response>" not in trained and "# Tools" not in trained
    assert trained.count("<|im_end|>") == 2  # the model learns to end its turns


def test_content_parts_and_a_missing_system_prompt_render(tokenizer: Any) -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}],
        }
    ]
    text = str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tools_without_parameters_or_descriptions_render(tokenizer: Any, tmp_path: Path) -> None:
    tools = [
        {"type": "function", "function": {"name": "ping"}},
        {
            "type": "function",
            "function": {
                "name": "x",
                "parameters": {
                    "type": "object",
                    "properties": {"v": {"anyOf": [{"type": "string"}]}},
                },
            },
        },
    ]
    text = str(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "q"}], tools=tools, tokenize=False
        )
    )
    assert "\n- ping(): " in text and "\n- x(v?: any): " in text
