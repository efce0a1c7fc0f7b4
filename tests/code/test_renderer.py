"""The one prompt renderer (`serving/renderer.py`): what SFT, the rollouts, the quick eval,
the engine server and the rollout budget all render through.

The key property: an in-process episode's token sequence (the prompt, the model's turn as
sampled, the tool-result suffix) is exactly what rendering the same conversation whole
gives, so the model trains on what a server of it would be shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.renderer import (
    ChatRenderer,
    RenderError,
    openai_function,
    openai_tools,
    template_ready,
)
from serving.tools import get_catalog
from training.model.prepare import chat_template
from training.model.tokenizer import build_tokenizer

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Weather in Paris and in 北京?"}
CALLS = (
    '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Paris"}}\n'
    "</tool_call>\n"
    '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "北京"}}\n'
    "</tool_call>"
)
RESULTS = [
    {"role": "tool", "name": "get_current_weather", "content": '{"temperature_c": 18}'},
    {"role": "tool", "name": "get_current_weather", "content": '{"temperature_c": 25}'},
]


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory) -> ChatRenderer:
    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tok"), "hermes", 8_192)
    tokenizer.chat_template = chat_template()  # the template a package model is prepared with
    return ChatRenderer(tokenizer)


def tools() -> list[dict[str, Any]]:
    return list(get_catalog().openai_schemas())


def test_an_episode_token_sequence_is_the_whole_conversation_rendered(
    renderer: ChatRenderer,
) -> None:
    end = renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompt = renderer.ids([SYSTEM, USER], tools())
    turn = [*renderer.encode(CALLS), end]  # what the model samples, ending its turn
    suffix = renderer.tool_suffix_ids(RESULTS)
    whole = renderer.ids([SYSTEM, USER, {"role": "assistant", "content": CALLS}, *RESULTS], tools())
    assert prompt + turn + suffix == whole
    text = renderer.tokenizer.decode(suffix)
    assert text.startswith("\n<|im_start|>user\n<tool_response>\n")
    assert text.count("<tool_response>") == 2 and text.endswith("<|im_start|>assistant\n")


def test_the_system_prefix_is_what_every_prompt_with_those_tools_starts_with(
    renderer: ChatRenderer,
) -> None:
    prefix = renderer.system_prefix_ids([SYSTEM, USER], tools())
    assert prefix is not None
    for question in ("a", "What time is it in Tokyo?"):
        ids = renderer.ids([SYSTEM, {"role": "user", "content": question}], tools())
        assert ids[: len(prefix)] == prefix and len(ids) > len(prefix)
    assert renderer.system_prefix_ids([USER], tools()) is None


def test_the_assistant_mask_equals_the_templates_generation_markers(
    renderer: ChatRenderer,
) -> None:
    """The renderer takes the mask from rendering alone (any template); on the project's
    template, which has `{% generation %}` markers, it is exactly the marked tokens."""
    conversation = [
        SYSTEM,
        USER,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_current_weather", "arguments": {"location": "Paris"}},
                },
                {
                    "type": "function",
                    "function": {
                        "name": "get_current_weather",
                        "arguments": '{"location": "北京"}',
                    },
                },
            ],
        },
        *RESULTS,
        {"role": "assistant", "content": "Paris 18 C, Beijing 25 C."},
    ]
    example = renderer.training_example(conversation, tools())
    marked = renderer.tokenizer.apply_chat_template(
        template_ready(conversation),
        tools=tools(),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert example.input_ids == list(marked["input_ids"])
    assert example.assistant_mask == list(marked["assistant_masks"])
    trained = renderer.tokenizer.decode(
        [t for t, m in zip(example.input_ids, example.assistant_mask, strict=True) if m]
    )
    assert trained.count("<tool_call>") == 2 and "<tool_response>" not in trained


def test_tool_call_arguments_are_objects_for_the_template() -> None:
    ready = template_ready(
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "a", "arguments": '{"x": 1}'}},
                    {"function": {"name": "b", "arguments": "{not json"}},
                    {"function": {"name": "c", "arguments": "[1, 2]"}},
                    {"function": {"name": "d", "arguments": ""}},
                ],
            }
        ]
    )
    assert [c["function"]["arguments"] for c in ready[0]["tool_calls"]] == [{"x": 1}, {}, {}, {}]


def test_mcp_tools_and_openai_functions_render_alike() -> None:
    mcp = {"name": "f", "description": "d", "inputSchema": {"type": "object", "properties": {}}}
    converted = openai_function(mcp)
    assert converted == {
        "type": "function",
        "function": {"name": "f", "description": "d", "parameters": mcp["inputSchema"]},
    }
    assert openai_function(converted) == converted
    assert openai_tools([mcp, {"name": ""}, {"inputSchema": "junk", "name": "g"}]) == [
        converted,
        {
            "type": "function",
            "function": {
                "name": "g",
                "description": "",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]


def test_a_template_that_fails_is_a_render_error_naming_the_cause(tmp_path: Path) -> None:
    tokenizer = build_tokenizer(tmp_path, "hermes", 8_192)
    tokenizer.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(RenderError, match="roles must alternate"):
        ChatRenderer(tokenizer).text([USER])


def test_a_template_that_rewrites_history_cannot_give_a_mask(tmp_path: Path) -> None:
    """Qwen3's own template drops the think block of earlier turns: no assistant span is a
    prefix of the whole, and the renderer says so instead of masking the wrong tokens."""
    tokenizer = build_tokenizer(tmp_path, "hermes", 8_192)
    renderer = ChatRenderer(tokenizer, {"enable_thinking": False})
    conversation = [
        USER,
        {"role": "assistant", "content": "ok"},
        USER,
        {"role": "assistant", "content": "fine"},
    ]
    with pytest.raises(RenderError, match="earlier turns"):
        renderer.training_example(conversation)


def test_suffix_needs_tool_messages(renderer: ChatRenderer) -> None:
    with pytest.raises(ValueError, match="at least one tool message"):
        renderer.tool_suffix_ids([])
    assert json.loads(RESULTS[0]["content"]) == {"temperature_c": 18}
